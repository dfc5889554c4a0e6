"""Decisions, cancel and approval rules (docs/DESIGN.md sections 2 and 5)."""

from __future__ import annotations

from typing import Any

import pytest
from tickwork.fsm.approvals import ApprovalRule, edit_note, needs_approval
from tickwork.fsm.errors import (
    AlreadyDecided,
    CallNotFound,
    IllegalTransition,
    InvalidDecision,
    InvalidInput,
    NotInDoubt,
    NotWaiting,
    SessionFinished,
    StaleDecision,
    TickworkError,
)
from tickwork.fsm.machine import Change, RunTool, decide, request_cancel, start_execute
from tickwork.fsm.values import CallState, DecisionKind, EventKind, Status

AWAITING, IN_DOUBT = CallState.AWAITING_APPROVAL, CallState.IN_DOUBT
APPROVE, EDIT, REJECT, PROVIDE = (
    DecisionKind.APPROVE,
    DecisionKind.EDIT,
    DecisionKind.REJECT,
    DecisionKind.PROVIDE_OUTPUT,
)


def waiting(build: Any, *states: CallState) -> tuple[Any, list[Any]]:
    """A head waiting on calls s1c0.. in `states`; the awaited ones are listed on the head."""
    calls = [
        build.call(
            "write_file", {"path": f"{i}.py", "text": "x"}, index=i, state=s, needs_approval=True
        )
        for i, s in enumerate(states)
    ]
    awaiting = tuple(c.call_id for c in calls if c.state.awaits_person)
    return build.head(Status.WAITING_APPROVAL, step=1, awaiting=awaiting), calls


def decision_fields(kind: DecisionKind) -> dict[str, Any]:
    return {
        EDIT: {"arguments": {"path": "b.py", "text": "y"}},
        REJECT: {"feedback": "no"},
        PROVIDE: {"output": "wrote 3 bytes"},
    }.get(kind, {})


@pytest.mark.parametrize(
    ("state", "kind", "after"),
    [
        pytest.param(AWAITING, APPROVE, CallState.APPROVED, id="approve"),
        pytest.param(AWAITING, EDIT, CallState.EDITED, id="edit"),
        pytest.param(AWAITING, REJECT, CallState.REJECTED, id="reject"),
        pytest.param(IN_DOUBT, APPROVE, CallState.APPROVED, id="in_doubt_retry"),
        pytest.param(IN_DOUBT, EDIT, CallState.EDITED, id="in_doubt_edit"),
        pytest.param(IN_DOUBT, REJECT, CallState.REJECTED, id="in_doubt_reject"),
        pytest.param(IN_DOUBT, PROVIDE, CallState.DONE, id="in_doubt_provide_output"),
    ],
)
def test_decide_moves_the_call(
    build: Any, state: CallState, kind: DecisionKind, after: CallState
) -> None:
    head, (call,) = waiting(build, state)
    decision = build.decision(call, kind, comment="looks fine", **decision_fields(kind))
    change = decide(head, [call], decision, None, now=build.at(60))
    assert change.call_states == ((call.call_id, after),)
    assert change.decisions == (decision,)
    assert change.head.status is Status.EXECUTING
    assert change.head.awaiting == ()
    assert change.enqueue
    (event,) = change.events
    assert event.kind is EventKind.APPROVAL_DECIDED
    assert event.data == {
        "call_id": call.call_id,
        "decision": kind.value,
        "approver": "alice",
        "comment": "looks fine",
        # a rejection's reason reaches watch, the event stream and webhooks
        "feedback": "no" if kind is REJECT else "",
    }
    if kind is PROVIDE:
        (observation,) = change.observations
        assert (observation.call_id, observation.content, observation.is_error) == (
            call.call_id,
            "wrote 3 bytes",
            False,
        )
    else:
        assert change.observations == ()


def test_deciding_one_of_several_keeps_waiting(build: Any) -> None:
    head, calls = waiting(build, AWAITING, AWAITING, CallState.PENDING)
    change = decide(head, calls, build.decision(calls[1]), None, now=build.at(60))
    assert change.head.status is Status.WAITING_APPROVAL
    assert change.head.awaiting == ("s1c0",)
    assert not change.enqueue
    last = decide(change.head, calls, build.decision(calls[0], REJECT), None, now=build.at(61))
    assert last.head.status is Status.EXECUTING
    assert last.head.awaiting == ()


