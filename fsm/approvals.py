"""Approval rules and decision validation (docs/DESIGN.md section 5)."""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Mapping
from typing import Any

from tickwork.fsm.errors import (
    AlreadyDecided,
    InvalidDecision,
    InvalidInput,
    NotInDoubt,
    NotWaiting,
    StaleDecision,
)
from tickwork.fsm.people import check_name
from tickwork.fsm.values import CallState, Decision, DecisionKind, ToolCall, Value

#: a call's arguments in; a reason (text) or True when a person must decide, else None/False
Policy = Callable[[Mapping[str, Any]], bool | str | None]

#: a decision carries the call's whole fingerprint (SHA-256 hex), never a prefix
FINGERPRINT_LENGTH = 64
#: what a fingerprint is written in (a mistyped or upper-case one is not a mismatch)
HEX_DIGITS = frozenset("0123456789abcdef")


def is_whole_fingerprint(given: str) -> bool:
    """Whether `given` is written as a call's whole fingerprint (not whether it is the call's)."""
    return len(given) == FINGERPRINT_LENGTH and set(given) <= HEX_DIGITS


class ApprovalRule(Value):
    """How a tool decides whether a call needs a person."""

    always: bool = False
    policy: Policy | None = None
    #: whether the tool takes the arguments (the call's schema); a policy is not asked of
    #: arguments it refuses, which never run (`{"cmd": "ls"}` for `command`)
    accepts: Callable[[Mapping[str, Any]], bool] | None = None


def needs_approval(rule: ApprovalRule | None, arguments: Mapping[str, Any] | None) -> bool:
    """True if a person must decide; a policy that raises counts as yes."""
    return approval_reason(rule, arguments, of="the call") is not None


def approval_reason(
    rule: ApprovalRule | None,
    arguments: Mapping[str, Any] | None,
    *,
    of: str,
    policy: str | None = None,
) -> str | None:
    """Why a person must decide on a call, or None if nobody need; the reason names what
    its rule judged (`of`: "tool 'run_command'", "node 'review'", "the update of node
    'offer'") and its policy ("the approval policy of `of`", or `policy` where it has a name
    of its own: "the `approve_update` of node 'offer'"), and a policy that raises counts as
    one, so the person and the operator know whose check asked, or whose to mend."""
    if rule is None:
        return None
    if rule.always:
        return f"{of} always needs a person's approval"
    if rule.policy is None:
        return None
    if arguments is None or not _accepted(rule, arguments):
        return None  # unparsable or refused arguments never run: there is nothing to approve
    check = policy or f"the approval policy of {of}"
    try:
        verdict = rule.policy(arguments)
    except Exception as exc:
        return f"{check} raised {type(exc).__name__}: {exc}, so a person decides"
    if isinstance(verdict, str):
        return verdict.strip() or f"{check} asks for a person"
    return f"{check} asks for a person" if verdict else None


def _accepted(rule: ApprovalRule, arguments: Mapping[str, Any]) -> bool:
    """Whether the tool takes `arguments`; a check that raises counts as yes, so a person
    decides."""
    try:
        return rule.accepts is None or bool(rule.accepts(arguments))
    except Exception:
        return True


def rejection(call: ToolCall, decision: Decision) -> str:
    """The observation of a rejected call: the approver's feedback, or, when they gave none,
    a text that still says the call did not run and not to make it again as it was."""
    if decision.feedback:
        return f"rejected by {decision.approver}: {decision.feedback}"
    return (
        f"rejected by {decision.approver}, who gave no reason: {call.name or 'the call'} did "
        "not run; do not make the same call again: try another way, or say why you need it"
    )


#: how much of the edited arguments the model is told before the call's output
EDIT_NOTE_CHARS = 2000


