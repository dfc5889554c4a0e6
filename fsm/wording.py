"""How a count reads in a message or a log line: "1 session", "2 sessions"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, singular for one and else `plural` (`noun` + "s" unless given):
    `counted(1, "session")` is "1 session", `counted(2, "batch", "batches")` "2 batches"."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
