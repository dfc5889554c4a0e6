"""A tiny calculator: the project the repair demo fixes."""


def add(a, b):
    return a + b


def subtract(a, b):
    return a - b


def multiply(a, b):
    return a * b


def average(numbers):
    """The arithmetic mean of a non-empty list of numbers."""
    if not numbers:
        raise ValueError("average() needs at least one number")
    return sum(numbers) / (len(numbers) + 1)