@pytest.mark.parametrize(
    ("state", "kind", "fields", "error", "words"),
    [
        pytest.param(
            AWAITING,
            APPROVE,
            {"fingerprint": "0" * 64},
            StaleDecision,
            "arguments differ",
            id="wrong_fingerprint",
        ),
        pytest.param(
            AWAITING,
            APPROVE,
            {"fingerprint": ""},
            StaleDecision,
            "64 hex digits",
            id="no_fingerprint",
        ),
        pytest.param(
            AWAITING,
            APPROVE,
            {"fingerprint": "a"},
            StaleDecision,
            "64 hex digits",
            id="one_character_prefix",
        ),
        pytest.param(
            AWAITING,
            APPROVE,
            {"fingerprint": "g" * 64},
            StaleDecision,
            "64 hex digits, lower-case",
            id="not_hex",
        ),
        pytest.param(
            AWAITING,
            APPROVE,
            {"fingerprint": "A" * 64},
            StaleDecision,
            "64 hex digits, lower-case",
            id="upper_case",
        ),
        pytest.param(CallState.PENDING, APPROVE, {}, NotWaiting, "pending", id="pending_call"),
        pytest.param(CallState.DONE, REJECT, {}, NotWaiting, "done", id="done_call"),
        pytest.param(CallState.APPROVED, APPROVE, {}, NotWaiting, "approved", id="decided_state"),
        pytest.param(
            AWAITING,
            PROVIDE,
            {"output": "x"},
            NotInDoubt,
            "not in doubt",
            id="provide_output_not_in_doubt",
        ),
        pytest.param(AWAITING, EDIT, {}, InvalidDecision, "new arguments", id="edit_without_args"),
        pytest.param(
            AWAITING, APPROVE, {"approver": "  "}, InvalidDecision, "approver", id="no_approver"
        ),
    ],
)
def test_decide_refuses(
    build: Any,
    state: CallState,
    kind: DecisionKind,
    fields: dict[str, Any],
    error: type[Exception],
    words: str,
) -> None:
    head, (call,) = waiting(build, state)
    decision = build.decision(call, kind, **fields)
    with pytest.raises(error) as raised:
        decide(head, [call], decision, None, now=build.at(60))
    message = str(raised.value)
    assert words in message
    assert call.call_id in message and head.id in message
    assert isinstance(raised.value, TickworkError)


@pytest.mark.parametrize("length", [8, 12, 63])
def test_a_prefix_of_the_real_fingerprint_is_refused_and_never_echoed(
    build: Any, length: int
) -> None:
    head, (call,) = waiting(build, AWAITING)
    decision = build.decision(call, APPROVE, fingerprint=call.fingerprint[:length])
    with pytest.raises(StaleDecision) as raised:
        decide(head, [call], decision, None, now=build.at(60))
    assert call.fingerprint[:8] not in str(raised.value)


def test_a_wrong_fingerprint_is_not_echoed(build: Any) -> None:
    head, (call,) = waiting(build, AWAITING)
    wrong = "f" * 64 if not call.fingerprint.startswith("f") else "0" * 64
    with pytest.raises(StaleDecision) as raised:
        decide(
            head, [call], build.decision(call, APPROVE, fingerprint=wrong), None, now=build.at(60)
        )
    assert call.fingerprint[:8] not in str(raised.value) and wrong[:8] not in str(raised.value)


def test_decision_errors_are_named_in_the_hierarchy() -> None:
    assert issubclass(StaleDecision, IllegalTransition)
    assert issubclass(NotWaiting, IllegalTransition)
    assert issubclass(NotInDoubt, IllegalTransition)
    assert issubclass(AlreadyDecided, IllegalTransition)
    assert issubclass(InvalidDecision, InvalidInput)


