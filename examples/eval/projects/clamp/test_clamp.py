"""Tests of clamp.py; run them with `python -m unittest -q`."""

import unittest

from clamp import clamp


class ClampTest(unittest.TestCase):
    def test_within(self):
        assert clamp(5, 0, 10) == 5

    def test_above(self):
        assert clamp(15, 0, 10) == 10

    def test_below(self):
        assert clamp(-3, 0, 10) == 0


if __name__ == "__main__":
    unittest.main()
