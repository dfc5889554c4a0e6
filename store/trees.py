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

An `each` join wakes its parent once per delivery, and both sides decide under the join
row's lock: a child's end appends itself to `ends` and wakes the parent if a call of it
waits on the join (`waiting_call`); the parent's save that suspends on the join marks it
waited on and, in the same transaction, wakes itself at once if an end is there it has not
had (`mark`). Whichever commits second sees the other, so an end never waits for a parent
that waits for it. The save that delivers results moves `delivered` on with the
observation. A parent that ended is charged the cost of the ends it never had (an
`each` parent's results not taken; any parent's children when it ended before its join
woke it, as a cancelled parent does, or after the join woke it but before it took it)
(`settle`): by the child's end, or by the relay
(`settle_ended`) for the ends before it.

Locks are taken child first, then the join, then the parent (a tree's ends move up);
cancelling moves down in transactions of its own, never holding a parent's row while it
takes a child's.

A tree holds at most a number of sessions (`fsm.trees.MAX_TREE_SESSIONS`), an agent's
children and a graph's branches alike: the tick counts it before it spawns or fans out,
and the save counts it again as it inserts the children, under the tree's lock
(`make_room`), so two spawns in one tree at the same moment (siblings') count one after
the other: `pg_advisory_xact_lock` keyed by the root on Postgres (other trees
are not held up; it is taken after the spawner's own row, and nothing that holds it waits
for another session's row), SQLite's one writer at a time (`BEGIN IMMEDIATE`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    String,
    and_,
    cast,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from tickwork.fsm import trees
from tickwork.fsm.errors import ClaimLost, SessionNotFound, TreeFull
from tickwork.fsm.joins import Join, JoinMark, JoinMode
from tickwork.fsm.transitions import Change
from tickwork.fsm.values import Event, EventKind, Head, Status
from tickwork.store import rows
from tickwork.store.schema import events, joins, outbox, sessions

TERMINAL = [s.value for s in Status if s.terminal]
#: the advisory locks' first key: tickwork's trees ("tkwR"; the tenants' is "tkwT")
LOCK_CLASS = 0x746B7752


def make_room(conn: Connection, change: Change) -> None:
    """TreeFull (nothing stored: the caller's transaction rolls back) unless the tree of
    the change's children holds at most `change.tree_limit` sessions with them. Holds the
    tree's lock until the transaction's end, so the count stays true until the children
    are inserted; call it in the transaction that inserts them."""
    if not change.children or change.tree_limit is None:
        return
    root = change.children[0].root_id or change.head.id
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:cls, hashtext(:root))"),
            {"cls": LOCK_CLASS - (1 << 31), "root": root},
        )
    count = select(func.count()).select_from(sessions).where(sessions.c.root_id == root)
    held = 1 + int(conn.execute(count).scalar_one())  # the root is no row of its own tree
    adding, limit = len(change.children), change.tree_limit
    if why := trees.too_many(held, adding, limit=limit):
        raise TreeFull(why, held=held, adding=adding, limit=limit)


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
                "ends": [],
                "delivered": 0,
                "waiting_call": join.waiting,
            }
        ],
    )


def _key(parent_id: str, call_id: str) -> ColumnElement[bool]:
    return and_(joins.c.parent_id == parent_id, joins.c.call_id == call_id)


def _locked(
    conn: Connection, parent_id: str, call_id: str, *, unwoken: bool = False
) -> Join | None:
    """The join's row (with `unwoken`: if it has not woken its parent for good), locked to
    the transaction's end (SQLite's transactions take the database's write lock at BEGIN)."""
    query = select(joins).where(_key(parent_id, call_id))
    if unwoken:
        query = query.where(joins.c.woken_at.is_(None))
    row = conn.execute(query.with_for_update()).mappings().first()
    return None if row is None else _join_from_row(row)


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
        ends=tuple(row["ends"] or ()),
        delivered=row["delivered"],
        waiting=row["waiting_call"],
    )


def child_ended(conn: Connection, head: Head, *, now: datetime) -> bool:
    """Count the child `head` (just saved as ended, in `conn`'s transaction) on its join,
    charge its cost and tokens there, and wake its parent if the join wakes it (`wakes`);
    a child whose parent has ended is charged to it instead (`settle`). True if the parent
    was woken."""
    assert head.parent_id is not None and head.spawn_call is not None
    counted = (
        conn.execute(
            update(joins)
            .where(_key(head.parent_id, head.spawn_call))
            .values(
                ended=joins.c.ended + 1,
                cost_usd=joins.c.cost_usd + head.cost_usd,
                tokens=joins.c.tokens + head.tokens,
                # the first child to count itself is the join's first
                first=func.coalesce(joins.c.first, head.id),
                ends=_appended(conn, head.id),
            )
            .returning(*joins.c)
        )
        .mappings()
        .first()
    )
    if counted is None:
        return False  # its parent is gone (pruned with its whole tree): nobody to wake
    join = _join_from_row(counted)
    # a parent that ended before its join woke it (cancelled while its children ran, an
    # `each` parent done before its last result) never records their cost: charge it now
    if _ended(conn, join.parent_id):
        settle(conn, join, now=now)
        return False
    return join.wakes and wake(conn, join, now=now)


