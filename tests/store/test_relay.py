"""tickwork.store.relay: republishing ticks whose message may be lost, recovering dead workers."""

from __future__ import annotations

import itertools
from datetime import timedelta

from sqlalchemy import insert
from tickwork.fsm import machine
from tickwork.fsm.values import EventKind
from tickwork.store import Store
from tickwork.store.relay import Due, due_ticks, expired_leases
from tickwork.store.schema import outbox

from tests.conftest import Clock
from tests.store.conftest import (
    LEASE_S,
    claim,
    lease,
    new_session,
    reply,
    run_step,
    table_rows,
    think,
    together,
)


def test_due_ticks_returns_rows_older_than_the_threshold_once(store: Store, clock: Clock) -> None:
    store.create(new_session("old", now=clock()), now=clock())
    store.create(new_session("young", now=clock.advance(20)), now=clock())

    assert due_ticks(store.engine, now=clock.advance(5), older_than_s=30) == []
    found = due_ticks(store.engine, now=clock.advance(10), older_than_s=30)

    assert found == [Due("old", 0)]
    assert {r["session_id"]: r["due_at"] for r in table_rows(store.engine, outbox)} == {
        "old": clock(),
        "young": clock() - timedelta(seconds=15),
    }
    assert due_ticks(store.engine, now=clock(), older_than_s=30) == []
    assert due_ticks(store.engine, now=clock.advance(31), older_than_s=30) == [
        Due("young", 0),
        Due("old", 0),
    ]


def test_due_ticks_publishes_a_delayed_tick_when_due_then_as_lost(
    store: Store, clock: Clock, session_id: str
) -> None:
    claimed = claim(store, session_id, now=clock())
    retry = machine.model_failed(
        claimed.head, error="503", transient=True, now=clock(), retry_after_s=60
    )
    store.save(retry, version=0, owner="worker-1", now=clock())
    (row,) = table_rows(store.engine, outbox)
    assert row["published_at"] is None

    assert due_ticks(store.engine, now=clock.advance(59), older_than_s=30) == []
    # due: published at once, not a threshold later, and not counted as a republication
    assert due_ticks(store.engine, now=clock.advance(1), older_than_s=30) == [
        Due(session_id, 1, delayed=True)
    ]
    (row,) = table_rows(store.engine, outbox)
    assert (row["published_at"], row["due_at"], row["republished"]) == (clock(), clock(), 0)
    assert due_ticks(store.engine, now=clock.advance(30), older_than_s=30) == []
    # its message lost: published again after the threshold, like any other tick
    assert due_ticks(store.engine, now=clock.advance(1), older_than_s=30) == [Due(session_id, 1)]


def test_a_tick_to_run_now_is_left_to_its_writer_until_the_threshold(
    store: Store, clock: Clock, session_id: str
) -> None:
    run_step(store, session_id, 1, now=clock())

    assert due_ticks(store.engine, now=clock.advance(29), older_than_s=30) == []
    assert table_rows(store.engine, outbox)[0]["published_at"] is not None


def test_due_ticks_deletes_rows_of_sessions_that_moved_on(store: Store, clock: Clock) -> None:
    store.create(new_session("moved", now=clock()), now=clock())
    run_step(store, "moved", 1, now=clock())
    store.create(new_session("done", now=clock()), now=clock())
    think(store, "done", reply(content="answer"), now=clock())
    with store.engine.begin() as conn:
        conn.execute(
            insert(outbox),
            [
                {"session_id": "moved", "version": 1, "due_at": clock()},
                {"session_id": "done", "version": 1, "due_at": clock()},
            ],
        )
    assert len(table_rows(store.engine, outbox)) == 3

    found = due_ticks(store.engine, now=clock.advance(60), older_than_s=30)

    assert found == [Due("moved", 2)]
    assert [(r["session_id"], r["version"]) for r in table_rows(store.engine, outbox)] == [
        ("moved", 2)
    ]


def test_due_ticks_honours_its_limit(store: Store, clock: Clock) -> None:
    for n in range(5):
        store.create(new_session(f"s{n}", now=clock.advance(1)), now=clock())

    first = due_ticks(store.engine, now=clock.advance(60), older_than_s=30, limit=3)
    rest = due_ticks(store.engine, now=clock(), older_than_s=30, limit=3)

    assert [d.session_id for d in first] == ["s0", "s1", "s2"]
    assert [d.session_id for d in rest] == ["s3", "s4"]


def test_expired_leases_requeue_the_session_for_the_next_claimer(
    store: Store, clock: Clock, session_id: str
) -> None:
    store.create(new_session("alive", now=clock()), now=clock())
    claim(store, session_id, now=clock(), owner="dead")
    claim(store, "alive", now=clock.advance(LEASE_S - 10), owner="w1")

    assert expired_leases(store.engine, now=clock.advance(5)) == []
    found = expired_leases(store.engine, now=clock.advance(6))

    assert found == [Due(session_id, 0)]
    assert lease(store.engine, session_id) == (None, None)
    assert lease(store.engine, "alive")[0] == "w1"
    assert table_rows(store.engine, outbox) == [
        {
            "session_id": session_id,
            "version": 0,
            "due_at": clock(),
            "republished": 0,
            "published_at": clock(),
        }
    ]
    assert expired_leases(store.engine, now=clock()) == []

    assert store.claim(session_id, 0, owner="w2", now=clock(), lease_s=LEASE_S) is not None
    assert table_rows(store.engine, outbox) == []


