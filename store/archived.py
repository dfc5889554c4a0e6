"""Archived sessions read back: the `tickwork_archived` index and the records it points to.

`retention.py` moves finished sessions to the archive; this finds them there again, for
`tickwork show`, `tickwork fork` and lineage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select
from tickwork.fsm.values import Session
from tickwork.store import archive as archives
from tickwork.store.files import Saved
from tickwork.store.reads import ids_starting
from tickwork.store.schema import archived

PENDING, ARCHIVED = "pending", "archived"


@dataclass(frozen=True)
class Entry:
    """A session's row in `tickwork_archived`."""

    session_id: str
    location: str
    state: str
    status: str
    kind: str
    parent_id: str | None
    fork_step: int | None
    created_at: datetime
    finished_at: datetime
    archived_at: datetime | None
    #: the session's tenant (`default` for those archived before tenants)
    tenant: str = "default"
    #: a child's spawning call (a fork has none: `parent_id` alone) and role
    spawn_call: str | None = None
    role: str = ""
    #: who submitted (or forked) it; None if archived before the index kept it
    submitted_by: str | None = None


@dataclass(frozen=True)
class ArchivedSession:
    """An archived session read back: the session, and the rest of its record."""

    entry: Entry
    session: Session
    record: dict[str, Any] = field(repr=False)


def _entry(row: Any) -> Entry:
    return Entry(
        session_id=row.session_id,
        location=row.location,
        state=row.state,
        status=row.status,
        kind=row.kind,
        parent_id=row.parent_id,
        fork_step=row.fork_step,
        created_at=row.created_at,
        finished_at=row.finished_at,
        archived_at=row.archived_at,
        tenant=row.tenant,
        spawn_call=row.spawn_call,
        role=row.role,
        submitted_by=row.submitted_by,
    )


def entry(engine: Engine, session_id: str) -> Entry | None:
    """The archived session's index row; None if it is not archived (pending ones are live)."""
    if "\x00" in session_id:
        return None
    with engine.connect() as conn:
        row = conn.execute(
            select(archived).where(
                archived.c.session_id == session_id, archived.c.state == ARCHIVED
            )
        ).first()
    return None if row is None else _entry(row)


def archived_ids_starting(
    engine: Engine, prefix: str, *, limit: int, tenant: str | None = None
) -> list[str]:
    """The ids of the archived sessions (of `tenant`, if given) that start with `prefix`, in
    id order, at most `limit` (pending ones are still live)."""
    where = [archived.c.state == ARCHIVED]
    if tenant is not None:
        where.append(archived.c.tenant == tenant)
    with engine.connect() as conn:
        return ids_starting(conn, archived.c.session_id, prefix, limit=limit, where=where)


def load_archived(
    engine: Engine, archive: archives.Archive, session_id: str
) -> ArchivedSession | None:
    """An archived session read back from its batch; None if it is not archived."""
    found = entry(engine, session_id)
    if found is None:
        return None
    try:
        batch = archives.read_batch(archive, found.location)
    except archives.ArchiveMissing:
        raise archives.ArchiveMissing(
            f"session {session_id} was archived to {found.location}, which is not in the "
            f"archive {archive.url}: set TICKWORK_RETENTION_ARCHIVE_URL to the archive it was "
            "written to, or put that archive back",
            session_id=session_id,
        ) from None
    if session_id not in batch:
        raise archives.ArchiveMissing(
            f"session {session_id} is not in its archive batch {found.location} "
            f"({archive.url}); was the archive changed?",
            session_id=session_id,
        )
    item = batch[session_id]
    return ArchivedSession(found, archives.session_of(item), item)


def list_archived(
    engine: Engine,
    *,
    status: Sequence[str] = (),
    kind: str | None = None,
    limit: int = 50,
    offset: int = 0,
    tenant: str | None = None,
    submitted_by: str | None = None,
) -> list[Entry]:
    """Archived sessions from the index alone (no batch is read), the latest archived
    first (the order of the archived_at index); only `tenant`'s if given, and only those
    `submitted_by` submitted (none archived before the index kept its submitter)."""
    query = select(archived).where(archived.c.state == ARCHIVED)
    if tenant is not None:
        query = query.where(archived.c.tenant == tenant)
    if submitted_by is not None:
        query = query.where(archived.c.submitted_by == submitted_by)
    if status:
        query = query.where(archived.c.status.in_(list(status)))
    if kind:
        query = query.where(archived.c.kind == kind)
    query = query.order_by(archived.c.archived_at.desc(), archived.c.session_id)
    with engine.connect() as conn:
        return [_entry(r) for r in conn.execute(query.limit(limit).offset(offset))]


def archived_forks(engine: Engine, parent_id: str) -> list[dict[str, Any]]:
    """The archived sessions forked from `parent_id`: id, step, status, when, and who made
    it (`submitted_by`, None if archived before the index kept it); a child names its
    parent too, but is not a fork."""
    query = (
        select(
            archived.c.session_id.label("id"),
            archived.c.fork_step,
            archived.c.status,
            archived.c.created_at,
            archived.c.submitted_by,
        )
        .where(
            archived.c.parent_id == parent_id,
            archived.c.spawn_call.is_(None),
            archived.c.state == ARCHIVED,
        )
        .order_by(archived.c.created_at, archived.c.session_id)
    )
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def archived_since(engine: Engine, since: datetime) -> list[str]:
    """The sessions archived at or after `since`."""
    query = select(archived.c.session_id).where(archived.c.archived_at >= since)
    with engine.connect() as conn:
        return list(conn.execute(query).scalars())


def saved_of(found: Mapping[str, Any]) -> list[Saved]:
    """An archive record's saved file changes, as `Store.file_changes` gives them."""
    return [
        Saved(c["version"], c["step"], c["call_id"], dict(c["changes"]), c["state"])
        for c in found.get("file_changes") or ()
    ]
