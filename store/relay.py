"""The relay's scans: delayed ticks that fell due, ticks whose message may be lost, and
sessions whose worker died.

Both are safe to run in many processes at once: rows are taken with
`FOR UPDATE SKIP LOCKED` on Postgres, and SQLite serialises writers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, insert, or_, select, tuple_, update
from tickwork.fsm.values import RUNNABLE, Event, EventKind
from tickwork.store import rows
from tickwork.store.owners import of_nodes
from tickwork.store.schema import events, outbox, sessions

#: the longest a republished tick waits before the relay publishes it once more
MAX_REPUBLISH_WAIT_S = 300.0


@dataclass(frozen=True)
class RelayPass:
    """What one pass of the relay did: the ticks it published and the leases it ended."""

    republished: int
    lease_expiries: int
    #: delayed ticks (model backoff, Retry-After) published because they fell due
    delayed: int = 0
    #: queued sessions admitted (queued -> ready, docs/DESIGN.md section 15)
    admitted: int = 0
    #: sessions taken over because their worker's sign of life is gone (`Takeover`)
    taken_over: int = 0
    #: ticks the broker did not take: given back to the outbox, due at once for any relay
    unsent: int = 0


@dataclass(frozen=True)
class Due:
    session_id: str
    version: int
    #: a delayed tick (model backoff, Retry-After) published for the first time, now that
    #: it is due; False: a tick whose message may be lost, or a revived session
    delayed: bool = False
    #: for a revived session: the worker whose lease expired
    owner: str | None = field(default=None, compare=False)


#: most session ids one log line names; the rest are counted
LOGGED_IDS = 20


def named(ticks: Sequence[Due], name: Callable[[Due], str] = lambda t: t.session_id) -> str:
    """The first LOGGED_IDS ticks by name, and how many more: for a log line."""
    shown = ", ".join(name(t) for t in ticks[:LOGGED_IDS])
    more = len(ticks) - LOGGED_IDS
    return shown + (f" and {more} more" if more > 0 else "")


def due_ticks(engine: Engine, *, now: datetime, older_than_s: float, limit: int = 500) -> list[Due]:
    """Outbox rows to publish now: delayed ticks that fell due (never published yet), and
    ticks still unclaimed `older_than_s` after they were due or last published (their
    message may be lost). Their due time moves on and `published_at` records this.

    A row republished again and again (a backed-up queue, not a lost message) waits longer
    each time: its n-th republication is followed by n-1 more thresholds, up to
    MAX_REPUBLISH_WAIT_S, so the relay does not flood a slow fleet with duplicates.
    Rows whose session moved on (or is no longer runnable) are deleted.
    """
    cutoff = now - timedelta(seconds=older_than_s)
    waiting = outbox.c.published_at.is_(None)
    query = (
        select(
            outbox.c.session_id,
            outbox.c.version,
            outbox.c.republished,
            waiting.label("delayed"),
            sessions.c.version.label("current"),
            sessions.c.status,
        )
        .join(sessions, sessions.c.id == outbox.c.session_id)
        .where(or_(outbox.c.due_at < cutoff, waiting & (outbox.c.due_at <= now)))
        # implied by the line above (cutoff <= now), but it bounds the scan of the due_at
        # index: without it the filter reads every row of the outbox, due or not
        .where(outbox.c.due_at <= now)
        .order_by(outbox.c.due_at)
        .limit(limit)
        .with_for_update(skip_locked=True, of=outbox)
    )
    with engine.begin() as conn:
        found = conn.execute(query).all()
        rows = [r for r in found if r.version == r.current and r.status in RUNNABLE]
        live = [(r.session_id, r.version) for r in rows]
        stale = [(r.session_id, r.version) for r in found if (r.session_id, r.version) not in live]
        key = tuple_(outbox.c.session_id, outbox.c.version)
        if stale:
            conn.execute(delete(outbox).where(key.in_(stale)))
        if rows:
            moved = (
                update(outbox)
                .where(outbox.c.session_id == bindparam("sid"), outbox.c.version == bindparam("v"))
                .values(
                    due_at=bindparam("due"),
                    published_at=now,
                    republished=outbox.c.republished + bindparam("again"),
                )
            )
            conn.execute(
                moved,
                [
                    # a delayed tick's first publication is not a republication
                    {"sid": r.session_id, "v": r.version, "due": now, "again": 0}
                    if r.delayed
                    else {
                        "sid": r.session_id,
                        "v": r.version,
                        "due": now + timedelta(seconds=_wait(r.republished, older_than_s)),
                        "again": 1,
                    }
                    for r in rows
                ],
            )
    return [Due(r.session_id, r.version, delayed=bool(r.delayed)) for r in rows]


def _wait(republished: int, threshold_s: float) -> float:
    """Extra wait after a row's next republication: 0, 1, 3, 7... thresholds, capped."""
    return min(MAX_REPUBLISH_WAIT_S, threshold_s * float(2 ** min(republished, 16) - 1))


