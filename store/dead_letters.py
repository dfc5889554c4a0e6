"""The dead-letter table: failed sessions kept whole for analysis, stats and forks."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, Engine, func, insert, select, update

from fsm import snapshots
from fsm.errors import DeadLetterClosed, InvalidInput, TickworkError
from fsm.values import SNAPSHOT_SCHEMA_VERSION, Session

from .schema import dead_letters

GROUPS = ("code", "kind", "model", "last_tool", "error_signature")


class DeadLetterNotFound(TickworkError, LookupError):
    """No dead letter has that id: list them with `tickwork dlq ls`."""


class DeadLetter(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: int
    session_id: str
    code: str
    message: str
    kind: str
    model: str
    last_tool: str | None
    error_signature: str
    at: datetime
    schema_version: int
    resolved_at: datetime | None = None
    resolution: dict[str, Any] | None = None
    snapshot: dict[str, Any] = {}

    def session(self) -> Session:
        """The snapshot as a session, upcast from older schema versions."""
        return snapshots.load(self.snapshot)


def error_signature(code: str, message: str) -> str:
    """The message with its particulars (numbers, ids, quoted values) taken out, for grouping."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message)
    text = re.sub(r"\b[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\b", "<id>", text, flags=re.I)
    text = re.sub(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", "<id>", text, flags=re.I)
    text = re.sub(r"\$?\d+(\.\d+)?", "N", text)
    return f"{code}: {text}"[:300]


def record(conn: Connection, session: Session, *, now: datetime) -> None:
    """Insert the failed session's dead letter, in the transaction that failed it."""
    head = session.head
    last_tool = next((c.name for s in reversed(session.steps) for c in reversed(s.calls)), None)
    code = head.error_code.value if head.error_code else "INTERNAL"
    conn.execute(
        insert(dead_letters),
        [
            {
                "session_id": head.id,
                "code": code,
                "message": head.error_message,
                "kind": head.kind,
                "model": head.model,
                "last_tool": last_tool,
                "error_signature": error_signature(code, head.error_message),
                "at": now,
                "schema_version": SNAPSHOT_SCHEMA_VERSION,
                "snapshot": snapshots.dump(session),
            }
        ],
    )


class Closing(StrEnum):
    """How a dead letter was closed: `DeadLetter.resolution["state"]`."""

    FORKED = "forked"  #: a fork of its session runs in its place
    RESOLVED = "resolved"  #: a person fixed the cause another way
    DISMISSED = "dismissed"  #: a person decided nothing is to be done


def record_fork(
    conn: Connection, session_id: str, *, fork: str, by: str, now: datetime, again: bool = False
) -> None:
    """Note `fork` on the dead letter of `session_id` (if it has one), which is resolved by
    it, in the transaction that creates the fork. Every fork is kept. A dead letter already
    forked, resolved or dismissed is refused unless `again`."""
    row = conn.execute(
        select(dead_letters.c.id, dead_letters.c.resolution)
        .where(dead_letters.c.session_id == session_id)
        .with_for_update()
    ).first()
    if row is None:
        return
    resolution = dict(row.resolution or {})
    if resolution and not again:
        raise DeadLetterClosed(
            f"dead letter {row.id} (session {session_id}) {describe(resolution)}; "
            'to fork it once more on purpose, add --again (API: "again": true)'
        )
    forks = [*resolution.get("forks", ()), {"fork": fork, "by": by, "at": now.isoformat()}]
    if not resolution or resolution.get("state") == Closing.FORKED:
        resolution.update(state=Closing.FORKED.value, by=by, at=now.isoformat())
    resolution.update(fork=forks[0]["fork"], forks=forks)
    conn.execute(
        update(dead_letters)
        .where(dead_letters.c.id == row.id)
        .values(resolved_at=now, resolution=resolution)
    )


def close(
    engine: Engine, key: int | str, *, state: Closing, by: str, reason: str, now: datetime
) -> DeadLetter:
    """Resolve or dismiss a dead letter without forking it; refused if already closed."""
    if state is Closing.FORKED:
        raise ValueError("a dead letter is closed as forked only by forking it")
    if not reason.strip():
        raise InvalidInput(f"say why the dead letter is {state.value}: give --reason TEXT")
    column = dead_letters.c.id if isinstance(key, int) else dead_letters.c.session_id
    with engine.begin() as conn:
        row = conn.execute(
            select(dead_letters.c.id, dead_letters.c.session_id, dead_letters.c.resolution)
            .where(column == key)
            .with_for_update()
        ).first()
        if row is None:
            raise DeadLetterNotFound(f"no dead letter {key!r}; list them with `tickwork dlq ls`")
        if row.resolution:
            raise DeadLetterClosed(
                f"dead letter {row.id} (session {row.session_id}) {describe(row.resolution)}"
            )
        resolution = {"state": state.value, "by": by, "at": now.isoformat(), "reason": reason}
        conn.execute(
            update(dead_letters)
            .where(dead_letters.c.id == row.id)
            .values(resolved_at=now, resolution=resolution)
        )
    return get_dead_letter(engine, row.id)


def describe(resolution: dict[str, Any]) -> str:
    """How a dead letter was closed, in words: by whom, when, and its forks."""
    state = resolution.get("state", Closing.FORKED.value)
    forks = resolution.get("forks") or (
        [{"fork": resolution["fork"], "by": resolution.get("by", ""), "at": "?"}]
        if resolution.get("fork")
        else []
    )
    named = ", ".join(f"{f['fork']} by {f['by'] or 'unknown'} at {f['at']}" for f in forks)
    if state == Closing.FORKED.value:
        return f"was already forked as {named}"
    said = (
        f"was already {state} by {resolution.get('by') or 'unknown'} at {resolution.get('at')}"
        f" ({resolution.get('reason', '')})"
    )
    return said + (f"; its forks: {named}" if named else "")


def _row(row: Any, with_snapshot: bool) -> DeadLetter:
    data = dict(row)
    if not with_snapshot:
        data["snapshot"] = {}
    return DeadLetter.model_validate(data)


def list_dead_letters(
    engine: Engine,
    *,
    code: str | None = None,
    kind: str | None = None,
    since: datetime | None = None,
    unresolved: bool = False,
    limit: int = 100,
    with_snapshot: bool = False,
) -> list[DeadLetter]:
    """Newest first."""
    query = select(dead_letters)
    if code:
        query = query.where(dead_letters.c.code == code)
    if kind:
        query = query.where(dead_letters.c.kind == kind)
    if since:
        query = query.where(dead_letters.c.at >= since)
    if unresolved:
        query = query.where(dead_letters.c.resolved_at.is_(None))
    query = query.order_by(dead_letters.c.at.desc(), dead_letters.c.id.desc()).limit(limit)
    with engine.connect() as conn:
        return [_row(r, with_snapshot) for r in conn.execute(query).mappings()]


def get_dead_letter(engine: Engine, key: int | str) -> DeadLetter:
    """By dead-letter id, or by the failed session's id."""
    column = dead_letters.c.id if isinstance(key, int) else dead_letters.c.session_id
    with engine.connect() as conn:
        row = conn.execute(select(dead_letters).where(column == key)).mappings().first()
    if row is None:
        raise DeadLetterNotFound(f"no dead letter {key!r}; list them with `tickwork dlq ls`")
    return _row(row, True)


def stats(engine: Engine, *, by: str, since: datetime | None = None) -> list[dict[str, Any]]:
    """Counts of dead letters grouped by one of GROUPS, largest first."""
    if by not in GROUPS:
        raise ValueError(f"cannot group dead letters by {by!r}; choose one of {', '.join(GROUPS)}")
    column = dead_letters.c[by]
    query = select(
        column.label("value"),
        func.count().label("count"),
        func.max(dead_letters.c.at).label("latest"),
    )
    if since:
        query = query.where(dead_letters.c.at >= since)
    query = query.group_by(column).order_by(func.count().desc(), column)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]