def test_second_decision_names_the_first(build: Any) -> None:
    head, (call,) = waiting(build, AWAITING)
    first = build.decision(call, APPROVE, approver="carol", at_s=30)
    with pytest.raises(AlreadyDecided) as raised:
        decide(head, [call], build.decision(call, REJECT, approver="dave"), first, now=build.at(60))
    message = str(raised.value)
    assert "carol" in message
    assert build.at(30).isoformat() in message
    assert "approve" in message


def test_decision_on_an_unknown_call(build: Any) -> None:
    head, calls = waiting(build, AWAITING)
    stranger = build.call(index=7, state=AWAITING)
    with pytest.raises(CallNotFound, match="s1c7"):
        decide(head, calls, build.decision(stranger), None, now=build.at(60))


@pytest.mark.parametrize("kind", [APPROVE, REJECT, PROVIDE])
def test_in_doubt_call_approved_earlier_can_still_be_resolved(
    build: Any, kind: DecisionKind
) -> None:
    head, (call,) = waiting(build, IN_DOUBT)
    before_it_ran = build.decision(call, APPROVE, approver="carol", at_s=10)
    change = decide(
        head,
        [call],
        build.decision(call, kind, **decision_fields(kind)),
        before_it_ran,
        now=build.at(60),
    )
    assert change.head.status is Status.EXECUTING


@pytest.mark.parametrize("given", [None, {"path": "c.py", "text": "z"}])
def test_running_an_edited_call_in_doubt_again_runs_it_as_edited(
    build: Any, given: dict[str, Any] | None
) -> None:
    head, (call,) = waiting(build, IN_DOUBT)
    edited = build.decision(call, EDIT, approver="carol", at_s=10, **decision_fields(EDIT))
    again = build.decision(call, APPROVE, arguments=given)  # an approval brings none of its own
    (recorded,) = decide(head, [call], again, edited, now=build.at(60)).decisions
    assert recorded.arguments == edited.arguments
    approved = call.model_copy(update={"state": CallState.APPROVED})
    run = start_execute(
        build.head(Status.EXECUTING, step=1),
        [approved],
        {call.call_id: recorded},
        idempotent=False,
        now=build.at(61),
    )
    assert isinstance(run, RunTool)
    assert run.arguments == {"path": "b.py", "text": "y"}


def test_an_approval_of_a_call_not_in_doubt_runs_it_as_proposed(build: Any) -> None:
    head, (call,) = waiting(build, AWAITING)
    given = build.decision(call, APPROVE, arguments={"path": "c.py", "text": "z"})
    (recorded,) = decide(head, [call], given, None, now=build.at(60)).decisions
    assert recorded.arguments is None


# cancel


def test_cancel_of_a_suspended_session_takes_effect_at_once(build: Any) -> None:
    head, calls = waiting(build, AWAITING, CallState.APPROVED, CallState.DONE)
    change = request_cancel(head, calls, now=build.at(5), by="alice")
    assert change.head.status is Status.CANCELLED
    assert change.head.cancel_requested
    assert change.head.awaiting == ()
    assert change.call_states == (("s1c0", CallState.DONE), ("s1c1", CallState.DONE))
    assert [o.call_id for o in change.observations] == ["s1c0", "s1c1"]
    assert all(o.is_error and "cancelled" in o.content for o in change.observations)
    assert [e.kind for e in change.events] == [EventKind.CANCEL_REQUESTED, EventKind.CANCELLED]
    assert change.events[0].data == {"by": "alice"}
    assert not change.enqueue and not change.dead_letter


def test_cancel_of_an_in_doubt_call_closes_it(build: Any) -> None:
    head, calls = waiting(build, IN_DOUBT)
    change = request_cancel(head, calls, now=build.at(5))
    assert change.call_states == (("s1c0", CallState.DONE),)
    assert len(change.observations) == 1


@pytest.mark.parametrize("status", [Status.READY, Status.EXECUTING])
def test_cancel_of_a_runnable_session_is_a_request(build: Any, status: Status) -> None:
    head = build.head(status, step=1)
    calls = [build.call(state=CallState.PENDING)]
    change = request_cancel(head, calls, now=build.at(5), by="bob")
    assert change.head.status is status
    assert change.head.cancel_requested
    assert change.observations == () and change.call_states == ()
    assert [e.kind for e in change.events] == [EventKind.CANCEL_REQUESTED]
    assert change.enqueue


