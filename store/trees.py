"""Session trees in the database (docs/DESIGN.md section 16): the join's row, counted by
each child's last save and waking the parent in that same transaction; the reads of a
tree; the relay's repairs.

Exactly one wake-up per join: a child's terminal save increments `ended` on the join's
row with a guarded UPDATE (the row's lock orders two children ending at once, and each
sees the other's count), and the one that makes it equal to `expected` moves the parent
from `waiting_children` to `executing` with its outbox row, guarded by that status. There
is no moment at which a child has ended and nobody will wake the parent: the count and
the wake commit with the child's end or not at all. `missed_wakes` (the relay) wakes a
parent whose join is complete but that still waits, whatever the cause.

Locks are taken child first, then the join, then the parent (a tree's ends move up);
cancelling moves down in transactions of its own, never holding a parent's row while it
takes a child's.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, Engine, and_, func, insert, select, update
from tickwork.fsm.joins import Join, JoinMode
from tickwork.fsm.values import Event, EventKind, Head, Status
from tickwork.store import rows
from tickwork.store.schema import events, joins, outbox, sessions

TERMINAL = [s.value for s in Status if s.terminal]


def insert_join(conn: Connection, join: Join, *, now: datetime) -> None:
    """The join's row of a spawn, inserted with its children."""
    conn.execute(
        insert(joins),
        [
            {
                "parent_id": join.parent_id,
                "call_id": join.call_id,
                "mode": join.mode.value,
                "expected": join.expected,
                "ended": 0,
                "cost_usd": 0.0,
                "tokens": 0,
                "first": None,
                "created_at": now,
                "woken_at": None,
            }
        ],
    )


def _join_from_row(row: rows.Row) -> Join:
    return Join(
        parent_id=row["parent_id"],
        call_id=row["call_id"],
        mode=JoinMode(row["mode"]),
        expected=row["expected"],
        ended=row["ended"],
        cost_usd=row["cost_usd"],
        tokens=row["tokens"],
        first=row["first"],
    )


def child_ended(conn: Connection, head: Head, *, now: datetime) -> bool:
    """Count the child `head` (just saved as ended, in `conn`'s transaction) on its join,
    charge its cost and tokens there, and wake its parent if it completes the join.
    True if the parent was woken."""
    assert head.parent_id is not None and head.spawn_call is not None
    key = and_(joins.c.parent_id == head.parent_id, joins.c.call_id == head.spawn_call)
    counted = (
        conn.execute(
            update(joins)
            .where(key)
            .values(
                ended=joins.c.ended + 1,
                cost_usd=joins.c.cost_usd + head.cost_usd,
                tokens=joins.c.tokens + head.tokens,
                # the first child to count itself is the join's first
                first=func.coalesce(joins.c.first, head.id),
            )
            .returning(*joins.c)
        )
        .mappings()
        .first()
    )
    if counted is None:
        return False  # its parent is gone (pruned with its whole tree): nobody to wake
    join = _join_from_row(counted)
    if not join.complete:
        return False
    return wake(conn, join, now=now)


def wake(conn: Connection, join: Join, *, now: datetime) -> bool:
    """Move the parent of the complete `join` from `waiting_children` to `executing` at its
    next version, with its tick; nothing if it is not waiting (woken already, cancelled)."""
    moved = conn.execute(
        update(sessions)
        .where(sessions.c.id == join.parent_id, sessions.c.status == Status.WAITING_CHILDREN.value)
        .values(
            status=Status.EXECUTING.value,
            version=sessions.c.version + 1,
            updated_at=now,
            lease_owner=None,
            lease_expires_at=None,
        )
        .returning(sessions.c.version)
    ).first()
    conn.execute(
        update(joins)
        .where(
            joins.c.parent_id == join.parent_id,
            joins.c.call_id == join.call_id,
            joins.c.woken_at.is_(None),
        )
        .values(woken_at=now)
    )
    if moved is None:
        return False
    version = moved.version
    conn.execute(
        insert(outbox),
        [{"session_id": join.parent_id, "version": version, "due_at": now, "published_at": now}],
    )
    event = Event(
        kind=EventKind.CHILDREN_JOINED,
        at=now,
        data={"call_id": join.call_id, "ended": join.ended, "woken": True},
    )
    conn.execute(insert(events), [rows.event_to_row(join.parent_id, version, event)])
    return True


