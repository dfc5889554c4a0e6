"""find_call, decide and request_cancel: what a person reads and does to a session."""

from __future__ import annotations

import pytest

from tickwork.fsm import machine, transitions
from tickwork.fsm.errors import (
    AlreadyDecided,
    CallNotFound,
    CancelledMeanwhile,
    ClaimLost,
    SessionFinished,
    SessionNotFound,
)
from tickwork.fsm.machine import Change
from tickwork.fsm.values import (
    CallState,
    DecisionKind,
    EventKind,
    Status,
)
from tickwork.store.port import Store
from tickwork.testing.store_contract.base import Contract
from tickwork.testing.store_ticks import (
    LEASE_S,
    Clock,
    claim,
    decision,
    execute,
    execute_change,
    in_doubt_call,
    new_session,
    reply,
    run_step,
    think_change,
    wait_for_approval,
)


class DecisionContract(Contract):
    """find_call, decide and request_cancel: what a person reads and does to a session."""

    def test_find_call_a_waiting_call_comes_with_the_head(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")

        head, found = store.find_call(session_id, call.call_id)

        assert head == store.get(session_id)
        assert head.awaiting == (call.call_id,)
        assert found == call

    def test_find_call_a_call_of_an_earlier_step_is_found_in_its_state(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        wait_for_approval(store, session_id, clock, "danger", "read_file")

        head, found = store.find_call(session_id, "s1c0")

        assert head.step == 2
        assert found == store.load(session_id).call("s1c0")
        assert found is not None and found.state is CallState.DONE

    @pytest.mark.parametrize("call_id", ["s9c9", "S1C0", "s1c0 ", "", "s1c0\x00"])
    def test_find_call_an_unknown_call_is_none_with_the_head(
        self, store: Store, clock: Clock, session_id: str, call_id: str
    ) -> None:
        wait_for_approval(store, session_id, clock, "danger")

        head, found = store.find_call(session_id, call_id)

        assert (head, found) == (store.get(session_id), None)

    def test_find_call_a_call_of_another_session_is_not_found(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        wait_for_approval(store, session_id, clock, "danger")
        store.create(new_session("sess-2", now=clock()), now=clock())

        head, found = store.find_call("sess-2", "s1c0")

        assert (head.id, found) == ("sess-2", None)

    @pytest.mark.parametrize("unknown", ["nope", "a\x00b"])
    def test_find_call_an_unknown_session_is_not_found(
        self, store: Store, clock: Clock, session_id: str, unknown: str
    ) -> None:
        wait_for_approval(store, session_id, clock, "danger")

        with pytest.raises(SessionNotFound, match="tickwork ls"):
            store.find_call(unknown, "s1c0")

    def test_decide_edit_runs_with_the_new_arguments(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
        store.decide(
            session_id,
            decision(call, DecisionKind.EDIT, now=clock(), arguments={"n": 99}),
            now=clock(),
        )

        claimed = claim(store, session_id, now=clock())
        run = machine.start_execute(
            claimed.head, claimed.calls, claimed.decisions, idempotent=False, now=clock()
        )

        assert claimed.calls[0].state is CallState.EDITED
        assert isinstance(run, machine.RunTool)
        assert run.arguments == {"n": 99}

    def test_decide_reject_gives_the_model_the_feedback(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
        store.decide(
            session_id,
            decision(
                call, DecisionKind.REJECT, approver="bob", now=clock(), feedback="use git instead"
            ),
            now=clock(),
        )
        head = execute(store, session_id, now=clock())

        assert head.status is Status.READY
        observation = store.load(session_id).observation(call.call_id)
        assert observation is not None
        assert (observation.content, observation.is_error) == (
            "rejected by bob: use git instead",
            True,
        )
        assert not any(e.kind is EventKind.TOOL_STARTED for _, e in store.events_after(session_id))

    def test_decide_provide_output_settles_an_in_doubt_call(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        call = in_doubt_call(store, session_id, clock)

        head = store.decide(
            session_id,
            decision(call, DecisionKind.PROVIDE_OUTPUT, now=clock(), output="wrote 3 bytes"),
            now=clock(),
        )

        assert head.status is Status.EXECUTING
        session = store.load(session_id)
        assert session.call(call.call_id).state is CallState.DONE  # type: ignore[union-attr]
        assert session.observation(call.call_id).content == "wrote 3 bytes"  # type: ignore[union-attr]
        assert execute(store, session_id, now=clock()).status is Status.READY

    def test_decide_approve_of_an_in_doubt_call_runs_it_again(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        call = in_doubt_call(store, session_id, clock)
        store.decide(session_id, decision(call, now=clock()), now=clock())

        head = execute(store, session_id, now=clock(), output="again")

        assert head.status is Status.READY
        assert store.load(session_id).observation(call.call_id).content == "again"  # type: ignore[union-attr]

    def test_decide_a_call_approved_then_in_doubt_is_decided_again(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
        first = decision(call, now=clock(), approver="alice")
        store.decide(session_id, first, now=clock())
        claimed = claim(store, session_id, now=clock(), owner="dead")
        store.start_call(
            session_id, claimed.head.version, claimed.calls[0], owner="dead", now=clock()
        )
        later = claim(store, session_id, now=clock.advance(LEASE_S + 1), owner="w2")
        doubt = machine.start_execute(
            later.head, later.calls, later.decisions, idempotent=False, now=clock()
        )
        assert isinstance(doubt, Change)
        store.save(doubt, version=later.head.version, owner="w2", now=clock())

        second = decision(
            call,
            DecisionKind.PROVIDE_OUTPUT,
            approver="bob",
            now=clock.advance(1),
            output="it did run",
        )
        head = store.decide(session_id, second, now=clock())

        assert head.status is Status.EXECUTING
        session = store.load(session_id)
        assert [(d.approver, d.attempt) for d in session.decisions] == [("alice", 0), ("bob", 1)]
        assert session.decision(call.call_id) == second.model_copy(update={"attempt": 1})
        assert session.observation(call.call_id).content == "it did run"  # type: ignore[union-attr]

    def test_decide_an_unknown_call_is_not_found(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
        ghost = call.model_copy(update={"call_id": "s9c9"})

        with pytest.raises(CallNotFound, match="s9c9"):
            store.decide(session_id, decision(ghost, now=clock()), now=clock())

    def test_decide_an_unknown_session_is_not_found(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
        with pytest.raises(SessionNotFound):
            store.decide("nope", decision(call, now=clock()), now=clock())

    def test_decide_a_second_decision_once_executing_names_the_first(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
        store.decide(session_id, decision(call, approver="alice", now=clock()), now=clock())

        with pytest.raises(AlreadyDecided, match="alice"):
            store.decide(session_id, decision(call, approver="bob", now=clock()), now=clock())

    def test_decide_a_second_decision_after_the_session_moved_on_names_the_first(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
        store.decide(session_id, decision(call, approver="alice", now=clock()), now=clock())
        execute(store, session_id, now=clock())
        run_step(store, session_id, 2, now=clock())

        with pytest.raises(AlreadyDecided, match="by alice"):
            store.decide(session_id, decision(call, approver="bob", now=clock()), now=clock())

    def test_decide_a_finished_session_takes_no_decision(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
        store.request_cancel(session_id, now=clock())

        with pytest.raises(SessionFinished):
            store.decide(session_id, decision(call, now=clock()), now=clock())

    def test_request_cancel_a_runnable_session_returns_the_head_as_stored(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        head = store.request_cancel(session_id, now=clock.advance(1), by="carol")

        assert head == store.get(session_id)

    def test_request_cancel_the_tick_holding_the_lease_does_not_clear_the_flag(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claimed = claim(store, session_id, now=clock())
        change = think_change(claimed, reply(("read_file", {"path": "a"})), now=clock())
        assert not change.head.cancel_requested

        store.request_cancel(session_id, now=clock())
        head = store.save(change, version=0, owner="worker-1", now=clock())

        assert head.cancel_requested
        assert store.get(session_id).cancel_requested
        assert head.status is Status.EXECUTING
        claimed = claim(store, session_id, now=clock())
        cancelled = execute_change(store, claimed, now=clock())
        head = store.save(cancelled, version=claimed.head.version, owner="worker-1", now=clock())
        assert head.status is Status.CANCELLED
        observation = store.load(session_id).observation("s1c0")
        assert observation is not None and observation.content == "not run: session cancelled"

    def test_a_save_that_completes_a_session_cancelled_during_its_tick_ends_it_cancelled(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claimed = claim(store, session_id, now=clock())
        change = think_change(claimed, reply(content="all done"), now=clock())
        assert change.head.status is Status.COMPLETED

        store.request_cancel(session_id, now=clock(), by="carol")  # runnable: only flagged
        with pytest.raises(ClaimLost):  # not the tick's lease: lost, as ever
            store.save(change, version=0, owner="worker-2", now=clock())
        with pytest.raises(CancelledMeanwhile):
            store.save(change, version=0, owner="worker-1", now=clock())

        head = store.get(session_id)  # nothing saved, the lease still the tick's
        assert (head.status, head.version, head.step) == (Status.READY, 0, 0)
        cancelled = transitions.cancelled_meanwhile(change, clock())
        head = store.save(cancelled, version=0, owner="worker-1", now=clock())
        assert head.status is Status.CANCELLED and head == store.get(session_id)
        session = store.load(session_id)
        assert len(session.steps) == 1 and session.head.final_answer == "all done"
        kinds = [e.kind for e in session.events]
        assert kinds[-3:] == [EventKind.MODEL_CALLED, EventKind.STEP_RECORDED, EventKind.CANCELLED]
        assert EventKind.COMPLETED not in kinds

    def test_request_cancel_an_unknown_session_is_not_found(
        self, store: Store, clock: Clock
    ) -> None:
        with pytest.raises(SessionNotFound, match="nope"):
            store.request_cancel("nope", now=clock())
