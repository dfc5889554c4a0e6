"""The relay's log names the sessions it acts on, a bounded number a line."""

from __future__ import annotations

from tickwork.store.relay import LOGGED_IDS, Due, named


def test_the_relay_names_at_most_a_bounded_number_of_sessions_a_line() -> None:
    ticks = [Due(f"s{i}", i) for i in range(LOGGED_IDS + 5)]

    line = named(ticks, lambda t: t.session_id)

    assert line.startswith("s0, s1, ")
    assert f"s{LOGGED_IDS - 1} and 5 more" in line
    assert f"s{LOGGED_IDS}," not in line
    assert named(ticks[:2], lambda t: f"{t.session_id} v{t.version}") == "s0 v0, s1 v1"
