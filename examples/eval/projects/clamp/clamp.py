"""Clamping numbers: the eval demo's fourth project."""


def clamp(value, low, high):
    """`value` kept within `low` and `high`."""
    return max(low, min(value, low))
