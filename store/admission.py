"""Admission in the database (docs/DESIGN.md section 15): a new session starts at once or
waits as `queued`, and the relay admits queued sessions, queued -> ready with their first
tick in the outbox, in one transaction each.

"Never more in flight than the limit" holds because everything that can add to a tenant's
sessions in flight (a submit that starts, an admission) counts them and writes under one
lock per tenant: `pg_advisory_xact_lock` on Postgres (other tenants are not held up), and
SQLite's one writer at a time (`BEGIN IMMEDIATE`). What only lowers the count (a session
finishing, a queued one cancelled) needs no lock. Concurrency keys are counted within
their tenant, under the same lock. Queued rows are taken `FOR UPDATE SKIP LOCKED`, so a
cancel holding one is passed over, and the update checks the row is still queued.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    and_,
    func,
    insert,
    or_,
    select,
    update,
)
from tickwork.fsm import machine
from tickwork.fsm.admission import Admission, Room, TenantLimit, fair_shares, may_start
from tickwork.fsm.budgets import deadline_passed
from tickwork.fsm.values import (
    IN_FLIGHT,
    CallState,
    Decision,
    ErrorCode,
    Event,
    EventKind,
    Head,
    Status,
    ToolCall,
)
from tickwork.store import quotas, reads, rows, writes
from tickwork.store.relay import Due
from tickwork.store.schema import events, outbox, sessions

#: the most queued sessions one relay pass admits, across every tenant
PASS_BUDGET = 200
#: the most pages of candidates one tenant's admission reads in a pass
MAX_PAGES = 8
#: the most queued sessions (the oldest) a full pass reads for a deadline that passed
EXPIRY_SCAN = 500
_IN_FLIGHT = [s.value for s in IN_FLIGHT]
_QUEUED = Status.QUEUED.value


def in_flight(conn: Connection, tenant: str, *, key: str | None = None) -> int:
    """How many of the tenant's sessions are in flight (of concurrency key `key` only, if
    given)."""
    query = select(func.count()).where(
        sessions.c.tenant == tenant, sessions.c.status.in_(_IN_FLIGHT)
    )
    if key is not None:
        query = query.where(sessions.c.concurrency_key == key)
    return int(conn.execute(query).scalar_one())


def placed(conn: Connection, head: Head, limit: TenantLimit) -> Head:
    """The new session's head as it is to be stored: as given if it may start at once,
    else `queued`. Takes the tenant's lock, so the count and the insert that follows in
    the same transaction are one step for every other submit and admission."""
    if not head.status.runnable or (limit.max_in_flight is None and head.concurrency_key is None):
        return head
    # the lock the tenant's quotas are checked under: taken again in one transaction,
    # it is held once
    quotas.lock(conn, head.tenant)
    # a queued session that waits only for its key does not hold up one of another key
    ahead = conn.execute(
        select(sessions.c.id)
        .where(_admissible(head.tenant), sessions.c.priority >= head.priority)
        .limit(1)
    ).first()
    keyed = head.concurrency_key is not None
    start = may_start(
        limit,
        in_flight=in_flight(conn, head.tenant) if limit.max_in_flight is not None else 0,
        queued_ahead=ahead is not None,
        key_in_flight=in_flight(conn, head.tenant, key=head.concurrency_key) if keyed else 0,
        max_per_key=head.max_per_key,
    )
    return head if start else head.model_copy(update={"status": Status.QUEUED})


def admit(
    engine: Engine,
    admission: Admission,
    *,
    now: datetime,
    tenants: Sequence[str] | None = None,
    budget: int = PASS_BUDGET,
) -> list[Due]:
    """One pass of admission: queued sessions let in while their tenant is under its
    in-flight limit and their key under its own, at most `budget`, shared across tenants
    by `fair_shares` (the least busy for its weight first) and within a tenant by priority,
    then age. `tenants`: only these (a session of theirs just finished). The relay's full
    pass calls `expire` first, which gives it the sessions to announce: failing them here
    too would fail those its scan left out with no notice. Returns the ticks to publish,
    in the fair order."""
    with engine.connect() as conn:
        rooms = _rooms(conn, admission, tenants)
    order = fair_shares(rooms, budget=budget)
    wanted = Counter(order)
    admitted: dict[str, list[Due]] = {}
    for tenant in dict.fromkeys(order):
        with engine.begin() as conn:
            admitted[tenant] = _admit_tenant(
                conn, tenant, admission.of(tenant), wanted[tenant], now=now
            )
    return list(_interleaved(order, admitted))


def expire(engine: Engine, *, now: datetime, limit: int = EXPIRY_SCAN) -> list[Head]:
    """Fail `DEADLINE`, dead-lettered as at a tick, the sessions waiting (of the `limit`
    oldest queued, and as many waiting for a decision) whose deadline passed while they
    waited: a deadline runs from the submit, the wait included, so each would fail at its
    next tick anyway. A queued one frees its place in `max_queued` and says why, instead
    of waiting, maybe for ever, for a slot; one waiting for a decision leaves the approvals
    queue for the dead letters (forked with a later deadline, it asks again), instead of
    being listed there until an approval that could only end it. Their heads as failed,
    each returned by the one call that failed it (relays racing each fail it once: the
    caller announces its dead letter)."""
    failed: list[Head] = []
    for status in (Status.QUEUED, Status.WAITING_APPROVAL):
        with engine.connect() as conn:
            waiting = conn.execute(
                select(sessions.c.id, sessions.c.created_at, sessions.c.budgets)
                .where(sessions.c.status == status.value)
                .order_by(sessions.c.created_at)
                .limit(limit)
            ).all()
        late = [r.id for r in waiting if _past_deadline(r.created_at, r.budgets, now)]
        failed += [h for i in late if (h := _expire_one(engine, i, status, now=now)) is not None]
    return failed


def _expire_one(engine: Engine, session_id: str, status: Status, *, now: datetime) -> Head | None:
    """Fail the session DEADLINE if it still waits as `status` past its deadline: its head
    as failed, or None if it was not (under the row's lock, so by one caller only)."""
    with engine.begin() as conn:
        head = reads.read_head(conn, session_id, lock=True)
        why = deadline_passed(head, now=now)
        if head.status is not status or why is None:
            return None  # admitted, decided, cancelled or failed by another relay meanwhile
        calls: tuple[ToolCall, ...] = ()
        decided: dict[str, Decision] = {}
        if status is Status.QUEUED:
            full, larger = f"tenant {head.tenant}'s `max_in_flight`", ""
            if head.concurrency_key is not None:
                full += f" or concurrency key {head.concurrency_key!r}'s `max_per_key`"
                larger = ", a larger `max_per_key`"
            wait = (
                f"it waited queued and was never admitted ({full} stayed full): give a "
                f"deadline that covers the wait{larger}, or ask the operator to raise the "
                "tenant's `max_in_flight`"
            )
        else:
            calls = reads.read_calls(conn, session_id, step=head.step)
            # a call of the step rejected already keeps its feedback as its observation
            rejected = [c for c in calls if c.state is CallState.REJECTED]
            decided = reads.read_decisions(conn, session_id, rejected) if rejected else {}
            wait = (
                f"it waited for a decision on {', '.join(head.awaiting)} that did not come in "
                f"time ({_fork_hint(head.step, calls)})"
            )
            wait += ": give a deadline that covers the wait"
        change = machine.fail(
            head,
            ErrorCode.DEADLINE,
            f"{why}; {wait}",
            now=now,
            open_calls=calls,
            decisions=decided,
        )
        return writes.apply_change(conn, change, version=head.version, owner=None, now=now)


def _fork_hint(step: int, calls: Sequence[ToolCall]) -> str:
    """How to go on from a session failed while its step `step` waited for a decision: a
    fork from that step keeps its calls closed as not run, and asks nobody; one from the
    step before makes the step again, its calls waiting for a decision again. Not where a
    call is in doubt: made again, it could run twice without anyone asked."""
    doubt = [c.call_id for c in calls if c.state is CallState.IN_DOUBT]
    if doubt:
        return (
            f"fork it from step {step} with a later deadline (`deadline_s`): the model reads "
            f"that {', '.join(doubt)} may or may not have run (a fork's `tool_outputs` gives "
            "its output)"
        )
    return f"fork it from step {step - 1} with a later deadline (`deadline_s`) to be asked again"


def _past_deadline(created_at: datetime, budgets: Any, now: datetime) -> bool:
    """`deadline_passed` read from a row's columns, to pick the heads worth reading."""
    deadline = (budgets or {}).get("deadline_s") if isinstance(budgets, dict) else None
    return deadline is not None and (now - created_at).total_seconds() >= float(deadline)


def _rooms(conn: Connection, admission: Admission, tenants: Sequence[str] | None) -> list[Room]:
    """Every tenant with queued sessions (of `tenants` if given), with its room, read
    without a lock: a plan that `_admit_tenant` checks again under the tenant's lock."""
    query = (
        select(sessions.c.tenant, func.count())
        .where(sessions.c.status == _QUEUED)
        .group_by(sessions.c.tenant)
        .order_by(sessions.c.tenant)
    )
    if tenants is not None:
        query = query.where(sessions.c.tenant.in_(list(tenants)))
    queued = {t: n for t, n in conn.execute(query)}
    if not queued:
        return []
    flying_query = (
        select(sessions.c.tenant, func.count())
        .where(sessions.c.tenant.in_(list(queued)), sessions.c.status.in_(_IN_FLIGHT))
        .group_by(sessions.c.tenant)
    )
    busy = {t: n for t, n in conn.execute(flying_query)}
    rooms = []
    for tenant, waiting in queued.items():
        limit = admission.of(tenant)
        flying = busy.get(tenant, 0)
        free = waiting if limit.max_in_flight is None else limit.max_in_flight - flying
        rooms.append(
            Room(
                tenant=tenant,
                in_flight=flying,
                room=max(0, min(waiting, free)),
                weight=limit.weight,
            )
        )
    return rooms


def _admit_tenant(
    conn: Connection, tenant: str, limit: TenantLimit, wanted: int, *, now: datetime
) -> list[Due]:
    """Admit up to `wanted` of the tenant's queued sessions, under its lock, highest
    priority then oldest first, passing over those whose key is full."""
    quotas.lock(conn, tenant)
    if limit.max_in_flight is not None:
        wanted = min(wanted, limit.max_in_flight - in_flight(conn, tenant))
    if wanted <= 0:
        return []
    admitted: list[Due] = []
    # each page sees the admissions before it (same transaction): a key filled on one page
    # is left out of the next, so a crowd of one key never hides the sessions behind it
    for _ in range(MAX_PAGES):
        size = (wanted - len(admitted)) * 2 + 8
        page = _candidates(conn, tenant, limit=size)
        keys = {c.concurrency_key for c in page if c.concurrency_key is not None}
        flying = Counter(_key_counts(conn, tenant, keys))
        for c in page:
            if len(admitted) == wanted:
                return admitted
            if c.concurrency_key is not None:
                if flying[c.concurrency_key] >= (c.max_per_key or 1):
                    continue
                flying[c.concurrency_key] += 1
            tick = _let_in(conn, c.id, c.version, now=now)
            if tick is not None:
                admitted.append(tick)
        if len(page) < size or len(admitted) == wanted:
            break
    return admitted


def _candidates(conn: Connection, tenant: str, *, limit: int) -> list[Any]:
    """The tenant's next queued sessions whose key (if any) has room, in admission order,
    locked (rows a cancel holds are passed over)."""
    query = (
        select(
            sessions.c.id, sessions.c.version, sessions.c.concurrency_key, sessions.c.max_per_key
        )
        .where(_admissible(tenant))
        .order_by(sessions.c.priority.desc(), sessions.c.created_at, sessions.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True, of=sessions)
    )
    return list(conn.execute(query).all())


def _admissible(tenant: str) -> ColumnElement[bool]:
    """The tenant's queued sessions that would be admitted if the tenant had room: no
    key, or a key with fewer in flight than the session's `max_per_key`."""
    others = sessions.alias("others")
    key_count = (
        select(func.count())
        .where(
            others.c.tenant == sessions.c.tenant,
            others.c.concurrency_key == sessions.c.concurrency_key,
            others.c.status.in_(_IN_FLIGHT),
        )
        .scalar_subquery()
    )
    return and_(
        sessions.c.tenant == tenant,
        sessions.c.status == _QUEUED,
        or_(sessions.c.concurrency_key.is_(None), key_count < sessions.c.max_per_key),
    )


def _key_counts(conn: Connection, tenant: str, keys: Iterable[str]) -> dict[str, int]:
    wanted = sorted(keys)
    if not wanted:
        return {}
    query = (
        select(sessions.c.concurrency_key, func.count())
        .where(
            sessions.c.tenant == tenant,
            sessions.c.concurrency_key.in_(wanted),
            sessions.c.status.in_(_IN_FLIGHT),
        )
        .group_by(sessions.c.concurrency_key)
    )
    return {k: n for k, n in conn.execute(query)}


def _let_in(conn: Connection, session_id: str, version: int, *, now: datetime) -> Due | None:
    """queued -> ready at `version + 1`, with its first tick in the outbox and the event."""
    moved = conn.execute(
        update(sessions)
        .where(
            sessions.c.id == session_id,
            sessions.c.version == version,
            sessions.c.status == _QUEUED,
        )
        .values(status=Status.READY.value, version=version + 1, updated_at=now)
    )
    if moved.rowcount != 1:
        return None
    conn.execute(
        insert(outbox),
        [{"session_id": session_id, "version": version + 1, "due_at": now, "published_at": now}],
    )
    event = Event(kind=EventKind.ADMITTED, at=now)
    conn.execute(insert(events), [rows.event_to_row(session_id, version + 1, event)])
    return Due(session_id, version + 1)


def _interleaved(order: Sequence[str], admitted: dict[str, list[Due]]) -> Iterable[Due]:
    """The admitted ticks in the fair order the pass planned."""
    taken = {tenant: iter(ticks) for tenant, ticks in admitted.items()}
    for tenant in order:
        tick = next(taken[tenant], None)
        if tick is not None:
            yield tick
