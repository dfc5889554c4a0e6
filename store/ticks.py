"""What the tick's three writes (claim, start a call, save) share on every database.

`core.CoreStore` runs them through SQLAlchemy Core, a short transaction of a few
statements each; `postgres.PostgresStore` runs each as one statement. Both take what they
write from here (the rows a save appends, the calls it closes, the started call's event)
and give back what they read as the same values, so the two differ only in how the rows
travel; `tests/store/test_differential.py` checks that they leave the same rows.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table
from tickwork.fsm.errors import ClaimLost
from tickwork.fsm.kinds import SessionKind, kind_of
from tickwork.fsm.loops import HISTORY
from tickwork.fsm.machine import Change, next_call
from tickwork.fsm.values import (
    CallState,
    Decision,
    Event,
    EventKind,
    Head,
    Observation,
    Status,
    Step,
    StepKind,
    ToolCall,
)
from tickwork.store import rows
from tickwork.store.files import FileChange
from tickwork.store.schema import (
    calls,
    decisions,
    events,
    file_changes,
    observations,
    outbox,
    steps,
)
from tickwork.store.transcripts import Mark

#: the `after` of a claim that reads no steps (a THINK that missed the transcript cache
#: reads them from the latest compaction on, after the claim: `core.CoreStore.claim`)
NO_STEPS = 2**31 - 1

#: the states a call can be started from
OPEN = [s.value for s in CallState if s.open]

#: per session kind, the tools whose calls may run twice: an EXECUTE claim marks such a
#: call started in its own transaction (`startable`)
Idempotent = Mapping[str, Collection[str]]

#: the tables a save appends to, in the order of the foreign keys
APPENDED: tuple[Table, ...] = (steps, calls, observations, decisions, events, outbox, file_changes)


@dataclass(frozen=True)
class Claimed:
    """What a tick needs after claiming a session; the lease is `owner`'s."""

    head: Head
    owner: str
    #: EXECUTING: the current step's calls and their decisions, as the claim found them
    calls: tuple[ToolCall, ...] = ()
    decisions: dict[str, Decision] = field(default_factory=dict)
    #: EXECUTING: the call the claim marked started (`startable`), its `tool_started`
    #: event written: the tick runs it without `start_call`
    started: str | None = None
    #: READY: the whole history, for the transcript (from `claim`; only the steps after the
    #: cached ones from a store's `_take`)
    steps: tuple[Step, ...] = ()
    observations: dict[str, Observation] = field(default_factory=dict)

    @property
    def recent(self) -> tuple[str, ...]:
        """Fingerprints of the latest steps, oldest first."""
        replies = [s for s in self.steps if s.kind is StepKind.REPLY]
        return tuple(s.fingerprint for s in replies[-HISTORY:])


@dataclass(frozen=True)
class Lease:
    """Whose write it is: session `session_id` at `version` under `owner`'s lease (None: a
    write with no lease, a person's), at `now`."""

    session_id: str
    version: int
    owner: str | None
    now: datetime


#: what a store's claim read: the claimed value, and the step the caller knew as it is now
Taken = tuple[Claimed, Mark]


def lost(session_id: str, version: int, owner: str | None) -> ClaimLost:
    return ClaimLost(
        f"session {session_id} is no longer at version {version}"
        + (f" under lease {owner}" if owner else "")
        + "; this tick's work is dropped and the newer state stands"
    )


def not_started(session_id: str, version: int, owner: str, call_id: str) -> ClaimLost:
    return ClaimLost(
        f"session {session_id} is no longer at version {version} "
        f"under lease {owner}; call {call_id} was not started"
    )


def started_event(
    session_id: str, version: int, call: ToolCall, *, now: datetime, rerun: bool
) -> dict[str, Any]:
    """The `tool_started` event row of `call`."""
    event = Event(
        kind=EventKind.TOOL_STARTED,
        at=now,
        data={"call_id": call.call_id, "name": call.name, "rerun": rerun},
    )
    return rows.event_to_row(session_id, version, event)