def expired_leases(engine: Engine, *, now: datetime, limit: int = 500) -> list[Due]:
    """Runnable sessions whose lease ran out (their worker died mid-I/O): the lease is
    cleared and an outbox row written, so the session runs again exactly as a lost tick,
    and a `lease_expired` event names the lease's owner (`tickwork show` says when)."""
    query = (
        select(sessions.c.id, sessions.c.version, sessions.c.lease_owner)
        .where(
            sessions.c.status.in_([s.value for s in RUNNABLE]),
            sessions.c.lease_expires_at.is_not(None),
            sessions.c.lease_expires_at < now,
        )
        .order_by(sessions.c.lease_expires_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    with engine.begin() as conn:
        found = [(r.id, r.version, r.lease_owner) for r in conn.execute(query).all()]
        revive(conn, found, now=now)
        if said := _unsaid(conn, found):
            conn.execute(insert(events), [_expired(*r, now=now) for r in said])
    return [Due(session_id, version, owner=owner) for session_id, version, owner in found]


def _unsaid(
    conn: Connection, found: Sequence[tuple[str, int, str | None]]
) -> list[tuple[str, int, str | None]]:
    """Of the leases `found` run out, those to say so of: one `lease_expired` a session and
    version, and none where the lease's own node refused the tick (its lease runs out by
    design, at every offer of the tick until a worker with its kind takes it); the lease of
    another node, which took the tick and stopped, is said."""
    if not found:
        return []
    told: set[tuple[str, int]] = set()
    refused: dict[tuple[str, int], set[str]] = {}
    for r in conn.execute(
        select(events.c.session_id, events.c.version, events.c.kind, events.c.data).where(
            events.c.session_id.in_(sorted({r[0] for r in found})),
            events.c.kind.in_([EventKind.LEASE_EXPIRED.value, EventKind.TICK_REFUSED.value]),
        )
    ):
        if r.kind == EventKind.LEASE_EXPIRED.value:
            told.add((r.session_id, r.version))
        else:
            refused.setdefault((r.session_id, r.version), set()).add(
                str((r.data or {}).get("worker"))
            )
    return [
        r
        for r in found
        if (r[0], r[1]) not in told and not of_nodes(r[2], refused.get((r[0], r[1]), set()))
    ]


def _expired(session_id: str, version: int, owner: str | None, *, now: datetime) -> dict[str, Any]:
    """The event that says the lease of `owner` ran out and the session's tick was offered
    again."""
    event = Event(kind=EventKind.LEASE_EXPIRED, at=now, data={"from": owner})
    return rows.event_to_row(session_id, version, event)


def revive(
    conn: Connection, found: Sequence[tuple[str, int, str | None]], *, now: datetime
) -> None:
    """End the leases `found` (session, version, owner), each only if it is still that
    owner's at that version, and write each session's tick as published now."""
    for session_id, version, owner in found:
        conn.execute(
            update(sessions)
            .where(
                sessions.c.id == session_id,
                sessions.c.version == version,
                sessions.c.lease_owner == owner,
            )
            .values(lease_owner=None, lease_expires_at=None)
        )
        conn.execute(
            delete(outbox).where(outbox.c.session_id == session_id, outbox.c.version == version)
        )
        conn.execute(
            insert(outbox),
            [{"session_id": session_id, "version": version, "due_at": now, "published_at": now}],
        )


def offer_again(engine: Engine, session_id: str, version: int, *, now: datetime) -> None:
    """A tick refused by a worker of a lower runtime level: published now as far as the relay
    knows, with its count of republications reset, so the relay offers it again once its
    threshold has passed (a tick refused again and again in a rolling upgrade waits that
    long each time, not the growing waits of a backed-up queue)."""
    with engine.begin() as conn:
        conn.execute(
            update(outbox)
            .where(
                outbox.c.session_id == session_id,
                outbox.c.version == version,
                outbox.c.published_at.is_not(None),
            )
            .values(due_at=now, published_at=now, republished=0)
        )


def refuse_tick(
    engine: Engine, session_id: str, version: int, *, worker: str, reason: str, now: datetime
) -> bool:
    """Record that `worker` (a Celery node name: the same in each of its processes and after
    a restart) took the tick of `session_id` at `version` and cannot run it (`reason`): a
    `tick_refused` event, once a worker and version, so that `show` can say why the session
    does not move (a refusal changes nothing else). False if recorded already, or if the
    session is at another version now."""
    with engine.begin() as conn:
        current = conn.execute(
            select(sessions.c.version).where(sessions.c.id == session_id).with_for_update()
        ).scalar()
        if current != version:
            return False
        said = conn.execute(
            select(events.c.data).where(
                events.c.session_id == session_id,
                events.c.version == version,
                events.c.kind == EventKind.TICK_REFUSED.value,
            )
        ).scalars()
        if any(data.get("worker") == worker for data in said):
            return False
        data = {"worker": worker, "version": version, "reason": reason}
        event = Event(kind=EventKind.TICK_REFUSED, at=now, data=data)
        conn.execute(insert(events), [rows.event_to_row(session_id, version, event)])
    return True
