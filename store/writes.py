"""The Core store's writes inside an open transaction: a new session, the save's
compare-and-swap with what it appends, the claim, a call marked started. `postgres.py`
runs the tick's three as one statement each; both take their rows from `ticks.py`.

The tick's statements are built once, with `bindparam()`s for what differs from tick to
tick, and given their values when they run: built afresh each tick, their construction
and SQLAlchemy's cache key of each cost more CPU than SQLite's running them (issue 27).
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
    Insert,
    Select,
    Table,
    Update,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    tuple_,
    update,
)
from tickwork.fsm.errors import CancelledMeanwhile, ClaimLost
from tickwork.fsm.machine import Change
from tickwork.fsm.values import RUNNABLE, Event, EventKind, Head, Session, Status, ToolCall
from tickwork.store import dead_letters, reads, rows, trees
from tickwork.store.files import FileChange
from tickwork.store.schema import (
    calls,
    decisions,
    events,
    observations,
    outbox,
    sessions,
    steps,
)
from tickwork.store.ticks import (
    OPEN,
    Claimed,
    Idempotent,
    Lease,
    Taken,
    appended,
    changed_states,
    charged_rows,
    lost,
    saved_head,
    startable,
    started_event,
)


def insert_session(conn: Connection, session: Session, *, now: datetime) -> None:
    head = session.head
    conn.execute(insert(sessions), [rows.head_to_row(head)])
    for step in session.steps:
        conn.execute(insert(steps), [rows.step_to_row(head.id, step)])
        if step.calls:
            conn.execute(insert(calls), [rows.call_to_row(head.id, c) for c in step.calls])
    insert_many(
        conn, observations, [rows.observation_to_row(head.id, o) for o in session.observations]
    )
    insert_many(conn, decisions, [rows.decision_to_row(head.id, d) for d in session.decisions])
    created = Event(
        kind=EventKind.CREATED,
        at=now,
        data={"kind": head.kind, "model": head.model, "status": head.status.value},
    )
    insert_many(
        conn,
        events,
        [rows.event_to_row(head.id, head.version, e) for e in (created, *session.events)],
    )
    if head.status.runnable:
        conn.execute(
            insert(outbox),
            [{"session_id": head.id, "version": head.version, "due_at": now, "published_at": now}],
        )


def apply_change(
    conn: Connection,
    change: Change,
    *,
    version: int,
    owner: str | None,
    now: datetime,
    files: FileChange | None = None,
) -> Head:
    session_id = change.head.id
    completes = change.head.status is Status.COMPLETED
    stored = rows.head_changes(change.head)
    ancestors = _ancestors(change.head) if completes else None
    params = {
        "b_id": session_id,
        "b_version": version,
        "b_next": version + 1,
        "b_cancel": change.head.cancel_requested,
        **{_bound(name): value for name, value in stored.items()},
    }
    if owner is not None:
        params["b_owner"] = owner
    if ancestors:
        params["b_ancestors"] = ancestors
    moved = _moved(leased=owner is not None, completes=completes, child=bool(ancestors))
    row = conn.execute(moved, params).first()
    if row is None:
        raise (
            refused(conn, change.head, version, owner)
            if completes
            else lost(session_id, version, owner)
        )
    for c in charged_rows(change):
        conn.execute(_CHARGE, {"b_id": session_id, **{_bound(k): v for k, v in c.items()}})
    changed = changed_states(change)
    if changed:
        conn.execute(
            _CLOSE_CALLS,
            [
                {
                    "sid": session_id,
                    "at_step": c["step"],
                    "cid": c["call_id"],
                    "new_state": c["state"],
                }
                for c in changed
            ],
        )
    for table, values in appended(change, version=version + 1, now=now, files=files).items():
        insert_many(conn, table, values)
    trees.make_room(conn, change)  # counted again under the tree's lock: a sibling's spawn
    for child in change.children:
        insert_session(conn, Session(head=child), now=now)
    if change.join is not None:
        trees.insert_join(conn, change.join, now=now)
    # a parent's delivery or wait on its `each` join; a child's end meanwhile wakes it now
    woken = change.mark is not None and trees.mark(conn, change.mark, now=now)
    if change.head.status.terminal and change.head.spawn_call is not None:
        # a child's end is counted on its join, and may wake its parent, with its save
        trees.child_ended(conn, change.head, now=now)
    if change.dead_letter:
        record_dead_letter(conn, session_id, now=now)
    saved = saved_head(
        change.head, stored, version=version + 1, cancel_requested=row.cancel_requested
    )
    if woken:
        return saved.model_copy(update={"status": Status.EXECUTING, "version": version + 2})
    return saved


def _bound(name: str) -> str:
    """The bound parameter of the column `name` in a statement's values: named apart from
    the column, since SQLAlchemy keeps a column's own name for the value an UPDATE sets."""
    return f"b_{name}"


