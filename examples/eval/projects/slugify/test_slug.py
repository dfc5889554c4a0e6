"""Tests of slug.py; run them with `python -m unittest -q`."""

import unittest

from slug import slugify


class SlugTest(unittest.TestCase):
    def test_words_are_joined_by_hyphens(self):
        assert slugify("hello world") == "hello-world"

    def test_the_slug_is_lower_case(self):
        result = slugify("Hello World")
        assert result == "hello-world", f"slugify('Hello World') returned {result!r}"

    def test_punctuation_goes(self):
        assert slugify("Tick, work!") == "tick-work"


if __name__ == "__main__":
    unittest.main()
