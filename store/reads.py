"""Reading a session back inside an open connection: its head, calls, decisions, steps and
observations, and where a THINK's transcript starts. The Core store's methods and its
writes (`writes.py`) call these in their own transactions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    func,
    literal,
    null,
    select,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import GenericFunction
from tickwork.fsm.context import READ_WHOLE_BYTES, needed_from
from tickwork.fsm.errors import CallNotFound, NotWaiting, SessionNotFound
from tickwork.fsm.loops import HISTORY
from tickwork.fsm.values import (
    Decision,
    EventKind,
    Head,
    Observation,
    Session,
    Step,
    StepKind,
    ToolCall,
)
from tickwork.store import rows
from tickwork.store.schema import calls, decisions, events, observations, sessions, steps
from tickwork.store.ticks import steps_from_rows


class byte_length(GenericFunction[int]):
    """The length of a text in bytes (its UTF-8 encoding's). Not a cast to bytea on
    Postgres, which reads backslashes as escapes and refuses most texts holding one."""

    type = Integer()
    inherit_cache = True


@compiles(byte_length)
def _byte_length(element: byte_length, compiler: Any, **kw: Any) -> str:
    return f"length(CAST({compiler.process(element.clauses, **kw)} AS BLOB))"


@compiles(byte_length, "postgresql")
def _byte_length_postgres(element: byte_length, compiler: Any, **kw: Any) -> str:
    return f"octet_length({compiler.process(element.clauses, **kw)})"


def read_head(conn: Connection, session_id: str, *, lock: bool = False) -> Head:
    if "\x00" in session_id:  # no id holds one, and Postgres refuses it as a parameter
        raise SessionNotFound.of(session_id)
    query = select(sessions).where(sessions.c.id == session_id)
    row = conn.execute(query.with_for_update() if lock else query).mappings().first()
    if row is None:
        raise SessionNotFound.of(session_id)
    return rows.head_from_row(row)


def ids_starting(
    conn: Connection,
    column: ColumnElement[str],
    prefix: str,
    *,
    limit: int,
    where: Sequence[ColumnElement[bool]] = (),
) -> list[str]:
    """The values of the id `column` that start with `prefix`, in order, at most `limit`."""
    if not prefix or "\x00" in prefix:
        return []
    query = select(column).where(starts_with(column, prefix), *where).order_by(column).limit(limit)
    return list(conn.execute(query).scalars())


def starts_with(column: ColumnElement[str], prefix: str) -> ColumnElement[bool]:
    """Whether `column` starts with `prefix`, exactly. The LIKE (its wildcards escaped) is
    what a Postgres index of `varchar_pattern_ops` takes, instead of a scan of the table;
    the comparison keeps the match exact where LIKE is not (SQLite's ignores case)."""
    pattern = prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"
    return and_(column.like(pattern, escape="!"), func.substr(column, 1, len(prefix)) == prefix)


def waiting_since() -> ColumnElement[Any]:
    """When each session's last wait for a person began: its last `approval_requested`
    event's time (the API's `waiting_since`; a decision on one of several waiting calls
    changes the session, not this), else its last update. The approvals queue's order and
    its limit both take this key, so the limit keeps those that have waited longest."""
    asked = (
        select(func.max(events.c.at))
        .where(
            events.c.session_id == sessions.c.id,
            events.c.kind == EventKind.APPROVAL_REQUESTED.value,
        )
        .scalar_subquery()
    )
    return func.coalesce(asked, sessions.c.updated_at)


#: a session's calls (`_CALLS_AT`: of one step), in order; built once, as the statements a
#: tick runs are (`writes.py`)
_CALLS = (
    select(calls)
    .where(calls.c.session_id == bindparam("b_id"))
    .order_by(calls.c.step, calls.c.index)
)
_CALLS_AT = _CALLS.where(calls.c.step == bindparam("b_step"))


def read_calls(
    conn: Connection, session_id: str, *, step: int | None = None
) -> tuple[ToolCall, ...]:
    if step is None:
        found = conn.execute(_CALLS, {"b_id": session_id}).mappings()
    else:
        found = conn.execute(_CALLS_AT, {"b_id": session_id, "b_step": step}).mappings()
    return tuple(rows.call_from_row(r) for r in found)


def read_call(conn: Connection, session_id: str, call_id: str) -> ToolCall | None:
    if "\x00" in call_id:  # no id holds one, and Postgres refuses it as a parameter
        return None
    query = select(calls).where(calls.c.session_id == session_id, calls.c.call_id == call_id)
    row = conn.execute(query).mappings().first()
    return None if row is None else rows.call_from_row(row)


def read_decisions(
    conn: Connection, session_id: str, of: Sequence[ToolCall | str] | None = None
) -> dict[str, Decision]:
    """The latest decision on each call."""
    if of is None:
        found = conn.execute(_DECISIONS, {"b_id": session_id})
    else:
        ids = [c if isinstance(c, str) else c.call_id for c in of]
        found = conn.execute(_DECISIONS_OF, {"b_id": session_id, "b_calls": ids})
    return {r["call_id"]: rows.decision_from_row(r) for r in found.mappings()}


#: a session's decisions (`_DECISIONS_OF`: on the calls `b_calls`), the latest of each last
_DECISIONS = (
    select(decisions)
    .where(decisions.c.session_id == bindparam("b_id"))
    .order_by(decisions.c.call_id, decisions.c.attempt)
)
_DECISIONS_OF = _DECISIONS.where(decisions.c.call_id.in_(bindparam("b_calls", expanding=True)))


def read_all_decisions(conn: Connection, session_id: str) -> tuple[Decision, ...]:
    query = (
        select(decisions)
        .where(decisions.c.session_id == session_id)
        .order_by(decisions.c.at, decisions.c.call_id, decisions.c.attempt)
    )
    return tuple(rows.decision_from_row(r) for r in conn.execute(query).mappings())


def missing_call(conn: Connection, head: Head, call_id: str) -> None:
    found = conn.execute(
        select(calls.c.state).where(calls.c.session_id == head.id, calls.c.call_id == call_id)
    ).first()
    waiting = ", ".join(head.awaiting) or "none"
    if found is None:
        raise CallNotFound(
            f"session {head.id} has no call {call_id!r}; calls waiting for a decision: {waiting}"
        )
    raise NotWaiting(
        f"call {call_id} of session {head.id} is {found[0]}, not waiting for a "
        f"decision; calls waiting: {waiting}"
    )


def context_start(conn: Connection, session_id: str) -> tuple[int, int]:
    """(the step a THINK reads after, the last step whose observations it reads by size
    only): before the latest compaction's cut (or the last `HISTORY` replies before it, for
    loop detection), 0 with no compaction; and the latest mask since. Read before the
    claim: a step stored meanwhile only makes the claim read more than it needs."""
    latest = conn.execute(
        select(steps.c.step, steps.c.compacted_through)
        .where(steps.c.session_id == session_id, steps.c.kind == StepKind.COMPACTION.value)
        .order_by(steps.c.step.desc())
        .limit(1)
    ).first()
    since = 0 if latest is None else int(latest.step)
    masked = conn.execute(
        select(func.max(steps.c.masked_through)).where(
            steps.c.session_id == session_id, steps.c.step > since
        )
    ).scalar()
    if latest is None:
        return 0, int(masked or 0)
    start = max(0, min(int(latest.compacted_through), since - 1 - HISTORY))
    return start, max(int(latest.compacted_through), int(masked or 0))


def needed(
    history: tuple[Step, ...], seen: dict[str, Observation]
) -> tuple[tuple[Step, ...], dict[str, Observation]]:
    """The steps (and their observations) a THINK still needs (`tickwork.fsm.context.needed_from`),
    so a cached transcript stays bounded by the window, not the session's length."""
    first = needed_from(history, history=HISTORY)
    if not history or history[0].step >= first:
        return history, seen
    kept = tuple(s for s in history if s.step >= first)
    ids = {c.call_id for s in kept for c in s.calls}
    return kept, {k: v for k, v in seen.items() if k in ids}


def read_history(
    conn: Connection, session_id: str, *, after: int = 0, masked: int = 0
) -> tuple[tuple[Step, ...], dict[str, Observation]]:
    """The steps after step `after`, with their calls and the observations of those calls."""
    params = {"b_id": session_id, "b_after": after}
    call_rows = conn.execute(_CALLS_AFTER, params).mappings().all()
    step_rows = conn.execute(_STEPS_AFTER, params).mappings()
    history = steps_from_rows(step_rows, call_rows)
    seen: dict[str, Observation] = {}
    if masked > after:
        # the observations the prompt shows as stubs: their size, not their content (but
        # a short one's, which may stay whole: `tickwork.fsm.context.READ_WHOLE_BYTES`)
        size = byte_length(observations.c.content)
        short = size <= READ_WHOLE_BYTES
        stubs = select(
            observations.c.call_id,
            case((short, observations.c.content), else_=literal("")).label("content"),
            observations.c.is_error,
            observations.c.at,
            observations.c.duration_ms,
            case((short, null()), else_=size).label("elided"),
        ).where(
            observations.c.session_id == session_id,
            observations.c.call_id.in_(call_ids(session_id, after, masked)),
        )
        seen.update(
            (r["call_id"], rows.observation_from_row(r)) for r in conn.execute(stubs).mappings()
        )
    if after or masked:
        found = conn.execute(_OBSERVED_AFTER, {"b_id": session_id, "b_after": max(after, masked)})
    else:
        found = conn.execute(_OBSERVED, {"b_id": session_id})
    seen.update((r["call_id"], rows.observation_from_row(r)) for r in found.mappings())
    return history, seen


#: what `read_history` reads of the steps after `b_after`: their calls, the steps, and (all
#: of the session's, or those of the calls after `b_after`) the observations
_CALLS_AFTER = _CALLS.where(calls.c.step > bindparam("b_after"))
_STEPS_AFTER = (
    select(steps)
    .where(steps.c.session_id == bindparam("b_id"), steps.c.step > bindparam("b_after"))
    .order_by(steps.c.step)
)
_OBSERVED = select(observations).where(observations.c.session_id == bindparam("b_id"))
# by the calls' ids, looked up one by one: a join may scan every observation per call
_OBSERVED_AFTER = _OBSERVED.where(
    observations.c.call_id.in_(
        select(calls.c.call_id).where(
            calls.c.session_id == bindparam("b_id"), calls.c.step > bindparam("b_after")
        )
    )
)


def call_ids(session_id: str, after: int, through: int | None = None) -> Select[tuple[str]]:
    """The ids of the session's calls of the steps after `after` (up to `through`)."""
    query = select(calls.c.call_id).where(calls.c.session_id == session_id, calls.c.step > after)
    return query if through is None else query.where(calls.c.step <= through)


def read_session(conn: Connection, session_id: str) -> Session:
    head = read_head(conn, session_id)
    history, seen = read_history(conn, session_id)
    found = conn.execute(
        select(events).where(events.c.session_id == session_id).order_by(events.c.id)
    ).mappings()
    return Session(
        head=head,
        steps=history,
        # in the order of the calls they answer
        observations=tuple(seen[c.call_id] for s in history for c in s.calls if c.call_id in seen),
        decisions=read_all_decisions(conn, session_id),
        events=tuple(rows.event_from_row(r) for r in found),
    )
