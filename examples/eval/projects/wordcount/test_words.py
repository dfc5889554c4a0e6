"""Tests of words.py; run them with `python -m unittest -q`."""

import unittest

from words import count_words


class WordsTest(unittest.TestCase):
    def test_single_spaces(self):
        assert count_words("one two three") == 3

    def test_runs_of_spaces_count_once(self):
        result = count_words("one  two   three")
        assert result == 3, f"count_words('one  two   three') returned {result}"

    def test_nothing_has_no_words(self):
        assert count_words("") == 0


if __name__ == "__main__":
    unittest.main()
