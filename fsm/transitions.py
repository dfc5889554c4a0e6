"""What both session machines share: the change a transition makes, and its common moves.

`tickwork.fsm.machine` (the agent loop) and `tickwork.fsm.graph_machine` (a graph) each
decide their own micro-phases; how a head moves, how a session ends, how open calls are
closed, how a call found in doubt waits for a person and how a finished call is recorded
are written here once, under public names, and used by both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tickwork.fsm.approvals import rejection
from tickwork.fsm.errors import IllegalTransition, SessionFinished
from tickwork.fsm.joins import Join, JoinMark
from tickwork.fsm.values import (
    CallState,
    Decision,
    Event,
    EventKind,
    Head,
    Observation,
    Status,
    Step,
    ToolCall,
    Usage,
    Value,
)

#: the most characters of a failed session's message (its `error_message`, and the `failed`
#: and `dead_lettered` events' and the dead letter's copies) kept, its start and end with a
#: note of the cut between (`ended`): an exception's text may be any size (a model
#: server's error body, a node's exception), and every failure is cut here, once
ERROR_CHARS = 2_000


def cap_error(text: str) -> str:
    """An error's text as a failure keeps it: cut to ERROR_CHARS, its start and end kept
    with a note of the cut (`cap_output`); for every copy of an error stored beside it (a
    retry's, a refusal's event) too."""
    return cap_output(text, ERROR_CHARS)


class StepCharge(Value):
    """Tokens and cost added to stored step `step` (its other fields never change)."""

    step: int
    usage: Usage
    cost_usd: float


class Change(Value):
    """What one transition changed; the store applies it in one transaction."""

    #: the head after the change; the store saves it at `version + 1`
    head: Head
    #: a newly recorded step with its calls
    step: Step | None = None
    #: existing calls whose state changed, in order
    call_states: tuple[tuple[str, CallState], ...] = ()
    observations: tuple[Observation, ...] = ()
    decisions: tuple[Decision, ...] = ()
    events: tuple[Event, ...] = ()
    #: how long the next tick should wait (model retry backoff)
    delay_s: float = 0.0
    #: model use to add to an existing step: a graph node's `ctx.generate` calls, charged
    #: to the node's step when the node finishes
    charged: StepCharge | None = None
    #: child sessions to insert with the change, each with its first tick (a spawn)
    children: tuple[Head, ...] = ()
    #: the join of those children, inserted with them (`tickwork.fsm.trees.spawned`)
    join: Join | None = None
    #: the most sessions the children's tree may hold with them: the store counts the tree
    #: under its lock as it inserts them, and raises TreeFull past it (a spawn elsewhere in
    #: the tree saved since the tick counted); None: no limit
    tree_limit: int | None = None
    #: the parent's write on its `each` join: results delivered, or a call suspending
    mark: JoinMark | None = None

    @property
    def enqueue(self) -> bool:
        return self.head.status.runnable

    @property
    def dead_letter(self) -> bool:
        return self.head.status is Status.FAILED


def moved(head: Head, now: datetime, **fields: Any) -> Head:
    """`head` with `fields` changed, updated at `now`."""
    return head.model_copy(update={"updated_at": now, **fields})


def require(head: Head, *statuses: Status) -> None:
    """SessionFinished if the session has ended, IllegalTransition unless it is in one of
    `statuses`."""
    if head.status.terminal:
        raise SessionFinished(f"session {head.id} is {head.status.value}; fork it to go on")
    if head.status not in statuses:
        allowed = " or ".join(s.value for s in statuses)
        raise IllegalTransition(f"session {head.id} is {head.status.value}, not {allowed}")


def ended(
    head: Head, status: Status, now: datetime, events: Sequence[Event] = (), **fields: Any
) -> Change:
    """A change that ends the session, with its closing events; an `error_message` longer
    than ERROR_CHARS is cut to it (`cap_error`), its start and end kept."""
    kind = {
        Status.COMPLETED: EventKind.COMPLETED,
        Status.FAILED: EventKind.FAILED,
        Status.CANCELLED: EventKind.CANCELLED,
    }[status]
    if "error_message" in fields:
        fields["error_message"] = cap_error(fields["error_message"])
    new = moved(head, now, status=status, awaiting=(), **fields)
    data = {"error_code": new.error_code, "message": new.error_message} if new.error_code else {}
    closing = [Event(kind=kind, at=now, data=data)]
    if status is Status.FAILED:
        closing.append(Event(kind=EventKind.DEAD_LETTERED, at=now, data=data))
    return Change(head=new, events=(*events, *closing))


def cancelled(
    head: Head,
    calls: Sequence[ToolCall],
    now: datetime,
    decisions: Mapping[str, Decision] | None = None,
    *,
    idempotent: bool = False,
) -> Change:
    """A runnable session whose cancel was requested, ended at its tick: its open calls are
    closed as not run (a rejected one with its rejection, `decisions` holding it; a started
    one as `close_calls` says, `idempotent` telling whether it may run twice)."""
    change = ended(head, Status.CANCELLED, now)
    closed = close_calls(calls, "not run: session cancelled", now, decisions, idempotent=idempotent)
    return change.model_copy(update=closed)


def cancelled_meanwhile(change: Change, now: datetime) -> Change:
    """`change`, which ends the session completed, ending it cancelled instead: the cancel
    was requested while its tick ran (docs/DESIGN.md section 16). What the tick did, once,
    is kept (its step, observations, calls' states, charge, the answer it reached); the
    session ends cancelled, as it would have at its next tick."""
    if change.head.status is not Status.COMPLETED:
        raise IllegalTransition(
            f"session {change.head.id}: only a change that completes it ends cancelled instead"
        )
    head = moved(change.head, now, status=Status.CANCELLED, cancel_requested=True)
    events = tuple(
        e.model_copy(
            update={"kind": EventKind.CANCELLED, "data": {**e.data, "would_have": "completed"}}
        )
        if e.kind is EventKind.COMPLETED
        else e
        for e in change.events
    )
    return change.model_copy(update={"head": head, "events": events})


def close_calls(
    calls: Sequence[ToolCall],
    why: str,
    now: datetime,
    decisions: Mapping[str, Decision] | None = None,
    *,
    idempotent: bool = False,
) -> dict[str, Any]:
    """The call states and observations (`Change` fields) that close the open calls of
    `calls` with `why` as their error observation; a rejected call whose decision
    `decisions` holds, with its rejection (the approver's feedback is never lost: it is
    why the call did not run, and what a fork's model reads).

    A call found started (a step runs one call at a time, so at most one) reads as
    interrupted, as it may or may not have run, unless `idempotent` says its tool (or
    node) may run twice: such a call runs again from the start (an EXECUTE claim marks one
    started before it runs, and what an attempt cut short changed in the files was never
    saved), so a session that ends here did not run it, as it did not run the calls after
    it. A call in doubt always reads as interrupted."""
    todo = [c for c in calls if c.state.open or c.state.awaits_person]

    def text(call: ToolCall) -> str:
        if call.state is CallState.IN_DOUBT or (call.state is CallState.STARTED and not idempotent):
            return why.replace("not run", "interrupted; it may or may not have run")
        decided = (decisions or {}).get(call.call_id)
        if call.state is CallState.REJECTED and decided is not None:
            return rejection(call, decided)
        return why

    return {
        "call_states": tuple((c.call_id, CallState.DONE) for c in todo),
        "observations": tuple(
            Observation(call_id=c.call_id, content=text(c), is_error=True, at=now) for c in todo
        ),
    }


def in_doubt(head: Head, call: ToolCall, *, now: datetime) -> Change:
    """A call found started with no result, whose tool may not run twice: a person decides
    (retry it, give its output, or reject it)."""
    event = Event(
        kind=EventKind.APPROVAL_REQUESTED,
        at=now,
        data={"step": call.step, "calls": [call.call_id], "in_doubt": True},
    )
    return Change(
        head=moved(head, now, status=Status.WAITING_APPROVAL, awaiting=(call.call_id,)),
        call_states=((call.call_id, CallState.IN_DOUBT),),
        events=(event,),
    )


def call_finished(
    call: ToolCall, output: str, *, is_error: bool, now: datetime, duration_ms: float = 0.0
) -> Event:
    """The `tool_finished` event of a call (a tool's, or a graph node's run)."""
    return Event(
        kind=EventKind.TOOL_FINISHED,
        at=now,
        data={
            "call_id": call.call_id,
            "name": call.name,
            "is_error": is_error,
            "duration_ms": duration_ms,
            "output_chars": len(output),
        },
    )


def cap_output(text: str, max_chars: int) -> str:
    """`text`, or its head and tail with a note saying how much of the middle was cut."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    cut = len(text) - max_chars
    note = f"\n[... {cut} characters cut from the middle of {len(text)} ...]\n"
    return text[:head] + note + text[len(text) - tail :]


#: the note `cap_output` puts where it cut
_CUT_NOTE = re.compile(r"\n\[\.\.\. \d+ characters cut from the middle of \d+ \.\.\.\]\n")


def kept_end(text: str) -> str | None:
    """What `cap_output` kept of the end of `text`, after its note; None if it cut nothing."""
    cuts = list(_CUT_NOTE.finditer(text))
    return text[cuts[-1].end() :] if cuts else None


def observed(
    call: ToolCall, output: str, *, is_error: bool, now: datetime, duration_ms: float = 0.0
) -> dict[str, Any]:
    """The call state and observation (`Change` fields) that record `output` as the call's."""
    return {
        "call_states": ((call.call_id, CallState.DONE),),
        "observations": (
            Observation(
                call_id=call.call_id,
                content=output,
                is_error=is_error,
                at=now,
                duration_ms=duration_ms,
            ),
        ),
    }