def edit_note(decision: Decision | None, *, is_error: bool = False) -> str:
    """What the model reads before the output of a call a person edited (its transcript
    shows the call as the model made it): who edited it and the arguments it ran with; ""
    for a call that ran as the model proposed it. With `is_error` (refused, or failed,
    when it was to run) it says the edited call was tried, never that it ran."""
    if decision is None or decision.arguments is None:
        return ""
    if decision.kind not in (DecisionKind.EDIT, DecisionKind.APPROVE):
        return ""
    ran = json.dumps(decision.arguments, ensure_ascii=False)
    if len(ran) > EDIT_NOTE_CHARS:
        ran = ran[:EDIT_NOTE_CHARS] + " ...(cut)"
    if is_error:
        edited = (
            f"a person edited this call, and {decision.approver} had it tried again"
            if decision.kind is DecisionKind.APPROVE
            else f"{decision.approver} edited this call"
        )
        return f"{edited}; it was tried with {ran} and did not succeed:\n"
    if decision.kind is DecisionKind.APPROVE:  # an in-doubt call run again, as edited
        return (
            f"a person edited this call before it ran, and {decision.approver} had it run "
            f"again; it ran with {ran}\n"
        )
    return f"{decision.approver} edited this call before it ran; it ran with {ran}\n"


def edited_by(decision: Decision) -> str:
    """How a call's arguments name the person of a decision that carries them: an edit's
    author, or the approver who ran an edited in-doubt call again (the edit's author is
    not theirs to be named as)."""
    if decision.kind is DecisionKind.APPROVE:
        return f"as edited, run again by {decision.approver}"
    return f"as edited by {decision.approver}"


def as_edited(decision: Decision | None) -> str | None:
    """Who gave the arguments a call ran (or runs) with, said as `edited_by` says it, where a
    person's decision carries them (an edit, or an approval that ran an edited in-doubt call
    again); None where it runs as the model proposed it. The views' `as_edited`."""
    if decision is None or decision.arguments is None:
        return None
    if decision.kind not in (DecisionKind.EDIT, DecisionKind.APPROVE):
        return None
    return edited_by(decision)


def already_decided(first: Decision, *, session_id: str) -> AlreadyDecided:
    """The error for a second decision on a call, naming the first."""
    return AlreadyDecided(
        f"call {first.call_id} of session {session_id} was already decided "
        f"({first.kind.value}) by {first.approver} at {first.at.isoformat()}; "
        "each call is decided once"
    )


def check_decision(
    call: ToolCall, decision: Decision, existing: Decision | None, *, session_id: str
) -> CallState:
    """The call's state after `decision`, or a named error if it may not be taken."""
    where = f"call {call.call_id} of session {session_id}"
    # a decision moves a call out of doubt, so one made before the doubt does not count
    if existing is not None and call.state is not CallState.IN_DOUBT:
        raise already_decided(existing, session_id=session_id)
    if not call.state.awaits_person:
        raise NotWaiting(
            f"{where} is {call.state.value}, not waiting for a decision; "
            "see `tickwork show` for what the session waits on"
        )
    given = decision.fingerprint
    if not is_whole_fingerprint(given):
        raise StaleDecision(
            f"a decision on {where} must carry the whole fingerprint of the call the approver "
            f"saw ({FINGERPRINT_LENGTH} hex digits, lower-case, as `tickwork show` prints it); "
            "look at the call again and decide"
        )
    # neither fingerprint is echoed, and the comparison takes the same time wherever it differs
    if not hmac.compare_digest(call.fingerprint.encode(), decision.fingerprint.encode()):
        raise StaleDecision(
            f"{where} is not the call the decision was made for (its arguments differ); "
            "look at the call again and decide"
        )
    try:
        check_name(decision.approver, what=f"the approver's name on a decision on {where}")
    except InvalidInput as exc:
        raise InvalidDecision(exc.message) from None
    kind = decision.kind
    if kind is DecisionKind.EDIT and decision.arguments is None:
        raise InvalidDecision(f"an edit of {where} needs the new arguments as a JSON object")
    if kind is DecisionKind.PROVIDE_OUTPUT and call.state is not CallState.IN_DOUBT:
        # a right request at the wrong time: once approved and interrupted, it would be taken
        raise NotInDoubt(
            f"{where} is not in doubt; provide an output only for a call whose run was "
            "interrupted (approve, edit or reject it instead)"
        )
    return {
        DecisionKind.APPROVE: CallState.APPROVED,
        DecisionKind.EDIT: CallState.EDITED,
        DecisionKind.REJECT: CallState.REJECTED,
        DecisionKind.PROVIDE_OUTPUT: CallState.DONE,
    }[kind]