def startable(head: Head, calls: Sequence[ToolCall], idempotent: Idempotent) -> ToolCall | None:
    """The call an EXECUTE claim marks started in its own transaction, saving the tick the
    commit of `start_call`: the step's next call, if it is pending with arguments and its
    tool is idempotent for the session's kind (and offered to its role), in an agent
    session with no cancel asked. A call so marked but then not run (refused, its files not
    opened, its worker gone) is found started by the next tick and runs again, as any
    started idempotent call does (`machine.start_execute`: `rerun`); a tool that may not run
    twice keeps its own flushed start. `postgres.CLAIM` says the same in SQL."""
    if head.status is not Status.EXECUTING or head.cancel_requested:
        return None
    if kind_of(head) is not SessionKind.AGENT:
        return None  # a graph's calls are its nodes, not its tools
    call = next_call(calls)
    if call is None or call.state is not CallState.PENDING or call.arguments is None:
        return None
    offered = head.config.get("tools")
    if isinstance(offered, list) and call.name not in offered:
        return None
    return call if call.name in idempotent.get(head.kind, ()) else None


def appended(
    change: Change, *, version: int, now: datetime, files: FileChange | None = None
) -> dict[Table, list[dict[str, Any]]]:
    """The rows `change` (and the tick's `files`) append, by table, in the order of the
    foreign keys."""
    session_id = change.head.id
    step = change.step
    # a new step's calls are stored in the state the change leaves them in
    states = {cid: state.value for cid, state in change.call_states}
    # a delayed tick waits here, unpublished, until the relay publishes it when due
    tick = {
        "session_id": session_id,
        "version": version,
        "due_at": now + timedelta(seconds=change.delay_s),
        "published_at": None if change.delay_s > 0 else now,
    }
    return {
        steps: [] if step is None else [rows.step_to_row(session_id, step)],
        calls: []
        if step is None
        else [
            {**rows.call_to_row(session_id, c), "state": states.get(c.call_id, c.state.value)}
            for c in step.calls
        ],
        observations: [rows.observation_to_row(session_id, o) for o in change.observations],
        decisions: [rows.decision_to_row(session_id, d) for d in change.decisions],
        events: [rows.event_to_row(session_id, version, e) for e in change.events],
        outbox: [tick] if change.enqueue else [],
        file_changes: [] if files is None else [files.row(session_id, version)],
    }


#: head columns whose value `rows.storable` may change on the way in (a NUL in a text)
_CLEANED = ("error_message", "final_answer", "result")


def saved_head(head: Head, stored: dict[str, Any], *, version: int, cancel_requested: bool) -> Head:
    """`head` as a save stored it at `version`, built without reading the row back: the
    save returns only what the database decides (the cancel flag, which a request during
    the tick may have set), and a text `rows.storable` cleaned is taken as stored (`stored`:
    the row's values the save wrote, `rows.head_changes`)."""
    update: dict[str, Any] = {"version": version, "cancel_requested": cancel_requested}
    for name in _CLEANED:
        if stored[name] != getattr(head, name):
            update[name] = stored[name]
    return head.model_copy(update=update)


def changed_states(change: Change) -> list[dict[str, Any]]:
    """The new states of calls stored before this change (those of its own step are stored
    in their state by `appended`), each with its step: the saves find a call by its session
    and step (an index) and its id."""
    new = {c.call_id for c in change.step.calls} if change.step is not None else set()
    return [
        {"call_id": cid, "step": step_of(cid), "state": state.value}
        for cid, state in change.call_states
        if cid not in new
    ]


def charged_rows(change: Change) -> list[dict[str, Any]]:
    """The model use `change` adds to an existing step (a graph node's), as rows: its
    tokens, those of its prompts the provider's cache read and wrote, and its cost."""
    c = change.charged
    if c is None:
        return []
    return [
        {
            "step": c.step,
            "prompt_tokens": c.usage.prompt_tokens,
            "completion_tokens": c.usage.completion_tokens,
            "cached_prompt_tokens": c.usage.cached_prompt_tokens,
            "cache_creation_tokens": c.usage.cache_creation_tokens,
            "cost_usd": c.cost_usd,
        }
    ]


_CALL_ID = re.compile(r"s(\d+)c\d+")


def step_of(call_id: str) -> int:
    """The step of a call, from its id (`tickwork.fsm.values.call_id_for` made every stored one)."""
    found = _CALL_ID.fullmatch(call_id)
    if found is None:
        raise ValueError(f"{call_id!r} is not a call id of tickwork's (s<step>c<index>)")
    return int(found[1])


def steps_from_rows(
    step_rows: Iterable[rows.Row], call_rows: Iterable[rows.Row]
) -> tuple[Step, ...]:
    """Steps in order from their rows and their calls' rows (in step and index order)."""
    by_step: dict[int, list[ToolCall]] = {}
    for r in call_rows:
        call = rows.call_from_row(r)
        by_step.setdefault(call.step, []).append(call)
    return tuple(rows.step_from_row(r, tuple(by_step.get(r["step"], ()))) for r in step_rows)
