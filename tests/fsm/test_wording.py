"""Counts in messages and logs: "1 session", never "1 sessions"."""

from __future__ import annotations

from tickwork.fsm.wording import counted


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "session") == "1 session"
    assert [counted(n, "tick") for n in (0, 2, 1000)] == ["0 ticks", "2 ticks", "1000 ticks"]
    assert counted(1, "batch", "batches") == "1 batch"
    assert counted(3, "batch", "batches") == "3 batches"
    assert counted(2, "dead letter") == "2 dead letters"