def read_join(conn: Connection, parent_id: str, call_id: str) -> Join | None:
    row = (
        conn.execute(
            select(joins).where(joins.c.parent_id == parent_id, joins.c.call_id == call_id)
        )
        .mappings()
        .first()
    )
    return None if row is None else _join_from_row(row)


def read_children(conn: Connection, parent_id: str, call_id: str | None = None) -> list[Head]:
    """The children the session spawned (with `call_id`: that call's), in spawn order."""
    query = select(sessions).where(
        sessions.c.parent_id == parent_id, sessions.c.spawn_call.is_not(None)
    )
    if call_id is not None:
        query = query.where(sessions.c.spawn_call == call_id)
    query = query.order_by(sessions.c.created_at, sessions.c.id)
    return [rows.head_from_row(r) for r in conn.execute(query).mappings()]


def read_tree(conn: Connection, root_id: str) -> list[Head]:
    """Every session of the tree under `root_id` (the root left out), oldest first."""
    query = (
        select(sessions)
        .where(sessions.c.root_id == root_id)
        .order_by(sessions.c.created_at, sessions.c.id)
    )
    return [rows.head_from_row(r) for r in conn.execute(query).mappings()]


def missed_wakes(engine: Engine, *, now: datetime, limit: int = 500) -> list[tuple[str, int]]:
    """Wake every parent still waiting on a complete join (a repair: the children's saves
    wake it themselves); the woken parents' ids and versions, to publish."""
    waiting = (
        select(joins)
        .join(sessions, sessions.c.id == joins.c.parent_id)
        .where(
            joins.c.woken_at.is_(None),
            joins.c.ended >= joins.c.expected,
            sessions.c.status == Status.WAITING_CHILDREN.value,
        )
        .limit(limit)
    )
    woken = []
    with engine.connect() as conn:
        found = [_join_from_row(r) for r in conn.execute(waiting).mappings()]
    for join in found:
        with engine.begin() as conn:
            # counted again under the row's lock: the children's saves may be committing
            fresh = (
                conn.execute(
                    update(joins)
                    .where(
                        joins.c.parent_id == join.parent_id,
                        joins.c.call_id == join.call_id,
                        joins.c.woken_at.is_(None),
                    )
                    .values(ended=joins.c.ended)
                    .returning(*joins.c)
                )
                .mappings()
                .first()
            )
            if fresh is None or not _join_from_row(fresh).complete:
                continue
            if wake(conn, _join_from_row(fresh), now=now):
                woken.append((join.parent_id, _version(conn, join.parent_id)))
    return woken


def _version(conn: Connection, session_id: str) -> int:
    return int(
        conn.execute(select(sessions.c.version).where(sessions.c.id == session_id)).scalar_one()
    )


def to_cancel(engine: Engine, *, limit: int = 500) -> list[str]:
    """Children still going that must stop: their parent ended, or asked to cancel, or
    their join (`first`) already has its first end; not asked to cancel yet."""
    parent = sessions.alias("parent")
    query = (
        select(sessions.c.id)
        .join(parent, parent.c.id == sessions.c.parent_id)
        .outerjoin(
            joins,
            and_(
                joins.c.parent_id == sessions.c.parent_id, joins.c.call_id == sessions.c.spawn_call
            ),
        )
        .where(
            sessions.c.spawn_call.is_not(None),
            sessions.c.status.not_in(TERMINAL),
            sessions.c.cancel_requested.is_(False),
            (parent.c.status.in_(TERMINAL))
            | parent.c.cancel_requested.is_(True)
            | and_(joins.c.mode == JoinMode.FIRST.value, joins.c.ended >= 1),
        )
        .limit(limit)
    )
    with engine.connect() as conn:
        return [r.id for r in conn.execute(query)]
