"""Admission (the `create` limit and `Relay.admit`): a session past its tenant's in-flight
limit waits queued with no tick, and is admitted once a slot frees; one whose deadline
passes while it waits (queued, or for a decision) fails `DEADLINE` at the pass (`expire`,
which gives each such session to one caller)."""

from __future__ import annotations

import pytest

from tickwork.fsm.admission import Admission, TenantLimit
from tickwork.fsm.errors import SessionFinished
from tickwork.fsm.values import Budgets, DecisionKind, ErrorCode, Head, Session, Status
from tickwork.store.port import Store
from tickwork.store.relay import Due
from tickwork.testing.store_contract.base import Contract
from tickwork.testing.store_contract.trees import at_once
from tickwork.testing.store_ticks import (
    Clock,
    decision,
    in_doubt_call,
    new_session,
    wait_for_approval,
)

ONE = TenantLimit(max_in_flight=1)


def _submit(store: Store, clock: Clock, name: str, **fields: object) -> Head:
    head = new_session(name, now=clock.advance(1)).head.model_copy(update=fields)
    return store.create(Session(head=head), now=clock(), limit=ONE)


class AdmissionContract(Contract):
    """Admission in the store (DESIGN section 15): queued at the limit, no tick offered,
    admitted (queued -> ready at version + 1, its tick offered) once a slot frees."""

    def test_past_the_limit_a_session_is_queued_and_offers_no_tick(
        self, store: Store, clock: Clock
    ) -> None:
        running = _submit(store, clock, "running")
        waiting = _submit(store, clock, "waiting")

        assert (running.status, waiting.status) == (Status.READY, Status.QUEUED)
        due = store.due_ticks(now=clock.advance(3600), older_than_s=60)
        assert [d.session_id for d in due] == ["running"]
        assert store.admit(Admission(default=ONE), now=clock()) == []

    def test_a_queued_session_is_admitted_once_a_slot_frees(
        self, store: Store, clock: Clock
    ) -> None:
        running = _submit(store, clock, "running")
        _submit(store, clock, "waiting")
        store.request_cancel(running.id, now=clock())  # a ready session: at its next tick
        assert store.admit(Admission(default=ONE), now=clock()) == []
        # another tenant's limit is its own
        assert _submit(store, clock, "other", tenant="other").status is Status.READY

        assert store.admit(Admission(default=TenantLimit(max_in_flight=2)), now=clock()) == [
            Due("waiting", 1)
        ]
        head = store.get("waiting")
        assert (head.status, head.version) == (Status.READY, 1)
        assert Due("waiting", 1) in store.due_ticks(now=clock.advance(120), older_than_s=60)

    def test_a_queued_session_is_cancelled_at_once(self, store: Store, clock: Clock) -> None:
        _submit(store, clock, "running")
        _submit(store, clock, "waiting")

        assert store.request_cancel("waiting", now=clock()).status is Status.CANCELLED
        assert store.admit(Admission(default=TenantLimit(max_in_flight=5)), now=clock()) == []

    def test_a_queued_session_past_its_deadline_fails_without_being_admitted(
        self, store: Store, clock: Clock
    ) -> None:
        _submit(store, clock, "running")  # holds the one slot (waits for a person, say)
        short = Budgets(deadline_s=60.0)
        _submit(store, clock, "late", budgets=short)
        _submit(store, clock, "patient")  # the default deadline: hours

        assert store.admit(Admission(default=ONE), now=clock.advance(30)) == []
        assert store.get("late").status is Status.QUEUED
        # its deadline passed while it waited: it fails DEADLINE and is dead-lettered at
        # the relay's pass, freeing its place in max_queued, instead of waiting for a slot
        # to fail at its first tick; by `expire`, which the relay calls first to announce
        # what it failed: `admit` fails nothing (what it failed would go unannounced)
        assert store.admit(Admission(default=ONE), now=clock.advance(60)) == []
        assert store.get("late").status is Status.QUEUED
        assert [h.id for h in store.expire(now=clock())] == ["late"]
        late = store.get("late")
        assert (late.status, late.error_code) == (Status.FAILED, ErrorCode.DEADLINE)
        assert "queued" in late.error_message and "`deadline_s` is 60" in late.error_message
        assert store.dead_letter("late").code == ErrorCode.DEADLINE
        assert store.get("patient").status is Status.QUEUED
        assert store.due_ticks(now=clock.advance(120), older_than_s=60) == [Due("running", 0)]

    def test_a_session_waiting_for_a_decision_past_its_deadline_fails_at_the_pass(
        self, store: Store, clock: Clock
    ) -> None:
        """It left the approvals queue only when approved, and then failed DEADLINE (found
        by an outside run): now the full pass fails it, its calls closed as not run."""
        for name in ("late", "patient"):
            budgets = Budgets(deadline_s=60.0) if name == "late" else Budgets()
            store.create(new_session(name, now=clock(), budgets=budgets), now=clock())
            wait_for_approval(store, name, clock, "danger")
        assert store.admit(Admission(default=ONE), now=clock.advance(30)) == []
        assert store.get("late").status is Status.WAITING_APPROVAL

        assert store.expire(now=clock.advance(60)) != []
        assert store.admit(Admission(default=ONE), now=clock()) == []
        late = store.load("late")
        assert (late.head.status, late.head.error_code) == (Status.FAILED, ErrorCode.DEADLINE)
        assert "waited for a decision on s1c0" in late.head.error_message
        # a fork from step 1 would keep the call closed as not run, and ask nobody
        assert "fork it from step 0 with a later deadline (`deadline_s`)" in late.head.error_message
        assert "`deadline_s` is 60" in late.head.error_message
        assert late.head.awaiting == ()
        call, seen = late.call("s1c0"), late.observation("s1c0")
        assert call is not None and call.state.value == "done"
        assert seen is not None and seen.content == "not run: the session failed"
        assert store.dead_letter("late").code == ErrorCode.DEADLINE
        assert store.get("patient").status is Status.WAITING_APPROVAL

    def test_expire_returns_each_session_it_failed_once_however_many_race(
        self, store: Store, clock: Clock
    ) -> None:
        """The relay announces the dead letter of each session the expiry failed, as a
        tick that fails one does: `expire` gives each one to the single call that failed
        it, so two relays' passes at once announce it once."""
        _submit(store, clock, "running")  # holds the one slot
        _submit(store, clock, "queued-late", budgets=Budgets(deadline_s=60.0))
        store.create(
            new_session("waiting-late", now=clock(), budgets=Budgets(deadline_s=60.0)),
            now=clock(),
        )
        wait_for_approval(store, "waiting-late", clock, "danger")
        assert store.expire(now=clock.advance(30)) == []

        later = clock.advance(60)
        results = at_once([lambda: store.expire(now=later) for _ in range(3)])
        failed = [h for r in results for h in r]  # an exception in `results` fails this
        assert sorted(h.id for h in failed) == ["queued-late", "waiting-late"], results
        for head in failed:
            assert (head.status, head.error_code) == (Status.FAILED, ErrorCode.DEADLINE)
            assert head.error_message == store.get(head.id).error_message
        assert store.expire(now=clock.advance(60)) == []
        assert store.admit(Admission(default=ONE), now=clock()) == []  # nor admits any

    def test_a_call_in_doubt_past_the_deadline_is_closed_as_interrupted(
        self, store: Store, clock: Clock
    ) -> None:
        """Its error names a fork that keeps the call's doubt: one from the step before
        would make the call again, and could run it twice without anyone asked."""
        store.create(
            new_session("doubt", now=clock(), budgets=Budgets(deadline_s=60.0)), now=clock()
        )
        in_doubt_call(store, "doubt", clock)
        assert store.expire(now=clock.advance(60)) != []
        assert store.admit(Admission(default=ONE), now=clock()) == []
        doubt = store.load("doubt")
        assert (doubt.head.status, doubt.head.error_code) == (Status.FAILED, ErrorCode.DEADLINE)
        assert (
            "fork it from step 1 with a later deadline (`deadline_s`)" in doubt.head.error_message
        )
        seen = doubt.observation("s1c0")
        assert seen is not None and seen.content.startswith("interrupted; it may or may not")

    def test_a_rejection_made_before_the_deadline_keeps_its_feedback_on_the_call(
        self, store: Store, clock: Clock
    ) -> None:
        """A step of two calls, one rejected with feedback, the other still waiting when the
        deadline passes: the rejected call reads its rejection, not "not run" (the
        approver's text was in no observation or event); a decision after the pass is
        refused, saying how the session ended and that it was not recorded."""
        store.create(
            new_session("late", now=clock(), budgets=Budgets(deadline_s=60.0)), now=clock()
        )
        first, second = wait_for_approval(store, "late", clock, "danger", "danger")
        rejected = decision(
            first, DecisionKind.REJECT, now=clock.advance(10), feedback="use a dry run first"
        )
        store.decide("late", rejected, now=clock())
        assert store.expire(now=clock.advance(60)) != []
        assert store.admit(Admission(default=ONE), now=clock()) == []
        late = store.load("late")
        assert (late.head.status, late.head.error_code) == (Status.FAILED, ErrorCode.DEADLINE)
        seen = late.observation(first.call_id)
        assert seen is not None and seen.is_error
        assert seen.content == "rejected by alice: use a dry run first"
        other = late.observation(second.call_id)
        assert other is not None and other.content == "not run: the session failed"

        refused = decision(second, DecisionKind.REJECT, now=clock(), feedback="not this either")
        with pytest.raises(SessionFinished) as caught:
            store.decide("late", refused, now=clock())
        message = str(caught.value)
        assert message.startswith(f"session late failed DEADLINE ({late.head.error_message})")
        assert message.endswith(
            f"before this decision: the rejection of call {second.call_id} and its feedback "
            "were not recorded; fork it to decide again"
        )
        assert store.load("late").decision(second.call_id) is None