@pytest.mark.parametrize("status", [s for s in Status if s.terminal])
def test_cancel_of_a_finished_session_raises(build: Any, status: Status) -> None:
    with pytest.raises(SessionFinished, match="already"):
        request_cancel(build.head(status), [], now=build.at(5))


# approval rules


def _raises(_: Any) -> bool:
    raise KeyError("cmd")


@pytest.mark.parametrize(
    ("rule", "arguments", "expected"),
    [
        pytest.param(None, {"cmd": "rm -rf /"}, False, id="no_rule"),
        pytest.param(ApprovalRule(), {"cmd": "rm"}, False, id="empty_rule"),
        pytest.param(ApprovalRule(always=True), {"path": "a"}, True, id="always"),
        pytest.param(ApprovalRule(always=True), None, True, id="always_even_unparsable"),
        pytest.param(ApprovalRule(policy=lambda a: True), {"cmd": "rm"}, True, id="policy_true"),
        pytest.param(ApprovalRule(policy=lambda a: False), {"cmd": "ls"}, False, id="policy_false"),
        pytest.param(ApprovalRule(policy=lambda a: 1), {}, True, id="policy_truthy"),
        pytest.param(ApprovalRule(policy=_raises), {}, True, id="policy_raises"),
        pytest.param(ApprovalRule(policy=_raises), None, False, id="policy_unparsable_never_runs"),
        pytest.param(
            ApprovalRule(policy=_raises, accepts=lambda a: False),
            {"command": 1},
            False,
            id="policy_refused_arguments_never_run",
        ),
        pytest.param(
            ApprovalRule(policy=lambda a: True, accepts=_raises),
            {"cmd": "rm"},
            True,
            id="accepts_raises",
        ),
        pytest.param(
            ApprovalRule(always=True, accepts=lambda a: False),
            {"cmd": "rm"},
            True,
            id="always_even_refused",  # a person may edit them into a call that runs
        ),
    ],
)
def test_needs_approval(
    rule: ApprovalRule | None, arguments: dict[str, Any] | None, expected: bool
) -> None:
    assert needs_approval(rule, arguments) is expected


def test_decided_change_is_a_change(build: Any) -> None:
    head, (call,) = waiting(build, AWAITING)
    assert isinstance(decide(head, [call], build.decision(call), None, now=build.at(1)), Change)


def test_the_model_is_told_of_an_edit_and_its_arguments_cut(build: Any) -> None:
    _, (call,) = waiting(build, AWAITING)
    assert edit_note(None) == ""
    assert edit_note(build.decision(call, APPROVE)) == ""
    assert edit_note(build.decision(call, REJECT, feedback="no")) == ""
    long = build.decision(call, EDIT, approver="bob", arguments={"text": "x" * 5000})
    note = edit_note(long)
    assert note.startswith('bob edited this call before it ran; it ran with {"text": "xxx')
    assert note.endswith(" ...(cut)\n") and len(note) < 2100
    again = build.decision(call, APPROVE, approver="carol", arguments={"text": "y"})
    assert edit_note(again) == (
        "a person edited this call before it ran, and carol had it run again; it ran with "
        '{"text": "y"}\n'
    )


def test_an_edited_call_refused_when_it_was_to_run_is_not_said_to_have_run(build: Any) -> None:
    """An edit the tool (or the sandbox) refused when it was to run told the model "it ran
    with" the edited arguments, then the refusal: it says the edited call was tried."""
    _, (call,) = waiting(build, AWAITING)
    edited = build.decision(call, EDIT, approver="bob", arguments={"text": "x"})
    again = build.decision(call, APPROVE, approver="carol", arguments={"text": "y"})
    for decision in (edited, again):
        note = edit_note(decision, is_error=True)
        assert "it ran with" not in note and "before it ran" not in note, note
    assert edit_note(edited, is_error=True) == (
        'bob edited this call; it was tried with {"text": "x"} and did not succeed:\n'
    )
    assert edit_note(again, is_error=True) == (
        "a person edited this call, and carol had it tried again; it was tried with "
        '{"text": "y"} and did not succeed:\n'
    )
