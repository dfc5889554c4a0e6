"""Real concurrency: threads released together, each on its own connection from the engine."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial

from tickwork.fsm.errors import AlreadyDecided, ClaimLost, SessionFinished
from tickwork.fsm.values import Head, Status
from tickwork.store import Claimed, Store
from tickwork.store.relay import Due, expired_leases
from tickwork.store.schema import decisions, outbox

from tests.conftest import Clock
from tests.store.conftest import (
    LEASE_S,
    awaiting_calls,
    claim,
    decision,
    lease,
    new_session,
    reply,
    table_rows,
    think,
    think_change,
    together,
)


def test_two_claims_of_the_same_version_have_exactly_one_winner(store: Store, clock: Clock) -> None:
    for round_ in range(20):
        session_id = f"race-{round_}"
        store.create(new_session(session_id, now=clock()), now=clock())

        results = together(
            partial(store.claim, session_id, 0, owner=owner, now=clock(), lease_s=LEASE_S)
            for owner in ("w1", "w2")
        )

        assert not any(isinstance(r, BaseException) for r in results), results
        winners = [r for r in results if isinstance(r, Claimed)]
        assert len(winners) == 1, f"round {round_}: {results}"
        assert results.count(None) == 1
        assert lease(store.engine, session_id)[0] == winners[0].owner


def test_fifty_concurrent_decisions_on_one_call_accept_exactly_one(
    store: Store, clock: Clock, session_id: str
) -> None:
    head = think(store, session_id, reply(("danger", {"rm": "-rf build"})), now=clock())
    [call] = awaiting_calls(store, session_id)

    results = together(
        partial(
            store.decide,
            session_id,
            decision(call, approver=f"person-{n:02d}", now=clock()),
            now=clock(),
        )
        for n in range(50)
    )

    accepted = [r for r in results if isinstance(r, Head)]
    refused = [r for r in results if isinstance(r, AlreadyDecided)]
    assert len(accepted) == 1, [r for r in results if not isinstance(r, AlreadyDecided)]
    assert len(refused) == 49, [r for r in results if not isinstance(r, Head | AlreadyDecided)]
    [row] = table_rows(store.engine, decisions)
    assert all(f"by {row['approver']} at" in str(r) for r in refused)
    final = store.get(session_id)
    assert (final.version, final.status, final.awaiting) == (head.version + 1, Status.EXECUTING, ())
    assert accepted[0] == final


def test_cancel_racing_the_last_decision_leaves_one_consistent_outcome(
    store: Store, clock: Clock
) -> None:
    for round_ in range(10):
        session_id = f"race-{round_}"
        store.create(new_session(session_id, now=clock()), now=clock())
        think(store, session_id, reply(("danger", {"n": round_})), now=clock())
        [call] = awaiting_calls(store, session_id)
        version = store.get(session_id).version

        decided, cancelled = together(
            [
                partial(store.decide, session_id, decision(call, now=clock()), now=clock()),
                partial(store.request_cancel, session_id, now=clock()),
            ]
        )

        final = store.get(session_id)
        assert final.cancel_requested
        if isinstance(decided, SessionFinished):
            assert isinstance(cancelled, Head)
            assert (final.status, final.version) == (Status.CANCELLED, version + 1)
            assert table_rows(store.engine, decisions, decisions.c.session_id == session_id) == []
        else:
            assert isinstance(decided, Head), decided
            assert isinstance(cancelled, Head), cancelled
            assert (final.status, final.version) == (Status.EXECUTING, version + 1)


def test_a_cancel_racing_the_save_of_the_tick_in_flight_survives(
    store: Store, clock: Clock
) -> None:
    for round_ in range(10):
        session_id = f"race-{round_}"
        store.create(new_session(session_id, now=clock()), now=clock())
        claimed = claim(store, session_id, now=clock())
        change = think_change(claimed, reply(("read_file", {"n": round_})), now=clock())

        saved, cancelled = together(
            [
                partial(store.save, change, version=0, owner=claimed.owner, now=clock()),
                partial(store.request_cancel, session_id, now=clock()),
            ]
        )

        assert isinstance(saved, Head), saved
        assert isinstance(cancelled, Head), cancelled
        final = store.get(session_id)
        assert (final.version, final.cancel_requested) == (1, True), f"round {round_}"


def test_the_relay_racing_a_late_save_lets_exactly_one_through(store: Store, clock: Clock) -> None:
    for round_ in range(10):
        session_id = f"race-{round_}"
        store.create(new_session(session_id, now=clock()), now=clock())
        claimed = claim(store, session_id, now=clock())
        change = think_change(claimed, reply(("read_file", {"n": round_})), now=clock())
        late = clock() + timedelta(seconds=LEASE_S + 1)

        racers: list[Callable[[], object]] = [
            partial(store.save, change, version=0, owner=claimed.owner, now=late),
            partial(expired_leases, store.engine, now=late),
        ]
        saved, requeued = together(racers)

        assert isinstance(requeued, list), requeued
        ours = [d for d in requeued if d.session_id == session_id]
        ticks = [
            r["version"]
            for r in table_rows(store.engine, outbox, outbox.c.session_id == session_id)
        ]
        if isinstance(saved, Head):
            assert ours == []
            assert (store.get(session_id).version, ticks) == (1, [1])
        else:
            assert isinstance(saved, ClaimLost), saved
            assert ours == [Due(session_id, 0)]
            assert (store.get(session_id).version, ticks) == (0, [0])
            assert store.claim(session_id, 0, owner="w2", now=late, lease_s=LEASE_S)