@cache
def _moved(*, leased: bool, completes: bool, child: bool) -> Update:
    """The save's compare-and-swap, one statement per kind of save: under a lease (a
    tick's) or none (a person's), completing the session or not, of a child or not."""
    guard = [
        sessions.c.id == bindparam("b_id"),
        sessions.c.version == bindparam("b_version"),
        sessions.c.lease_owner == bindparam("b_owner")
        if leased
        else sessions.c.lease_owner.is_(None),
    ]
    if completes:  # a cancel requested while the tick ran ends it cancelled instead
        guard.append(sessions.c.cancel_requested.is_(False))
        guard.append(~_cancelled_above(child=child).exists())
    return (
        update(sessions)
        .where(*guard)
        .values(
            version=bindparam("b_next"),
            lease_owner=None,
            lease_expires_at=None,
            # a cancel requested while the tick ran must survive its save
            cancel_requested=or_(
                sessions.c.cancel_requested, bindparam("b_cancel", type_=Boolean())
            ),
            **{name: bindparam(_bound(name)) for name in rows.MUTABLE_HEAD},
        )
        .returning(sessions.c.cancel_requested)
    )


#: the leases still ours at their version, each a (session, version, owner), moved on at
#: once: one statement for every running tick of a worker, where one each cost a
#: transaction per lease in flight every third of a lease (issue 27)
_RENEW = (
    update(sessions)
    .where(
        tuple_(sessions.c.id, sessions.c.version, sessions.c.lease_owner).in_(
            bindparam("b_leases", expanding=True)
        )
    )
    .values(lease_expires_at=bindparam("b_expires"))
    .returning(sessions.c.id, sessions.c.version)
)


def renew_leases(
    conn: Connection, leases: list[tuple[str, int, str]], *, expires: datetime
) -> set[tuple[str, int]]:
    """The (session, version) of those of `leases` still ours, now lasting to `expires`."""
    found = conn.execute(_RENEW, {"b_leases": leases, "b_expires": expires})
    return {(session_id, version) for session_id, version in found}


#: a graph node's model use added to its step (`ticks.charged_rows`)
_CHARGE = (
    update(steps)
    .where(steps.c.session_id == bindparam("b_id"), steps.c.step == bindparam("b_step"))
    .values(
        prompt_tokens=steps.c.prompt_tokens + bindparam("b_prompt_tokens"),
        completion_tokens=steps.c.completion_tokens + bindparam("b_completion_tokens"),
        # NULL on a step a worker before 0013 wrote: none counted, as 0
        cached_prompt_tokens=func.coalesce(steps.c.cached_prompt_tokens, 0)
        + bindparam("b_cached_prompt_tokens"),
        cache_creation_tokens=func.coalesce(steps.c.cache_creation_tokens, 0)
        + bindparam("b_cache_creation_tokens"),
        cost_usd=steps.c.cost_usd + bindparam("b_cost_usd"),
    )
)

#: the save's new states of calls stored before it, one row each
_CLOSE_CALLS = (
    update(calls)
    .where(
        and_(
            calls.c.session_id == bindparam("sid"),
            calls.c.step == bindparam("at_step"),
            calls.c.call_id == bindparam("cid"),
        )
    )
    .values(state=bindparam("new_state"))
)


def _ancestors(head: Head) -> list[str] | None:
    """A child's parent and root (what it shares its cancellation with); None for a
    session that is no child (a fork's `parent_id` is not its tree's)."""
    ancestors = [i for i in (head.parent_id, head.root_id) if i is not None]
    return ancestors if head.spawn_call is not None and ancestors else None


@cache
def _cancelled_above(*, child: bool) -> Select[Any]:
    """The ids of a child's parent and root (`b_ancestors`) that are cancelled or asked to
    be: the tree shares its root's cancellation (a child's own flag may not be set yet, the
    cancel moving down the tree in transactions of their own). Nothing for a session that
    is no child."""
    above = sessions.alias("above")
    if not child:
        return select(above.c.id).where(literal(False))
    return select(above.c.id).where(
        above.c.id.in_(bindparam("b_ancestors", expanding=True)),
        or_(above.c.cancel_requested, above.c.status == Status.CANCELLED.value),
    )


def refused(
    conn: Connection, head: Head, version: int, owner: str | None
) -> CancelledMeanwhile | ClaimLost:
    """Why the save of a change completing the session (`head`, as the change left it)
    moved no row: its cancel, or its tree's, was requested while the tick ran (the lease
    still the tick's), or the claim was lost."""
    row = conn.execute(
        select(sessions.c.version, sessions.c.lease_owner, sessions.c.cancel_requested).where(
            sessions.c.id == head.id
        )
    ).first()
    if row is None or (row.version, row.lease_owner) != (version, owner):
        return lost(head.id, version, owner)
    ancestors = _ancestors(head)
    above = conn.execute(
        _cancelled_above(child=bool(ancestors)), {"b_ancestors": ancestors} if ancestors else {}
    ).scalar()
    if row.cancel_requested or above is not None:
        whose = "its" if row.cancel_requested else f"its tree's (session {above})"
        return CancelledMeanwhile(
            f"session {head.id} v{version}: {whose} cancel was requested while the tick ran; "
            "nothing was saved: save the tick's work ending the session cancelled"
        )
    return lost(head.id, version, owner)


