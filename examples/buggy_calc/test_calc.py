"""Tests of calc.py; run them with `python -m unittest -q` (or `python -m pytest -q`)."""

import unittest

from calc import add, average, multiply, subtract


class CalcTest(unittest.TestCase):
    def test_add(self):
        assert add(2, 3) == 5

    def test_subtract(self):
        assert subtract(5, 3) == 2

    def test_multiply(self):
        assert multiply(4, 3) == 12

    def test_average(self):
        result = average([1, 2, 3, 4])
        assert result == 2.5, f"average([1, 2, 3, 4]) returned {result}, expected 2.5"

    def test_average_of_one_number(self):
        result = average([7])
        assert result == 7, f"average([7]) returned {result}, expected 7"

    def test_average_of_nothing(self):
        with self.assertRaises(ValueError):
            average([])


if __name__ == "__main__":
    unittest.main()
