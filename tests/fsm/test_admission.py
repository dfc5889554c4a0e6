"""Admission's pure part: what a submitter may ask for, whether a session starts at once,
and the fair order of one relay pass."""

from __future__ import annotations

from collections import Counter

import pytest
from tickwork.fsm.admission import (
    Room,
    TenantLimit,
    check_concurrency,
    check_priority,
    fair_shares,
    may_start,
)
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import IN_FLIGHT, RUNNABLE, Status


def test_queued_is_neither_runnable_nor_terminal_nor_in_flight() -> None:
    assert not Status.QUEUED.runnable and not Status.QUEUED.terminal
    assert Status.QUEUED not in IN_FLIGHT
    assert set(RUNNABLE) | {Status.WAITING_APPROVAL} <= set(IN_FLIGHT)
    assert not any(s.terminal for s in IN_FLIGHT)
    # workers move it on without a person: waits (`tickwork watch`, `Reads.wait`) go on
    assert {s for s in Status if s.moving} == {*RUNNABLE, Status.QUEUED}


@pytest.mark.parametrize("value", [-1000, 0, 7, 1000])
def test_priority_in_bounds(value: int) -> None:
    assert check_priority(value) == value


@pytest.mark.parametrize("value", [-1001, 1001, True, 1.5, "3"])
def test_priority_out_of_bounds_or_not_whole_is_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match="priority"):
        check_priority(value)


def test_concurrency_key_alone_means_one_at_a_time() -> None:
    assert check_concurrency("github.com/org/repo", None) == ("github.com/org/repo", 1)
    assert check_concurrency("repo-1", 3) == ("repo-1", 3)
    assert check_concurrency(None, None) == (None, None)


@pytest.mark.parametrize(
    ("key", "limit", "said"),
    [
        (None, 2, "needs a concurrency key"),
        ("", None, r"concurrency key \(concurrency_key\) is empty"),
        ("", 2, r"concurrency key \(concurrency_key\) is empty"),
        ("has space", None, "not valid"),
        ("-starts-with-dash", None, "not valid"),
        ("x" * 201, None, "not valid"),
        ("ok\n", None, "not valid"),
        ("ok", 0, "out of bounds"),
        ("ok", 10_001, "out of bounds"),
        # the limit first: a user told to add a key was then told that 0 is out of bounds
        (None, 0, "out of bounds"),
        ("ok", True, "whole number"),
    ],
)
def test_bad_concurrency_is_refused_saying_what(key: object, limit: object, said: str) -> None:
    with pytest.raises(InvalidInput, match=said):
        check_concurrency(key, limit)


def test_a_limit_per_key_of_0_is_refused_in_plain_words() -> None:
    """`--max-per-key 0` said "give 1 to 10000 (how many sessions of key ... )": read as
    giving 1 to something named 10000, and silent on what 0 was taken for (elsewhere 0 is
    "no budget"): here it is not "no limit", and the message says how to have none."""
    with pytest.raises(InvalidInput) as refused:
        check_concurrency("ci", 0)
    assert refused.value.message == (
        "max_per_key 0 is out of bounds: give a whole number from 1 to 10000, how many "
        "sessions of the concurrency key may be in flight at once (for no limit per key, "
        "leave out the key and max_per_key)"
    )


def test_may_start_under_every_limit_and_never_past_a_queue() -> None:
    two = TenantLimit(max_in_flight=2)
    assert may_start(two, in_flight=1, queued_ahead=False)
    assert not may_start(two, in_flight=2, queued_ahead=False)
    assert not may_start(two, in_flight=0, queued_ahead=True)
    assert may_start(TenantLimit(), in_flight=10_000, queued_ahead=False)
    assert not may_start(
        TenantLimit(), in_flight=0, queued_ahead=False, key_in_flight=1, max_per_key=1
    )
    assert may_start(TenantLimit(), in_flight=0, queued_ahead=False, key_in_flight=1, max_per_key=2)


def test_fair_shares_goes_to_the_least_busy_for_its_weight() -> None:
    rooms = [
        Room(tenant="a", in_flight=8, room=100),
        Room(tenant="b", in_flight=0, room=3),
    ]
    order = fair_shares(rooms, budget=6)
    # b has nothing in flight: its three go first, then a's
    assert order == ["b", "b", "b", "a", "a", "a"]


def test_fair_shares_follows_the_weights_when_both_are_busy() -> None:
    rooms = [
        Room(tenant="a", in_flight=0, room=1000, weight=1.0),
        Room(tenant="b", in_flight=0, room=1000, weight=3.0),
    ]
    shares = Counter(fair_shares(rooms, budget=400))
    assert shares == {"a": 100, "b": 300}


def test_fair_shares_keeps_to_the_budget_and_the_rooms() -> None:
    rooms = [Room(tenant="a", in_flight=0, room=2), Room(tenant="b", in_flight=5, room=0)]
    assert fair_shares(rooms, budget=10) == ["a", "a"]
    assert fair_shares(rooms, budget=1) == ["a"]
    assert fair_shares([], budget=10) == []


def test_tenant_limit_refuses_a_weight_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="weight"):
        TenantLimit(weight=0)
