"""The `Ticks` sub-port: claim, save, renew (one lease or many) and start_call, the
compare-and-swap that makes a tick run once, and the leases that keep a second worker out."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tickwork.fsm import machine
from tickwork.fsm.errors import ClaimLost
from tickwork.fsm.machine import Change
from tickwork.fsm.values import (
    CallState,
    ErrorCode,
    EventKind,
    Status,
)
from tickwork.store.port import Store
from tickwork.testing.store_contract.starts import StartContract
from tickwork.testing.store_ticks import (
    LEASE_S,
    Clock,
    awaiting_calls,
    claim,
    decision,
    execute,
    new_session,
    reply,
    run_step,
    think,
    think_change,
)


class TickContract(StartContract):
    """claim, save, renew and start_call: the compare-and-swap that makes a tick run once (the
    `Ticks` sub-port; the claim that starts an idempotent call is `StartContract`'s)."""

    def test_claim_an_unknown_session_gets_nothing(self, store: Store, clock: Clock) -> None:
        assert store.claim("nope", 0, owner="w", now=clock(), lease_s=LEASE_S) is None

    def test_claim_a_suspended_session_gets_nothing(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        head = think(store, session_id, reply(("danger", {"x": 1})), now=clock())
        assert head.status is Status.WAITING_APPROVAL

        assert (
            store.claim(session_id, head.version, owner="w", now=clock(), lease_s=LEASE_S) is None
        )

    @pytest.mark.parametrize("how", ["completed", "failed", "cancelled"])
    def test_claim_a_finished_session_gets_nothing(
        self, store: Store, clock: Clock, session_id: str, how: str
    ) -> None:
        if how == "completed":
            head = think(store, session_id, reply(content="the answer"), now=clock())
        elif how == "failed":
            claimed = claim(store, session_id, now=clock())
            head = store.save(
                machine.fail(claimed.head, ErrorCode.INTERNAL, "boom", now=clock()),
                version=0,
                owner="worker-1",
                now=clock(),
            )
        else:
            store.request_cancel(session_id, now=clock())
            head = think(store, session_id, reply(), now=clock())
        assert head.status.value == how

        assert (
            store.claim(session_id, head.version, owner="w", now=clock(), lease_s=LEASE_S) is None
        )

    def test_claim_when_ready_returns_the_history_and_recent_fingerprints(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        for n in (1, 2, 3):
            run_step(store, session_id, n, now=clock())
        loaded = store.load(session_id)

        claimed = claim(store, session_id, now=clock())

        assert claimed.head == loaded.head
        assert claimed.steps == loaded.steps
        assert claimed.observations == {o.call_id: o for o in loaded.observations}
        assert claimed.recent == tuple(s.fingerprint for s in loaded.steps)
        assert len(set(claimed.recent)) == 3
        assert claimed.calls == ()
        assert claimed.decisions == {}

    def test_claim_when_executing_returns_the_current_calls_and_their_decisions(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        think(
            store,
            session_id,
            reply(("read_file", {"path": "x"}), ("danger", {"rm": "y"})),
            now=clock(),
        )
        [awaited] = awaiting_calls(store, session_id)
        approval = decision(awaited, now=clock())
        head = store.decide(session_id, approval, now=clock())
        assert head.status is Status.EXECUTING

        claimed = claim(store, session_id, now=clock())

        assert [c.call_id for c in claimed.calls] == ["s2c0", "s2c1"]
        assert [c.state for c in claimed.calls] == [CallState.PENDING, CallState.APPROVED]
        assert claimed.decisions == {"s2c1": approval}
        assert claimed.steps == ()
        assert claimed.observations == {}

    def test_claim_a_warm_think_claim_returns_the_whole_history(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        """The Store reads only the steps after those it read last time, and still gives
        the whole history with every observation made since."""
        for n in (1, 2, 3, 4):
            claimed = claim(store, session_id, now=clock())
            loaded = store.load(session_id)
            assert claimed.steps == loaded.steps
            assert claimed.observations == {o.call_id: o for o in loaded.observations}
            assert len(claimed.steps) == n - 1
            proposal = reply(("read_file", {"path": f"a{n}"}), ("read_file", {"path": f"b{n}"}))
            head = store.save(
                think_change(claimed, proposal, now=clock()),
                version=claimed.head.version,
                owner="worker-1",
                now=clock(),
            )
            while head.status is Status.EXECUTING:
                head = execute(store, session_id, now=clock(), output=f"output {n}")

    def test_save_sets_the_state_of_a_call_of_any_step(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        """The machine changes only the current step's calls today; a change that names an
        older step's call is still stored whole (the saves find it by the step its id names)."""
        run_step(store, session_id, 1, now=clock())
        claimed = claim(store, session_id, now=clock())
        change = think_change(claimed, reply(("read_file", {"path": "b"})), now=clock())
        older = change.model_copy(
            update={"call_states": ((*change.call_states, ("s1c0", CallState.IN_DOUBT)))}
        )

        store.save(older, version=claimed.head.version, owner=claimed.owner, now=clock())

        states = {c.call_id: c.state for s in store.load(session_id).steps for c in s.calls}
        assert states == {"s1c0": CallState.IN_DOUBT, "s2c0": CallState.PENDING}

    def test_save_appends_observations_and_call_states(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(("read_file", {"path": "a"})), now=clock())
        head = execute(store, session_id, now=clock(), output="hello")

        assert head.version == 2
        assert head.status is Status.READY
        session = store.load(session_id)
        assert session.steps[0].calls[0].state is CallState.DONE
        assert [(o.call_id, o.content) for o in session.observations] == [("s1c0", "hello")]

    def test_start_call_a_started_call_found_by_the_next_tick_isin_doubt_call(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(("write_file", {"path": "a"})), now=clock())
        claimed = claim(store, session_id, now=clock(), owner="w1")
        [call] = claimed.calls
        store.start_call(session_id, claimed.head.version, call, owner="w1", now=clock())

        later = claim(store, session_id, now=clock.advance(LEASE_S + 1), owner="w2")
        assert [c.state for c in later.calls] == [CallState.STARTED]
        change = machine.start_execute(
            later.head, later.calls, later.decisions, idempotent=False, now=clock()
        )
        assert isinstance(change, Change)
        head = store.save(change, version=later.head.version, owner="w2", now=clock())

        assert head.status is Status.WAITING_APPROVAL
        assert head.awaiting == ("s1c0",)
        assert store.load(session_id).steps[0].calls[0].state is CallState.IN_DOUBT

    def test_an_idempotent_call_found_started_runs_again(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(("read_file", {"path": "a"})), now=clock())
        claimed = claim(store, session_id, now=clock(), owner="dead")
        store.start_call(
            session_id, claimed.head.version, claimed.calls[0], owner="dead", now=clock()
        )

        head = execute(
            store,
            session_id,
            now=clock.advance(LEASE_S + 1),
            owner="w2",
            output="read again",
            idempotent=True,
        )

        assert head.status is Status.READY
        started = [
            e.data for _, e in store.events_after(session_id) if e.kind is EventKind.TOOL_STARTED
        ]
        assert [d["rerun"] for d in started] == [False, True]
        assert store.load(session_id).observation("s1c0").content == "read again"  # type: ignore[union-attr]

    def test_claim_succeeds_once_at_the_stored_version(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claimed = store.claim(session_id, 0, owner="w1", now=clock(), lease_s=LEASE_S)

        assert claimed is not None and claimed.owner == "w1" and claimed.head.version == 0
        assert store.lease(session_id) == ("w1", clock() + timedelta(seconds=LEASE_S))
        assert store.claim(session_id, 0, owner="w1", now=clock(), lease_s=LEASE_S) is None
        assert store.claim(session_id, 0, owner="w2", now=clock(), lease_s=LEASE_S) is None

    def test_claim_of_a_stale_or_future_version_gets_nothing(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        for version in (0, 1, 3):
            assert store.claim(session_id, version, owner="w", now=clock(), lease_s=LEASE_S) is None
        assert store.lease(session_id) is None
        assert store.claim(session_id, 2, owner="w", now=clock(), lease_s=LEASE_S) is not None

    def test_claim_a_live_lease_keeps_others_out_until_it_expires(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        first = claim(store, session_id, now=clock(), owner="w1")

        clock.advance(LEASE_S - 1)
        assert store.claim(session_id, 0, owner="w2", now=clock(), lease_s=LEASE_S) is None
        clock.advance(2)
        second = store.claim(session_id, 0, owner="w2", now=clock(), lease_s=LEASE_S)
        assert second is not None
        assert store.lease(session_id) == ("w2", clock() + timedelta(seconds=LEASE_S))

        with pytest.raises(ClaimLost):
            store.save(
                think_change(first, reply(), now=clock()), version=0, owner="w1", now=clock()
            )
        head = store.save(
            think_change(second, reply(), now=clock()), version=0, owner="w2", now=clock()
        )
        assert head.status is Status.COMPLETED

    def test_save_moves_the_version_once_and_clears_the_lease(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claimed = claim(store, session_id, now=clock())
        change = think_change(claimed, reply(("read_file", {"path": "a"})), now=clock())

        head = store.save(change, version=0, owner="worker-1", now=clock())

        assert head.version == 1 and head.status is Status.EXECUTING
        assert store.get(session_id) == head
        assert store.lease(session_id) is None
        with pytest.raises(ClaimLost):  # the same save again: the head moved
            store.save(change, version=0, owner="worker-1", now=clock())
        assert store.get(session_id).version == 1

    def test_save_by_a_worker_that_holds_no_lease_is_refused(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claimed = claim(store, session_id, now=clock(), owner="w1")
        change = think_change(claimed, reply(content="done"), now=clock())

        with pytest.raises(ClaimLost):
            store.save(change, version=0, owner="w2", now=clock())
        assert store.get(session_id).version == 0
        assert store.save(change, version=0, owner="w1", now=clock()).status is Status.COMPLETED

    def test_renew_extends_the_lease_of_its_owner_at_the_version(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claim(store, session_id, now=clock(), owner="w1")

        assert store.renew(session_id, 0, owner="w1", now=clock.advance(20), lease_s=LEASE_S)
        assert store.lease(session_id) == ("w1", clock() + timedelta(seconds=LEASE_S))
        clock.advance(LEASE_S - 1)
        assert store.claim(session_id, 0, owner="w2", now=clock(), lease_s=LEASE_S) is None

    def test_renew_refuses_anyone_else_or_another_version(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claim(store, session_id, now=clock(), owner="w1")
        expires = store.lease(session_id)

        assert not store.renew(session_id, 0, owner="w2", now=clock(), lease_s=999)
        assert not store.renew(session_id, 1, owner="w1", now=clock(), lease_s=999)
        assert not store.renew("nope", 0, owner="w1", now=clock(), lease_s=999)
        assert store.lease(session_id) == expires

    def test_renew_refuses_after_the_lease_passed_to_another(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claim(store, session_id, now=clock(), owner="w1")
        claim(store, session_id, now=clock.advance(LEASE_S + 1), owner="w2")

        assert not store.renew(session_id, 0, owner="w1", now=clock(), lease_s=LEASE_S)
        assert store.lease(session_id) == ("w2", clock() + timedelta(seconds=LEASE_S))

    def test_renew_refuses_after_the_save(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claimed = claim(store, session_id, now=clock(), owner="w1")
        store.save(
            think_change(claimed, reply(("read_file", {})), now=clock()),
            version=0,
            owner="w1",
            now=clock(),
        )

        assert not store.renew(session_id, 0, owner="w1", now=clock(), lease_s=LEASE_S)
        assert store.lease(session_id) is None

    def test_renew_leases_renews_those_still_ours_in_one_call(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        store.create(new_session("sess-2", now=clock()), now=clock())
        store.create(new_session("sess-3", now=clock()), now=clock())
        claim(store, session_id, now=clock(), owner="w1")
        claim(store, "sess-2", now=clock(), owner="w1")
        claim(store, "sess-3", now=clock(), owner="w2")
        before = store.lease("sess-2"), store.lease("sess-3")

        renewed = store.renew_leases(
            [
                (session_id, 0, "w1"),
                ("sess-2", 1, "w1"),  # not its version
                ("sess-3", 0, "w1"),  # another worker's
                ("nope", 0, "w1"),
            ],
            now=clock.advance(20),
            lease_s=LEASE_S,
        )

        assert renewed == {(session_id, 0)}
        assert store.lease(session_id) == ("w1", clock() + timedelta(seconds=LEASE_S))
        assert (store.lease("sess-2"), store.lease("sess-3")) == before
        assert store.renew_leases([], now=clock(), lease_s=LEASE_S) == set()

    def test_start_call_without_the_lease_is_claim_lost(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(("write_file", {"path": "a"})), now=clock())
        claimed = claim(store, session_id, now=clock(), owner="w1")
        call = claimed.calls[0]

        with pytest.raises(ClaimLost):
            store.start_call(session_id, claimed.head.version, call, owner="w2", now=clock())
        store.start_call(session_id, claimed.head.version, call, owner="w1", now=clock())
        [stored] = [c for s in store.load(session_id).steps for c in s.calls]
        assert stored.state is CallState.STARTED
