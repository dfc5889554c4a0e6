"""How a count or a number reads in a message or a log line: "1 session", "2 sessions",
"1000000" (not "1e+06")."""

from __future__ import annotations

from decimal import Decimal


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, singular for one and else `plural` (`noun` + "s" unless given):
    `counted(1, "session")` is "1 session", `counted(2, "batch", "batches")` "2 batches"."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def plain(value: float) -> str:
    """`value` as a person writes it in an option, and as the option reads it back: 1000000,
    2.5, 0.000001; never 1e+06 (`:g`), never a thousands separator."""
    if float(value).is_integer():
        return str(int(value))
    return format(Decimal(repr(float(value))), "f")
