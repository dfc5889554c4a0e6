"""The `Relay` sub-port: the outbox and the leases as the relay reads them."""

from __future__ import annotations

import pytest

from tickwork.fsm.values import EventKind, Status
from tickwork.store.liveness import new_key
from tickwork.store.owners import signed
from tickwork.store.port import Store
from tickwork.store.relay import Due
from tickwork.testing.store_contract.base import Contract
from tickwork.testing.store_ticks import (
    LEASE_S,
    Clock,
    claim,
    new_session,
    reply,
    think,
)


class OutboxContract(Contract):
    """The outbox and the leases as the relay reads them (the `Relay` sub-port): a tick
    whose message may be lost is offered again, a dead worker's session is revived."""

    def test_a_new_runnable_session_is_offered_until_a_tick_claims_it(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        assert Due(session_id, 0) in store.due_ticks(now=clock.advance(120), older_than_s=60)

        claim(store, session_id, now=clock())

        assert Due(session_id, 0) not in store.due_ticks(now=clock.advance(120), older_than_s=60)

    def test_a_session_that_is_not_runnable_is_never_offered(
        self, store: Store, clock: Clock
    ) -> None:
        waiting = new_session("waiting", now=clock(), status=Status.WAITING_APPROVAL)
        store.create(waiting, now=clock())

        due = store.due_ticks(now=clock.advance(3600), older_than_s=60)

        assert all(d.session_id != "waiting" for d in due)

    def test_a_saved_runnable_session_offers_its_next_tick(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        head = think(store, session_id, reply(("read_file", {"path": "a"})), now=clock())

        due = store.due_ticks(now=clock.advance(120), older_than_s=60)

        assert Due(session_id, head.version) in due and Due(session_id, 0) not in due

    def test_an_expired_lease_is_revived_once_for_a_new_claim(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claim(store, session_id, now=clock(), owner="dead")
        assert store.expired_leases(now=clock.advance(LEASE_S - 1)) == []

        revived = store.expired_leases(now=clock.advance(2))

        assert [(d.session_id, d.version) for d in revived] == [(session_id, 0)]
        assert store.expired_leases(now=clock()) == []
        assert store.lease(session_id) is None
        assert claim(store, session_id, now=clock(), owner="w2").owner == "w2"

    def test_a_gone_workers_session_is_taken_over_before_its_lease_runs_out(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        key = new_key()
        sign = store.hold_sign(key)
        if sign is None:
            pytest.skip("this store keeps no signs of life: leases end by expiry only")
        claim(store, session_id, now=clock(), owner=signed("w1", key))
        unsigned = new_session("unsigned", now=clock())
        store.create(unsigned, now=clock())
        claim(store, "unsigned", now=clock(), owner="w0")
        try:
            # alive: neither taken over, nor a lease that names no sign
            assert store.workers_alive() is True, "a sign is held: `show` must not ask"
            assert key not in store.absent_signs()
            assert store.take_over([key], now=clock()) == []
        finally:
            sign.release()

        assert key in store.absent_signs()
        taken = store.take_over([key], now=clock())

        assert [(d.session_id, d.version) for d in taken] == [(session_id, 0)]
        assert store.lease(session_id) is None
        # the session's history says so, naming the worker it was taken from
        said = [e for _, e in store.events_after(session_id) if e.kind is EventKind.TAKEN_OVER]
        assert [e.data for e in said] == [{"from": signed("w1", key)}]
        assert store.lease("unsigned") is not None, "a lease without a sign waits for expiry"
        assert key not in store.absent_signs() and store.take_over([key], now=clock()) == []
        assert Due(session_id, 0) in store.due_ticks(now=clock.advance(60), older_than_s=30)
        assert claim(store, session_id, now=clock(), owner="w2").owner == "w2"

    def test_a_refused_tick_is_recorded_once_a_worker_and_version(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        said = "cannot import 'jobs' for 'jobs:GONE'"
        claimed = claim(store, session_id, now=clock(), owner="w1")
        version = claimed.head.version

        assert store.refuse_tick(session_id, version, worker="a@h", reason=said, now=clock())
        assert not store.refuse_tick(session_id, version, worker="a@h", reason=said, now=clock())
        assert store.refuse_tick(session_id, version, worker="b@h", reason=said, now=clock())
        assert not store.refuse_tick(
            session_id, version + 1, worker="c@h", reason=said, now=clock()
        )

        refused = [e for _, e in store.events_after(session_id) if e.kind is EventKind.TICK_REFUSED]
        assert [e.data for e in refused] == [
            {"worker": w, "version": version, "reason": said} for w in ("a@h", "b@h")
        ]
        assert store.get(session_id).version == version, "a refusal moves nothing"
