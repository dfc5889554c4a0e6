"""Retention: finished sessions archived whole, then deleted from the live tables
(docs/DESIGN.md section 11).

A pass takes sessions in small batches, each of sessions that finished on one day:

1. **claim** (one short transaction): the batch's sessions get a `pending` row in
   `tickwork_archived` naming the batch's archive object; on Postgres the heads are taken
   `FOR UPDATE SKIP LOCKED` and checked again once locked, so passes in many workers never
   take the same session.
2. **write** (no transaction): each session is read whole and the batch written to the
   archive (`archive.py`), replacing an earlier write of the same batch.
3. **finish** (one short transaction): the sessions' rows are deleted from every live
   table and their index rows become `archived`, if the sessions are as they were read.

A worker killed after 1 or 2 leaves a `pending` batch, which a later pass (in any worker)
writes again, under the same name, and finishes: nothing lost, nothing archived twice. A
session is live until 3 commits and archived after it, never both and never neither.

Never taken: a running (ready, executing) or waiting session, and a failed one whose dead
letter is not closed (resolved, dismissed or forked). A fork's parent is archived like any
other: the fork keeps its own files and records its parent, whose record stays readable.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    and_,
    delete,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import InterfaceError, OperationalError
from tickwork.fsm.errors import StoreUnavailable
from tickwork.fsm.values import Session, Status
from tickwork.store import archive as archives
from tickwork.store import dead_letter_counts
from tickwork.store.archived import ARCHIVED, PENDING
from tickwork.store.artifacts import Artifacts
from tickwork.store.dead_letters import DeadLetterNotFound, get_dead_letter
from tickwork.store.files import saved_changes
from tickwork.store.schema import (
    archived,
    calls,
    dead_letters,
    decisions,
    events,
    file_changes,
    observations,
    outbox,
    sessions,
    steps,
)
from tickwork.store.sweep import sweep

log = logging.getLogger("tickwork.retention")

#: the live tables a session's rows are deleted from, children first
LIVE_TABLES = (events, outbox, file_changes, decisions, observations, calls, steps, dead_letters)
#: a pending batch older than this is taken over by another pass (its pass died)
STALE_AFTER_S = 300.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Policy:
    """How long finished sessions stay live, by status, in seconds (None: for ever)."""

    completed_s: float | None = None
    cancelled_s: float | None = None
    #: a failed session counts from when its dead letter was closed, and never while open
    failed_s: float | None = None
    #: sessions per batch (one archive object, one delete transaction)
    batch: int = 50

    @property
    def enabled(self) -> bool:
        return any(s is not None for s in (self.completed_s, self.cancelled_s, self.failed_s))


@dataclass(frozen=True)
class Batch:
    """Sessions archived together: they finished on `day` and share one archive object."""

    location: str
    session_ids: tuple[str, ...]
    #: taken over from a pass that did not finish it
    resumed: bool = False


@dataclass(frozen=True)
class Report:
    """What a pass did."""

    archived: int = 0
    batches: int = 0
    #: batches of a pass that died, written again and finished
    resumed: int = 0
    #: False: pyarrow is not installed, only JSON Lines were written
    parquet: bool = True
    locations: tuple[str, ...] = ()
    #: batches left pending because a session changed while it was written
    retried: int = 0
    #: blobs only the archived sessions used, moved from the artifact store to the archive
    blobs_moved: int = 0


def _day(at: datetime) -> str:
    return at.astimezone(UTC).date().isoformat()


def _not_indexed() -> Any:
    """Not archived yet, and not a child whose tree still lives: a child ended is kept
    until its root has ended too (its parent reads it when the join wakes it)."""
    root = sessions.alias("root")
    living = exists().where(
        root.c.id == sessions.c.root_id,
        root.c.status.not_in([s.value for s in Status if s.terminal]),
    )
    return and_(~exists().where(archived.c.session_id == sessions.c.id), ~living)


def finished_queries(policy: Policy, now: datetime) -> list[Select[Any]]:
    """One query per status the policy prunes: the oldest of its sessions past their age."""
    columns = (
        sessions.c.id,
        sessions.c.status,
        sessions.c.kind,
        sessions.c.parent_id,
        sessions.c.fork_step,
        sessions.c.spawn_call,
        sessions.c.role,
        sessions.c.created_at,
        sessions.c.updated_at,
        sessions.c.tenant,
        sessions.c.submitted_by,
    )
    found: list[Select[Any]] = []
    for status, age in (
        (Status.COMPLETED, policy.completed_s),
        (Status.CANCELLED, policy.cancelled_s),
    ):
        if age is None:
            continue
        cutoff = now - timedelta(seconds=age)
        found.append(
            select(*columns)
            .where(
                sessions.c.status == status.value, sessions.c.updated_at < cutoff, _not_indexed()
            )
            .order_by(sessions.c.updated_at)
        )
    if policy.failed_s is not None:
        cutoff = now - timedelta(seconds=policy.failed_s)
        # driven by the closed dead letters: open ones are never even looked at
        found.append(
            select(*columns)
            .select_from(dead_letters.join(sessions, sessions.c.id == dead_letters.c.session_id))
            .where(
                dead_letters.c.resolved_at.is_not(None),
                dead_letters.c.resolved_at < cutoff,
                sessions.c.status == Status.FAILED.value,
                sessions.c.updated_at < cutoff,
                _not_indexed(),
            )
            .order_by(dead_letters.c.resolved_at)
        )
    return found


def eligible(
    engine: Engine, policy: Policy, *, now: datetime, limit: int = 10_000
) -> dict[str, int]:
    """How many sessions of each status a pass would archive now (at most `limit` each), and
    how many are pending; reads only."""
    counts: dict[str, int] = {}
    with engine.connect() as conn:
        for query in finished_queries(policy, now):
            for row in conn.execute(query.limit(limit)):
                counts[row.status] = counts.get(row.status, 0) + 1
        counts["pending"] = conn.execute(
            select(func.count()).select_from(archived).where(archived.c.state == PENDING)
        ).scalar_one()
    return counts


def claim(
    engine: Engine, policy: Policy, *, now: datetime, limit: int | None = None
) -> list[Batch]:
    """Take up to `limit` (the policy's batch) sessions past their age, grouped by the day
    they finished, and note each batch `pending`. Empty when none is due."""
    limit = limit or policy.batch
    postgres = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        found: list[Any] = []
        for query in finished_queries(policy, now):
            if len(found) >= limit:
                break
            query = query.limit(limit - len(found))
            if postgres:
                query = query.with_for_update(skip_locked=True, of=sessions)
            found.extend(conn.execute(query).all())
        if postgres and found:
            # The query's snapshot predates its locks: a pass that claimed a row and committed
            # while we waited for it leaves the row unchanged, so Postgres hands it over
            # without re-checking `_not_indexed`. A new statement sees that pass's claim.
            taken = set(
                conn.execute(
                    select(archived.c.session_id).where(
                        archived.c.session_id.in_([r.id for r in found])
                    )
                ).scalars()
            )
            found = [r for r in found if r.id not in taken]
        by_day: dict[str, list[Any]] = {}
        for row in found:
            by_day.setdefault(_day(row.updated_at), []).append(row)
        batches = []
        for day, group in sorted(by_day.items()):
            location = archives.batch_name(day, (r.id for r in group))
            conn.execute(
                insert(archived),
                [
                    {
                        "session_id": r.id,
                        "location": location,
                        "state": PENDING,
                        "claimed_at": now,
                        "status": r.status,
                        "kind": r.kind,
                        "parent_id": r.parent_id,
                        "fork_step": r.fork_step,
                        "spawn_call": r.spawn_call,
                        "role": r.role,
                        "created_at": r.created_at,
                        "finished_at": r.updated_at,
                        "tenant": r.tenant,
                        "submitted_by": r.submitted_by,
                    }
                    for r in group
                ],
            )
            batches.append(Batch(location, tuple(sorted(r.id for r in group))))
    return batches


def stale(engine: Engine, *, now: datetime, older_than_s: float, limit: int = 10) -> list[Batch]:
    """Pending batches whose pass died (claimed over `older_than_s` ago), taken over: each
    is ours if our update of its claim time is the one that moved it."""
    cutoff = now - timedelta(seconds=older_than_s)
    pending = (archived.c.state == PENDING) & (archived.c.claimed_at <= cutoff)
    with engine.connect() as conn:
        locations = list(conn.execute(pending_query(cutoff, limit)).scalars())
    taken = []
    for location in locations:
        with engine.begin() as conn:
            moved = conn.execute(
                update(archived)
                .where(pending, archived.c.location == location)
                .values(claimed_at=now)
            ).rowcount
            if not moved:
                continue
            ids = conn.execute(
                select(archived.c.session_id).where(archived.c.location == location)
            ).scalars()
            taken.append(Batch(location, tuple(sorted(ids)), resumed=True))
    return taken


def pending_query(cutoff: datetime, limit: int) -> Select[Any]:
    """The batches left pending since before `cutoff`, oldest first."""
    return (
        select(archived.c.location)
        .where(archived.c.state == PENDING, archived.c.claimed_at <= cutoff)
        .group_by(archived.c.location)
        .order_by(func.min(archived.c.claimed_at))
        .limit(limit)
    )


def _fingerprint(version: int, status: str, resolved_at: Any, resolution: Any) -> str:
    """What must not change between reading a session for the archive and deleting it: a
    finished session changes only by its dead letter's closing (a fork --again)."""
    when = resolved_at.isoformat() if isinstance(resolved_at, datetime) else resolved_at
    return json.dumps([version, status, when, resolution], sort_keys=True, default=str)


def read_whole(
    engine: Engine, load: Callable[[str], Session], session_id: str
) -> tuple[dict[str, Any], str]:
    """A session's archive record and its fingerprint."""
    session = load(session_id)
    try:
        letter = get_dead_letter(engine, session_id)
    except DeadLetterNotFound:
        letter = None
    changes = [
        {
            "version": c.version,
            "step": c.step,
            "call_id": c.call_id,
            "changes": dict(c.changes),
            "state": c.state,
        }
        for c in saved_changes(engine, session_id)
    ]
    with engine.connect() as conn:
        forks = [
            dict(r)
            for r in conn.execute(
                select(
                    sessions.c.id, sessions.c.fork_step, sessions.c.status, sessions.c.created_at
                )
                .where(sessions.c.parent_id == session_id)
                .order_by(sessions.c.created_at, sessions.c.id)
            ).mappings()
        ]
    dead = None if letter is None else letter.model_dump(mode="json", exclude={"snapshot"})
    found = archives.record(session, dead_letter=dead, file_changes=changes, forks=forks)
    print_ = _fingerprint(
        session.head.version,
        session.head.status.value,
        None if letter is None else letter.resolved_at,
        None if letter is None else letter.resolution,
    )
    return found, print_


def finish(engine: Engine, batch: Batch, prints: dict[str, str], *, now: datetime) -> bool:
    """Delete the batch's sessions from the live tables and mark them archived, in one
    transaction, if each is as it was read (`prints`); False (the batch stays pending, to
    be written again at once) if one changed."""
    ids = list(batch.session_ids)
    with engine.begin() as conn:
        heads = {
            r.id: r
            for r in conn.execute(
                select(sessions.c.id, sessions.c.version, sessions.c.status)
                .where(sessions.c.id.in_(ids))
                .order_by(sessions.c.id)
                .with_for_update()
            )
        }
        if not heads and _all_archived(conn, ids):
            return True  # another pass finished it first
        letters = {
            r.session_id: r
            for r in conn.execute(
                select(
                    dead_letters.c.session_id, dead_letters.c.resolved_at, dead_letters.c.resolution
                )
                .where(dead_letters.c.session_id.in_(ids))
                .with_for_update()
            )
        }
        for sid in ids:
            head, letter = heads.get(sid), letters.get(sid)
            now_print = (
                None
                if head is None
                else _fingerprint(
                    head.version,
                    head.status,
                    None if letter is None else letter.resolved_at,
                    None if letter is None else letter.resolution,
                )
            )
            if now_print != prints.get(sid):
                conn.execute(
                    update(archived)
                    .where(archived.c.location == batch.location)
                    .values(claimed_at=_EPOCH)
                )
                return False
        dead_letter_counts.forget(conn, ids)
        for statement in prune_statements(ids, now=now):
            conn.execute(statement)
    return True


def prune_statements(ids: Sequence[str], *, now: datetime) -> list[Any]:
    """What `finish` runs once the batch is written (and its dead letters uncounted:
    `dead_letter_counts.forget`): each live table's rows of `ids` deleted (by an index that
    starts with the session id), and the index rows archived."""
    return [
        *(delete(table).where(table.c.session_id.in_(ids)) for table in LIVE_TABLES),
        delete(sessions).where(sessions.c.id.in_(ids)),
        update(archived)
        .where(archived.c.session_id.in_(ids))
        .values(state=ARCHIVED, archived_at=now),
    ]


def _all_archived(conn: Connection, ids: Sequence[str]) -> bool:
    states = conn.execute(select(archived.c.state).where(archived.c.session_id.in_(ids))).scalars()
    return all(s == ARCHIVED for s in states)


def archive_pass(
    engine: Engine,
    load: Callable[[str], Session],
    archive: archives.Archive,
    policy: Policy,
    *,
    now: datetime,
    max_batches: int | None = None,
    stale_after_s: float = STALE_AFTER_S,
    after_write: Callable[[Batch], None] | None = None,
    artifacts: Artifacts | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Report:
    """Archive and prune up to `max_batches` batches (None: all that are due): first those
    a dead pass left pending, then new ones. `load` reads a session whole (`Store.load`).
    With `artifacts`, the blobs only the archived sessions used then move to the archive
    (`sweep.py`). `clock` (default: always `now`) dates each claim and each batch's end,
    so a long pass's batches do not look left behind to the other passes.

    A batch that fails (a session that cannot be read, the archive refusing a write) is
    logged and left pending; the pass goes on with the next one, and a later pass takes
    it over."""
    current: Callable[[], datetime] = clock or (lambda: now)
    done = resumed = retried = 0
    archived_records: list[dict[str, Any]] = []
    sessions_done = 0
    parquet_written = True
    locations: list[str] = []
    todo = stale(engine, now=current(), older_than_s=stale_after_s)
    while max_batches is None or done + retried < max_batches:
        if not todo:
            if not policy.enabled:
                break
            todo = claim(engine, policy, now=current())
            if not todo:
                break
        batch = todo.pop(0)
        records: list[dict[str, Any]] = []
        prints: dict[str, str] = {}
        try:
            for sid in batch.session_ids:
                found, print_ = read_whole(engine, load, sid)
                records.append(found)
                prints[sid] = print_
            archive.write(batch.location + archives.JSONL, archives.jsonl(records))
            table = archives.parquet(records)
            if table is None:
                parquet_written = False
            else:
                archive.write(batch.location + archives.PARQUET, table)
        except (OperationalError, InterfaceError, StoreUnavailable):  # `load` is the store's
            raise  # the database is away: the whole pass stops, and runs again later
        except Exception:
            log.exception("retention: batch %s left pending for a later pass", batch.location)
            retried += 1
            continue
        if after_write is not None:
            after_write(batch)
        if finish(engine, batch, prints, now=current()):
            done += 1
            resumed += batch.resumed
            sessions_done += len(batch.session_ids)
            locations.append(batch.location)
            archived_records.extend(records)
        else:  # written again by the next pass, which takes it over at once
            retried += 1
    moved = 0 if artifacts is None else sweep(engine, artifacts, archive, archived_records)
    return Report(
        blobs_moved=moved,
        archived=sessions_done,
        batches=done,
        resumed=resumed,
        parquet=parquet_written,
        locations=tuple(locations),
        retried=retried,
    )


def live_and_archived(engine: Engine) -> dict[str, int]:
    """Rows in each live table and in the index: what a soak run watches."""
    with engine.connect() as conn:
        counts = {
            t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in (sessions, *LIVE_TABLES)
        }
        for state in (PENDING, ARCHIVED):
            counts[f"archived_{state}"] = conn.execute(
                select(func.count()).select_from(archived).where(archived.c.state == state)
            ).scalar_one()
    return counts