def _appended(conn: Connection, child_id: str) -> ColumnElement[Any]:
    """The join's `ends` with `child_id` appended, in the database's own JSON: the count
    and the order are one guarded UPDATE, whose row lock orders two ends at once."""
    none: ColumnElement[Any] = literal_column("'[]'")  # a row from before 0022_each
    if conn.dialect.name == "postgresql":
        ends = func.coalesce(joins.c.ends, cast(none, JSONB))
        return ends.op("||")(func.jsonb_build_array(cast(child_id, String)))
    return func.json_insert(func.coalesce(joins.c.ends, none), "$[#]", child_id)


def _ended(conn: Connection, session_id: str) -> bool:
    status = conn.execute(
        select(sessions.c.status).where(sessions.c.id == session_id)
    ).scalar_one_or_none()
    return status is not None and Status(status).terminal


def wake(conn: Connection, join: Join, *, now: datetime) -> bool:
    """Move the parent of `join` (complete, or for `each` with a result for the call that
    waits) from `waiting_children` to `executing` at its next version, with its tick;
    nothing if it is not waiting (woken already, cancelled). An `each` join is no longer
    waited on once woken: the woken call takes the results, or waits again."""
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
    if join.mode is JoinMode.EACH:
        conn.execute(
            update(joins).where(_key(join.parent_id, join.call_id)).values(waiting_call=None)
        )
    elif moved is not None:
        # a parent no longer waiting ended meanwhile (a cancel that committed after this
        # end read it waiting): the join stays unwoken, and `settle_ended` charges it
        conn.execute(
            update(joins)
            .where(_key(join.parent_id, join.call_id), joins.c.woken_at.is_(None))
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


def mark(conn: Connection, marked: JoinMark, *, now: datetime) -> bool:
    """Write the parent's `marked` on its `each` join, in the transaction of its save (the
    parent's row is written already): `delivered` moves on, and the call suspending, if
    any, waits on the join; if a result is there for it (a child ended meanwhile), the
    parent is woken at once: True then. ClaimLost if `delivered` is no longer what the
    parent read (the save must not commit)."""
    join = _locked(conn, marked.parent_id, marked.call_id)
    if join is None or join.delivered != marked.seen:
        raise ClaimLost(
            f"session {marked.parent_id}: the join of call {marked.call_id} moved on while "
            "this tick ran; its work is dropped and the newer state stands"
        )
    join = join.model_copy(update={"delivered": marked.delivered, "waiting": marked.waiting})
    conn.execute(
        update(joins)
        .where(_key(join.parent_id, join.call_id))
        .values(
            delivered=join.delivered,
            waiting_call=join.waiting,
            woken_at=now if join.delivered >= join.expected else None,
        )
    )
    return join.wakes and wake(conn, join, now=now)


def settle(conn: Connection, join: Join, *, now: datetime) -> None:
    """Charge the ended parent of `join` the cost and tokens of the ends it never had (of
    any mode: a parent that ended before its join woke it never records the join), with
    a `children_joined` event saying so (a tenant's spending counts each session once by
    it), and count them as taken: its cost stays the sum of its tree."""
    taken = join.pending
    if not taken:
        return
    ended = (
        conn.execute(select(sessions.c.cost_usd, sessions.c.tokens).where(sessions.c.id.in_(taken)))
        .mappings()
        .all()
    )
    cost = sum(float(r["cost_usd"]) for r in ended)
    tokens = sum(int(r["tokens"]) for r in ended)
    version = conn.execute(
        update(sessions)
        .where(sessions.c.id == join.parent_id)
        .values(cost_usd=sessions.c.cost_usd + cost, tokens=sessions.c.tokens + tokens)
        .returning(sessions.c.version)
    ).scalar_one()
    done = join.ended >= join.expected
    conn.execute(
        update(joins)
        .where(_key(join.parent_id, join.call_id))
        .values(delivered=join.ended, woken_at=now if done else None)
    )
    event = Event(
        kind=EventKind.CHILDREN_JOINED,
        at=now,
        data={
            "call_id": join.call_id,
            "ended": len(taken),
            "charged_after_end": True,
            "cost_usd": cost,
            "tokens": tokens,
        },
    )
    conn.execute(insert(events), [rows.event_to_row(join.parent_id, version, event)])


def read_join(conn: Connection, parent_id: str, call_id: str) -> Join | None:
    row = (
        conn.execute(
            select(joins).where(joins.c.parent_id == parent_id, joins.c.call_id == call_id)
        )
        .mappings()
        .first()
    )
    return None if row is None else _join_from_row(row)


def read_joins(conn: Connection, parent_id: str) -> list[Join]:
    """The session's joins, one a spawning call, in spawn order (a call's id names its
    step, `s9c0` before `s10c0`: by length first, for spawns at one instant)."""
    query = (
        select(joins)
        .where(joins.c.parent_id == parent_id)
        .order_by(joins.c.created_at, func.length(joins.c.call_id), joins.c.call_id)
    )
    return [_join_from_row(r) for r in conn.execute(query).mappings()]


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


def read_place(conn: Connection, session_id: str) -> trees.Place:
    """Where the session stands in its tree, counted by the database, no session read: the
    sessions under its root, and its depth (the sessions of the tree from it up its
    parents, the root left out), both in one statement once its root is known."""
    root = conn.execute(
        select(func.coalesce(sessions.c.root_id, sessions.c.id)).where(sessions.c.id == session_id)
    ).scalar_one_or_none()
    if root is None:
        raise SessionNotFound.of(session_id)
    up = (
        select(sessions.c.id, sessions.c.parent_id)
        .where(sessions.c.id == session_id, sessions.c.root_id == root)
        .cte("up", recursive=True)
    )
    above = sessions.alias("above")
    # UNION, not UNION ALL: a row met twice ends the walk (no parents in a circle loop it)
    up = up.union(
        select(above.c.id, above.c.parent_id)
        .join(up, above.c.id == up.c.parent_id)
        .where(above.c.root_id == root)
    )
    held = select(func.count()).select_from(sessions).where(sessions.c.root_id == root)
    depth = select(func.count()).select_from(up)
    row = conn.execute(
        select(held.scalar_subquery().label("held"), depth.scalar_subquery().label("depth"))
    ).one()
    return trees.Place(depth=int(row.depth), held=1 + int(row.held))  # the root is no row of it


def missed_wakes(engine: Engine, *, now: datetime, limit: int = 500) -> list[tuple[str, int]]:
    """Wake every parent still waiting on a join that wakes it (complete; `each`: waited
    on, with a result not delivered); a repair, the children's saves wake it themselves.
    The woken parents' ids and versions, to publish."""
    waiting = (
        select(joins)
        .join(sessions, sessions.c.id == joins.c.parent_id)
        .where(
            joins.c.woken_at.is_(None),
            or_(
                and_(joins.c.mode != JoinMode.EACH.value, joins.c.ended >= joins.c.expected),
                and_(
                    joins.c.mode == JoinMode.EACH.value,
                    joins.c.waiting_call.is_not(None),
                    joins.c.ended > joins.c.delivered,
                ),
            ),
            sessions.c.status == Status.WAITING_CHILDREN.value,
        )
        .limit(limit)
    )
    woken = []
    with engine.connect() as conn:
        found = [_join_from_row(r) for r in conn.execute(waiting).mappings()]
    for join in found:
        with engine.begin() as conn:
            # read again under the row's lock: the children's saves may be committing
            fresh = _locked(conn, join.parent_id, join.call_id, unwoken=True)
            if fresh is None or not fresh.wakes:
                continue
            if wake(conn, fresh, now=now):
                woken.append((join.parent_id, _version(conn, join.parent_id)))
    return woken


def settle_ended(engine: Engine, *, now: datetime, limit: int = 500) -> list[str]:
    """Charge every ended parent the cost of the ends it never had that its children's
    saves did not charge (those that ended before it, or with it): an `each` parent's
    results it did not take, any parent's children when it ended before its join woke
    it, or after the join woke it but before it took it (cancelled in between: its own
    save, which charges a join it takes, never came). A woken `all` or `first` join the
    parent did take (its `children_joined` event carries the charge) is only marked
    accounted. The ids of the parents charged. A repair that the relay runs."""
    unsettled = (
        select(joins.c.parent_id, joins.c.call_id, joins.c.woken_at.is_not(None).label("woken"))
        .join(sessions, sessions.c.id == joins.c.parent_id)
        .where(
            or_(joins.c.woken_at.is_(None), joins.c.mode != JoinMode.EACH.value),
            joins.c.ended > joins.c.delivered,
            sessions.c.status.in_(TERMINAL),
        )
        .limit(limit)
    )
    with engine.connect() as conn:
        found = [(r.parent_id, r.call_id, r.woken) for r in conn.execute(unsettled)]
    charged = []
    for parent_id, call_id, woken in found:
        with engine.begin() as conn:
            join = _locked(conn, parent_id, call_id)
            if join is None or not join.pending or not _ended(conn, parent_id):
                continue
            if woken and _took(conn, parent_id, call_id):
                conn.execute(
                    update(joins).where(_key(parent_id, call_id)).values(delivered=join.ended)
                )
            else:
                settle(conn, join, now=now)
                charged.append(parent_id)
    return charged


def _took(conn: Connection, parent_id: str, call_id: str) -> bool:
    """Whether the parent's save took the join of `call_id`: its `children_joined` event
    with the charge (the wake-up's has none)."""
    took = (
        select(events.c.id)
        .where(
            events.c.session_id == parent_id,
            events.c.kind == EventKind.CHILDREN_JOINED.value,
            events.c.data["call_id"].as_string() == call_id,
            events.c.data["cost_usd"].as_float().is_not(None),
        )
        .limit(1)
    )
    return conn.execute(took).first() is not None


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
