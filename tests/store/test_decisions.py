"""find_call, decide and request_cancel: what a person reads and does to a session."""

from __future__ import annotations

import pytest
from tickwork.fsm import machine
from tickwork.fsm.errors import (
    AlreadyDecided,
    CallNotFound,
    InvalidDecision,
    NotWaiting,
    SessionFinished,
    SessionNotFound,
    StaleDecision,
)
from tickwork.fsm.machine import Change
from tickwork.fsm.values import CallState, DecisionKind, EventKind, Status, ToolCall
from tickwork.store import Store
from tickwork.store.schema import outbox, sessions

from tests.conftest import Clock
from tests.store.conftest import (
    LEASE_S,
    awaiting_calls,
    claim,
    count_rows,
    decision,
    execute,
    execute_change,
    new_session,
    reply,
    run_step,
    table_rows,
    think,
    think_change,
)


def _wait_for(store: Store, session_id: str, clock: Clock, *tools: str) -> list[ToolCall]:
    """Think a step whose calls are `tools`; return the ones waiting for a person."""
    head = think(
        store, session_id, reply(*((t, {"n": i}) for i, t in enumerate(tools))), now=clock()
    )
    assert head.status is Status.WAITING_APPROVAL
    return awaiting_calls(store, session_id)


def _in_doubt(store: Store, session_id: str, clock: Clock) -> ToolCall:
    """A call that started, whose worker then died: the next tick asks a person."""
    think(store, session_id, reply(("write_file", {"path": "a"})), now=clock())
    claimed = claim(store, session_id, now=clock(), owner="dead")
    store.start_call(session_id, claimed.head.version, claimed.calls[0], owner="dead", now=clock())
    later = claim(store, session_id, now=clock.advance(LEASE_S + 1), owner="w2")
    change = machine.start_execute(
        later.head, later.calls, later.decisions, idempotent=False, now=clock()
    )
    assert isinstance(change, Change)
    store.save(change, version=later.head.version, owner="w2", now=clock())
    [call] = awaiting_calls(store, session_id)
    assert call.state is CallState.IN_DOUBT
    return call


