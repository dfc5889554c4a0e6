"""find_call, decide and request_cancel: what a person reads and does to a session."""

from __future__ import annotations

import pytest
from tickwork.fsm.errors import (
    AlreadyDecided,
    InvalidDecision,
    NotWaiting,
    SessionFinished,
    StaleDecision,
)
from tickwork.fsm.values import CallState, DecisionKind, ErrorCode, EventKind, Status
from tickwork.store import Store
from tickwork.store.schema import outbox, sessions

from tests.conftest import Clock
from tests.store.conftest import (
    count_rows,
    decision,
    execute,
    reply,
    run_step,
    table_rows,
    think,
)
from tickwork.testing.store_ticks import wait_for_approval


class TestDecide:
    def test_approve_of_the_last_awaited_call_makes_the_session_executing(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
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
            {
                "call_id": call.call_id,
                "decision": "approve",
                "approver": "alice",
                "comment": "ok",
                "feedback": "",
            },
        )
        head = execute(store, session_id, now=clock(), output="ran")
        assert head.status is Status.READY

    def test_a_session_waits_until_every_awaited_call_is_decided(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        first, second = wait_for_approval(store, session_id, clock, "danger", "read_file", "danger")

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

    def test_a_rejection_given_as_the_deadline_passes_keeps_its_feedback_on_the_call(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        """The session's EXECUTE tick comes after its deadline: it fails DEADLINE without
        running anything, and the rejected call reads the rejection (it read "not run: the
        session failed", the approver's text in no observation or event)."""
        [call] = wait_for_approval(store, session_id, clock, "danger")
        deadline_s = store.get(session_id).budgets.deadline_s
        rejected = decision(
            call, DecisionKind.REJECT, now=clock.advance(deadline_s - 1), feedback="too risky"
        )
        assert store.decide(session_id, rejected, now=clock()).status is Status.EXECUTING

        head = execute(store, session_id, now=clock.advance(2))

        assert (head.status, head.error_code) == (Status.FAILED, ErrorCode.DEADLINE)
        seen = store.load(session_id).observation(call.call_id)
        assert seen is not None and seen.is_error
        assert seen.content == "rejected by alice: too risky"

    def test_a_call_that_is_not_waiting_is_refused(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        done = store.load(session_id).steps[0].calls[0]
        calls = wait_for_approval(store, session_id, clock, "danger", "read_file")
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
        [call] = wait_for_approval(store, session_id, clock, "danger")
        seen = decision(call, now=clock()).model_copy(update={"fingerprint": "0" * 64})
        before = count_rows(store.engine), table_rows(store.engine, sessions)

        with pytest.raises(StaleDecision, match=call.call_id):
            store.decide(session_id, seen, now=clock())

        assert (count_rows(store.engine), table_rows(store.engine, sessions)) == before

    def test_a_decision_without_an_approver_is_invalid(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        [call] = wait_for_approval(store, session_id, clock, "danger")
        before = count_rows(store.engine)

        with pytest.raises(InvalidDecision):
            store.decide(session_id, decision(call, approver=" ", now=clock()), now=clock())
        assert count_rows(store.engine) == before

    def test_a_second_decision_names_the_first(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        first, _ = wait_for_approval(store, session_id, clock, "danger", "danger")
        store.decide(session_id, decision(first, approver="alice", now=clock()), now=clock())
        before = count_rows(store.engine)

        with pytest.raises(AlreadyDecided, match=r"approve\) by alice at 2026-01-01T12:00"):
            store.decide(
                session_id,
                decision(first, DecisionKind.REJECT, approver="bob", now=clock.advance(1)),
                now=clock(),
            )
        assert count_rows(store.engine) == before


class TestRequestCancel:
    def test_a_waiting_session_is_cancelled_at_once(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        calls = wait_for_approval(store, session_id, clock, "danger", "read_file", "danger")
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

    def test_a_call_rejected_before_the_cancel_keeps_its_rejection(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        first, _ = wait_for_approval(store, session_id, clock, "danger", "danger")
        rejected = decision(first, DecisionKind.REJECT, now=clock(), feedback="too risky")
        store.decide(session_id, rejected, now=clock())

        store.request_cancel(session_id, now=clock.advance(1), by="carol")

        session = store.load(session_id)
        assert {o.call_id: o.content for o in session.observations} == {
            "s1c0": "rejected by alice: too risky",
            "s1c1": "not run: session cancelled",
        }

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

    def test_a_finished_session_cannot_be_cancelled(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(content="done"), now=clock())
        before = count_rows(store.engine)

        with pytest.raises(SessionFinished, match=session_id):
            store.request_cancel(session_id, now=clock())
        assert count_rows(store.engine) == before