def test_a_lease_run_out_is_said_once_a_version_and_not_for_a_refused_tick(
    store: Store, clock: Clock, session_id: str
) -> None:
    """`lease_expired` names the lease that ran out, once a session and version (a tick
    that kills its worker each time would fill the events otherwise); a tick a worker
    refused is not said, its lease runs out by design at every offer of the tick."""
    store.create(new_session("refused", now=clock()), now=clock())

    def expired_events(sid: str) -> list[dict[str, object]]:
        return [e.data for _, e in store.events_after(sid) if e.kind is EventKind.LEASE_EXPIRED]

    for owner in ("w1", "w2"):  # twice at version 0
        claim(store, session_id, now=clock(), owner=owner)
        claim(store, "refused", now=clock(), owner=owner)
        store.refuse_tick("refused", 0, worker=owner, reason="no kind", now=clock())
        assert len(expired_leases(store.engine, now=clock.advance(LEASE_S + 1))) == 2

    assert expired_events(session_id) == [{"from": "w1"}]
    assert expired_events("refused") == []


def test_a_lease_run_out_is_said_after_another_node_refused_the_tick(
    store: Store, clock: Clock, session_id: str
) -> None:
    """Only the refusing node's own lease runs out by design: once a worker that can run
    the tick takes it and stops, its lease's end is said, as where no worker refused."""
    claim(store, session_id, now=clock(), owner="old@h:7:1")
    store.refuse_tick(session_id, 0, worker="old@h", reason="no kind", now=clock())
    expired_leases(store.engine, now=clock.advance(LEASE_S + 1))
    claim(store, session_id, now=clock(), owner="new@h:8:1")  # then stopped
    expired_leases(store.engine, now=clock.advance(LEASE_S + 1))

    said = [e.data for _, e in store.events_after(session_id) if e.kind is EventKind.LEASE_EXPIRED]
    assert said == [{"from": "new@h:8:1"}]


def test_expired_leases_ignore_sessions_that_are_not_runnable(
    store: Store, clock: Clock, session_id: str
) -> None:
    think(store, session_id, reply(("danger", {})), now=clock())

    assert expired_leases(store.engine, now=clock.advance(3600)) == []


def test_concurrent_relays_never_return_a_row_twice(store: Store, clock: Clock) -> None:
    for n in range(120):
        store.create(new_session(f"s{n:03d}", now=clock()), now=clock())
    now = clock.advance(60)

    def drain() -> list[Due]:
        seen: list[Due] = []
        while found := due_ticks(store.engine, now=now, older_than_s=30, limit=7):
            seen.extend(found)
        return seen

    results = together([drain] * 6)

    assert not any(isinstance(r, BaseException) for r in results), results
    returned = [d for r in results if isinstance(r, list) for d in r]
    assert len(returned) == len(set(returned)) == 120


def test_concurrent_lease_scans_never_return_a_session_twice(store: Store, clock: Clock) -> None:
    for n in range(30):
        store.create(new_session(f"s{n:03d}", now=clock()), now=clock())
        claim(store, f"s{n:03d}", now=clock(), owner="dead")
    now = clock.advance(LEASE_S + 1)

    results = together([lambda: expired_leases(store.engine, now=now, limit=4)] * 6)

    assert not any(isinstance(r, BaseException) for r in results), results
    returned = [d for r in results if isinstance(r, list) for d in r]
    assert len(returned) == len(set(returned))


def test_a_tick_republished_again_and_again_waits_longer_each_time(
    store: Store, clock: Clock, session_id: str
) -> None:
    published_at = []
    for _ in range(60):
        if due_ticks(store.engine, now=clock(), older_than_s=10):
            published_at.append(clock().timestamp())
        clock.advance(1)
    gaps = [b - a for a, b in itertools.pairwise(published_at)]
    assert gaps == sorted(gaps) and gaps[0] < gaps[-1], gaps
    assert len(published_at) <= 4


def test_a_cancel_brings_a_delayed_tick_forward(
    store: Store, clock: Clock, session_id: str
) -> None:
    claimed = claim(store, session_id, now=clock())
    retry = machine.model_failed(
        claimed.head, error="429", transient=True, now=clock(), retry_after_s=600
    )
    store.save(retry, version=0, owner="worker-1", now=clock())

    store.request_cancel(session_id, now=clock.advance(5), by="erin")

    assert due_ticks(store.engine, now=clock(), older_than_s=30) == [
        Due(session_id, 1, delayed=True)
    ]