class TestFindCall:
    def test_a_waiting_call_comes_with_the_head(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")

        head, found = store.find_call(session_id, call.call_id)

        assert head == store.get(session_id)
        assert head.awaiting == (call.call_id,)
        assert found == call

    def test_a_call_of_an_earlier_step_is_found_in_its_state(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        _wait_for(store, session_id, clock, "danger", "read_file")

        head, found = store.find_call(session_id, "s1c0")

        assert head.step == 2
        assert found == store.load(session_id).call("s1c0")
        assert found is not None and found.state is CallState.DONE

    @pytest.mark.parametrize("call_id", ["s9c9", "S1C0", "s1c0 ", "", "s1c0\x00"])
    def test_an_unknown_call_is_none_with_the_head(
        self, store: Store, clock: Clock, session_id: str, call_id: str
    ) -> None:
        _wait_for(store, session_id, clock, "danger")

        head, found = store.find_call(session_id, call_id)

        assert (head, found) == (store.get(session_id), None)

    def test_a_call_of_another_session_is_not_found(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        _wait_for(store, session_id, clock, "danger")
        store.create(new_session("sess-2", now=clock()), now=clock())

        head, found = store.find_call("sess-2", "s1c0")

        assert (head.id, found) == ("sess-2", None)

    @pytest.mark.parametrize("unknown", ["nope", "a\x00b"])
    def test_an_unknown_session_is_not_found(
        self, store: Store, clock: Clock, session_id: str, unknown: str
    ) -> None:
        _wait_for(store, session_id, clock, "danger")

        with pytest.raises(SessionNotFound, match="tickwork ls"):
            store.find_call(unknown, "s1c0")


class TestDecide:
    def test_approve_of_the_last_awaited_call_makes_the_session_executing(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
        version = store.get(session_id).version
        assert table_rows(store.engine, outbox) == []

        head = store.decide(
            session_id, decision(call, now=clock.advance(5), comment="ok"), now=clock()
        )

        assert (head.version, head.status, head.awaiting) == (version + 1, Status.EXECUTING, ())
        assert table_rows(store.engine, outbox) == [
            {
                "session_id": session_id,
                "version": version + 1,
                "due_at": clock(),
                "republished": 0,
                "published_at": clock(),
            }
        ]
        session = store.load(session_id)
        assert session.call(call.call_id).state is CallState.APPROVED  # type: ignore[union-attr]
        assert session.decision(call.call_id) == decision(call, now=clock(), comment="ok")
        assert (session.events[-1].kind, session.events[-1].data) == (
            EventKind.APPROVAL_DECIDED,
            {"call_id": call.call_id, "decision": "approve", "approver": "alice", "comment": "ok"},
        )
        head = execute(store, session_id, now=clock(), output="ran")
        assert head.status is Status.READY

    def test_a_session_waits_until_every_awaited_call_is_decided(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        first, second = _wait_for(store, session_id, clock, "danger", "read_file", "danger")

        head = store.decide(session_id, decision(first, now=clock()), now=clock())
        assert (head.status, head.awaiting) == (Status.WAITING_APPROVAL, (second.call_id,))
        assert table_rows(store.engine, outbox) == []

        head = store.decide(
            session_id,
            decision(second, DecisionKind.REJECT, now=clock(), feedback="too risky"),
            now=clock(),
        )
        assert (head.status, head.awaiting) == (Status.EXECUTING, ())
        assert [r["version"] for r in table_rows(store.engine, outbox)] == [head.version]

    def test_edit_runs_with_the_new_arguments(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
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

    def test_reject_gives_the_model_the_feedback(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
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

    def test_provide_output_settles_an_in_doubt_call(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        call = _in_doubt(store, session_id, clock)

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

    def test_approve_of_an_in_doubt_call_runs_it_again(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        call = _in_doubt(store, session_id, clock)
        store.decide(session_id, decision(call, now=clock()), now=clock())

        head = execute(store, session_id, now=clock(), output="again")

        assert head.status is Status.READY
        assert store.load(session_id).observation(call.call_id).content == "again"  # type: ignore[union-attr]

    def test_a_call_approved_then_in_doubt_is_decided_again(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
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

    def test_an_unknown_call_is_not_found(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
        ghost = call.model_copy(update={"call_id": "s9c9"})

        with pytest.raises(CallNotFound, match="s9c9"):
            store.decide(session_id, decision(ghost, now=clock()), now=clock())

    def test_an_unknown_session_is_not_found(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
        with pytest.raises(SessionNotFound):
            store.decide("nope", decision(call, now=clock()), now=clock())

    def test_a_call_that_is_not_waiting_is_refused(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        done = store.load(session_id).steps[0].calls[0]
        calls = _wait_for(store, session_id, clock, "danger", "read_file")
        pending = store.load(session_id).call("s2c1")
        assert pending is not None and pending.state is CallState.PENDING
        before = count_rows(store.engine)

        with pytest.raises(NotWaiting, match="s1c0"):
            store.decide(session_id, decision(done, now=clock()), now=clock())
        with pytest.raises(NotWaiting, match="s2c1"):
            store.decide(session_id, decision(pending, now=clock()), now=clock())
        assert count_rows(store.engine) == before
        assert [c.call_id for c in calls] == ["s2c0"]

    def test_a_decision_on_other_arguments_is_stale_and_writes_nothing(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
        seen = decision(call, now=clock()).model_copy(update={"fingerprint": "0" * 64})
        before = count_rows(store.engine), table_rows(store.engine, sessions)

        with pytest.raises(StaleDecision, match=call.call_id):
            store.decide(session_id, seen, now=clock())

        assert (count_rows(store.engine), table_rows(store.engine, sessions)) == before

    def test_a_decision_without_an_approver_is_invalid(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
        before = count_rows(store.engine)

        with pytest.raises(InvalidDecision):
            store.decide(session_id, decision(call, approver=" ", now=clock()), now=clock())
        assert count_rows(store.engine) == before

    def test_a_second_decision_names_the_first(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        first, _ = _wait_for(store, session_id, clock, "danger", "danger")
        store.decide(session_id, decision(first, approver="alice", now=clock()), now=clock())
        before = count_rows(store.engine)

        with pytest.raises(AlreadyDecided, match=r"approve\) by alice at 2026-01-01T12:00"):
            store.decide(
                session_id,
                decision(first, DecisionKind.REJECT, approver="bob", now=clock.advance(1)),
                now=clock(),
            )
        assert count_rows(store.engine) == before

    def test_a_second_decision_once_executing_names_the_first(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
        store.decide(session_id, decision(call, approver="alice", now=clock()), now=clock())

        with pytest.raises(AlreadyDecided, match="alice"):
            store.decide(session_id, decision(call, approver="bob", now=clock()), now=clock())

    def test_a_second_decision_after_the_session_moved_on_names_the_first(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
        store.decide(session_id, decision(call, approver="alice", now=clock()), now=clock())
        execute(store, session_id, now=clock())
        run_step(store, session_id, 2, now=clock())

        with pytest.raises(AlreadyDecided, match="by alice"):
            store.decide(session_id, decision(call, approver="bob", now=clock()), now=clock())

    def test_a_finished_session_takes_no_decision(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = _wait_for(store, session_id, clock, "danger")
        store.request_cancel(session_id, now=clock())

        with pytest.raises(SessionFinished):
            store.decide(session_id, decision(call, now=clock()), now=clock())


class TestRequestCancel:
    def test_a_waiting_session_is_cancelled_at_once(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        calls = _wait_for(store, session_id, clock, "danger", "read_file", "danger")
        version = store.get(session_id).version

        head = store.request_cancel(session_id, now=clock.advance(1), by="carol")

        assert (head.status, head.version, head.awaiting) == (Status.CANCELLED, version + 1, ())
        assert head.cancel_requested
        assert store.get(session_id) == head
        session = store.load(session_id)
        assert {o.call_id: (o.content, o.is_error) for o in session.observations} == {
            c: ("not run: session cancelled", True) for c in ("s1c0", "s1c1", "s1c2")
        }
        assert all(c.state is CallState.DONE for c in session.steps[0].calls)
        assert [e.kind for e in session.events][-2:] == [
            EventKind.CANCEL_REQUESTED,
            EventKind.CANCELLED,
        ]
        assert session.events[-2].data == {"by": "carol"}
        assert table_rows(store.engine, outbox) == []
        assert len(calls) == 2

    def test_a_runnable_session_only_gets_the_flag(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        before = store.get(session_id)
        ticks = table_rows(store.engine, outbox)

        head = store.request_cancel(session_id, now=clock.advance(1), by="carol")

        assert head.cancel_requested
        assert (head.version, head.status) == (before.version, Status.READY)
        assert store.get(session_id).cancel_requested
        assert store.get(session_id).version == before.version
        assert table_rows(store.engine, outbox) == ticks
        assert store.events_after(session_id)[-1][1].kind is EventKind.CANCEL_REQUESTED

        head = think(store, session_id, reply(("read_file", {})), now=clock())
        assert head.status is Status.CANCELLED

    def test_a_runnable_session_returns_the_head_as_stored(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        head = store.request_cancel(session_id, now=clock.advance(1), by="carol")

        assert head == store.get(session_id)

    def test_the_tick_holding_the_lease_does_not_clear_the_flag(
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

    def test_a_finished_session_cannot_be_cancelled(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(content="done"), now=clock())
        before = count_rows(store.engine)

        with pytest.raises(SessionFinished, match=session_id):
            store.request_cancel(session_id, now=clock())
        assert count_rows(store.engine) == before

    def test_an_unknown_session_is_not_found(self, store: Store, clock: Clock) -> None:
        with pytest.raises(SessionNotFound, match="nope"):
            store.request_cancel("nope", now=clock())
