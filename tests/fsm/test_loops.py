"""Loop detection over step fingerprints (docs/DESIGN.md section 4)."""

from __future__ import annotations

import pytest
from tickwork.fsm.loops import Loop, LoopKind, detect_loop, intervention_text


@pytest.mark.parametrize(
    ("history", "repeats", "expected"),
    [
        pytest.param("", 3, None, id="empty"),
        pytest.param("A", 3, None, id="one"),
        pytest.param("AA", 3, None, id="two_of_three"),
        pytest.param("AAA", 3, LoopKind.STAGNATION, id="exactly_three"),
        pytest.param("BAAA", 3, LoopKind.STAGNATION, id="three_after_another"),
        pytest.param("AAB", 3, None, id="broken_by_newest"),
        pytest.param("AABAA", 3, None, id="run_interrupted"),
        pytest.param("AAAA", 3, LoopKind.STAGNATION, id="four_of_three"),
        pytest.param("AA", 2, LoopKind.STAGNATION, id="two_of_two"),
        pytest.param("A", 2, None, id="one_of_two"),
        pytest.param("AAAA", 5, None, id="four_of_five"),
        pytest.param("AAAAA", 5, LoopKind.STAGNATION, id="five_of_five"),
        pytest.param("A", 1, LoopKind.STAGNATION, id="one_of_one"),
    ],
)
def test_stagnation_at_exactly_max_consecutive_repeats(
    history: str, repeats: int, expected: LoopKind | None
) -> None:
    loop = detect_loop(list(history), max_consecutive_repeats=repeats)
    assert (loop.kind if loop else None) is expected
    if loop is not None:
        assert loop.period == 1
        assert loop.repeats == len(history) - len(history.rstrip(history[-1]))


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param("ABAB", LoopKind.PING_PONG, id="ABAB"),
        pytest.param("CABAB", LoopKind.PING_PONG, id="ABAB_after_C"),
        pytest.param("BABAB", LoopKind.PING_PONG, id="longer_alternation"),
        pytest.param("AAAA", LoopKind.STAGNATION, id="AAAA_is_stagnation"),
        pytest.param("ABAC", None, id="ABAC"),
        pytest.param("ABBA", None, id="ABBA"),
        pytest.param("BAB", None, id="only_three"),
        pytest.param("ABCABC", None, id="period_three_not_required"),
    ],
)
def test_ping_pong(history: str, expected: LoopKind | None) -> None:
    loop = detect_loop(list(history))
    assert (loop.kind if loop else None) is expected


def test_ping_pong_reports_period_two() -> None:
    assert detect_loop(["a", "b", "a", "b"]) == Loop(kind=LoopKind.PING_PONG, period=2, repeats=2)


def test_default_is_three_repeats() -> None:
    assert detect_loop(["x", "x"]) is None
    assert detect_loop(["x", "x", "x"]) is not None


@pytest.mark.parametrize("repeats", [2, 3, 4, 7])
def test_repeats_are_configurable(repeats: int) -> None:
    assert detect_loop(["x"] * (repeats - 1), max_consecutive_repeats=repeats) is None
    found = detect_loop(["x"] * repeats, max_consecutive_repeats=repeats)
    assert found is not None and found.kind is LoopKind.STAGNATION


@pytest.mark.parametrize(
    ("loop", "words"),
    [
        (Loop(kind=LoopKind.STAGNATION, period=1, repeats=3), "3 times in a row"),
        (Loop(kind=LoopKind.PING_PONG, period=2, repeats=2), "alternating"),
    ],
)
def test_intervention_says_what_was_detected_and_asks_for_a_change(loop: Loop, words: str) -> None:
    text = intervention_text(loop)
    assert words in text
    assert "Change your approach" in text
    assert "not run" in text