def record_dead_letter(conn: Connection, session_id: str, *, now: datetime) -> None:
    """Dead-letter the session the save in `conn`'s transaction failed, with its snapshot."""
    dead_letters.record(conn, reads.read_session(conn, session_id), now=now)


def insert_many(conn: Connection, table: Table, values: list[dict[str, Any]]) -> None:
    if values:
        conn.execute(_insert(table), values)


@cache
def _insert(table: Table) -> Insert:
    """An INSERT into `table`, built once: its columns come from the values it runs with."""
    return insert(table)


#: the claim's lease: of a runnable session at its version, free or expired, of a runtime
#: level the claiming worker has
_TAKE = (
    update(sessions)
    .where(
        sessions.c.id == bindparam("b_id"),
        sessions.c.version == bindparam("b_version"),
        sessions.c.status.in_([s.value for s in RUNNABLE]),
        or_(sessions.c.lease_owner.is_(None), sessions.c.lease_expires_at < bindparam("b_now")),
        sessions.c.runtime_level <= bindparam("b_level"),
    )
    .values(lease_owner=bindparam("b_owner"), lease_expires_at=bindparam("b_expires"))
    .returning(*sessions.c)
)

#: the claimed version's tick (and any older one) out of the outbox
_DROP_TICKS = delete(outbox).where(
    outbox.c.session_id == bindparam("b_id"), outbox.c.version <= bindparam("b_version")
)

#: what a THINK's claim finds of the step its process read last (`transcripts.Mark`)
_KNOWN = select(steps.c.trace_id, steps.c.fingerprint).where(
    steps.c.session_id == bindparam("b_id"), steps.c.step == bindparam("b_step")
)


def take_lease(
    conn: Connection,
    lease: Lease,
    *,
    expires: datetime,
    after: int,
    level: int,
    idempotent: Idempotent,
) -> Taken | None:
    session_id, version, owner = lease.session_id, lease.version, lease.owner
    assert owner is not None, "a claim takes a lease"
    taken = {
        "b_id": session_id,
        "b_version": version,
        "b_now": lease.now,
        "b_level": level,
        "b_owner": owner,
        "b_expires": expires,
    }
    row = conn.execute(_TAKE, taken).mappings().first()
    if row is None:
        return None
    conn.execute(_DROP_TICKS, {"b_id": session_id, "b_version": version})
    head = rows.head_from_row(row)
    if head.status is Status.EXECUTING:
        current = reads.read_calls(conn, session_id, step=head.step)
        decided = reads.read_decisions(conn, session_id, current)
        call, started = startable(head, current, idempotent), None
        if call is not None:
            event = started_event(session_id, version, call, now=lease.now, rerun=False)
            started = call.call_id if mark_started(conn, lease, call, event) else None
        claimed = Claimed(head=head, owner=owner, calls=current, decisions=decided, started=started)
        return claimed, None
    history, seen = reads.read_history(conn, session_id, after=after)
    known = conn.execute(_KNOWN, {"b_id": session_id, "b_step": after}).first()
    mark = None if known is None else (known[0], known[1])
    return Claimed(head=head, owner=owner, steps=history, observations=seen), mark


def mark_started(conn: Connection, lease: Lease, call: ToolCall, event: dict[str, Any]) -> bool:
    """Mark `call` started and record its `event`, if the lease is still ours."""
    params = {
        "b_id": lease.session_id,
        "b_version": lease.version,
        "b_owner": lease.owner,
        "b_step": call.step,
        "b_call": call.call_id,
        "b_now": lease.now,
    }
    started = conn.execute(_START, params).rowcount == 1
    if started:
        conn.execute(_insert(events), [event])
    return started


#: a call started, if it is open and the session still at the version under the lease
_START = (
    update(calls)
    .where(
        calls.c.session_id == bindparam("b_id"),
        calls.c.step == bindparam("b_step"),
        calls.c.call_id == bindparam("b_call"),
        calls.c.state.in_(OPEN),
        select(sessions.c.id)
        .where(
            sessions.c.id == bindparam("b_id"),
            sessions.c.version == bindparam("b_version"),
            sessions.c.lease_owner == bindparam("b_owner"),
        )
        .exists(),
    )
    .values(state="started", started_at=bindparam("b_now"))
)
