"""What the store holds, read for the metrics' gauges at each scrape: sessions by status,
approvals waiting, dead letters, the outbox, runnable sessions nobody moves."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine, case, func, or_, select
from tickwork.fsm.values import RUNNABLE, EventKind, Status
from tickwork.store.schema import dead_letters, events, outbox, sessions


@dataclass(frozen=True)
class Gauges:
    #: status -> how many sessions (statuses with none are left out)
    by_status: dict[str, int]
    #: (tenant, status) -> how many sessions (none: left out)
    by_tenant: dict[tuple[str, str], int]
    #: per session waiting for a person: the calls it waits on, and when it asked (or None)
    waiting: list[tuple[tuple[str, ...], datetime | None]]
    #: (error code, resolved, how many) of the dead letters
    dead_letters: list[tuple[str, bool, int]]
    #: (tenant, error code, resolved, how many) of the dead letters
    tenant_dead_letters: list[tuple[str, str, bool, int]]
    #: ticks written but not yet claimed, and the earliest due time among them
    outbox_rows: int
    oldest_due: datetime | None
    #: when the stalest runnable session last moved (or its delayed tick fell due)
    stalest: datetime | None
    #: runnable sessions whose next tick is not yet due (model backoff, Retry-After)
    delayed: int


def read(engine: Engine, *, now: datetime) -> Gauges:
    with engine.connect() as conn:
        by_tenant = {
            (tenant, status): count
            for tenant, status, count in conn.execute(
                select(sessions.c.tenant, sessions.c.status, func.count()).group_by(
                    sessions.c.tenant, sessions.c.status
                )
            )
        }
        by_status: dict[str, int] = {}
        for (_, status), count in by_tenant.items():
            by_status[status] = by_status.get(status, 0) + count
        suspended = select(sessions.c.id).where(sessions.c.status == Status.WAITING_APPROVAL.value)
        requested = (
            select(events.c.session_id, func.max(events.c.at).label("at"))
            .where(
                events.c.kind == EventKind.APPROVAL_REQUESTED.value,
                events.c.session_id.in_(suspended),
            )
            .group_by(events.c.session_id)
            .subquery()
        )
        waiting = conn.execute(
            select(sessions.c.awaiting, requested.c.at)
            .outerjoin(requested, requested.c.session_id == sessions.c.id)
            .where(sessions.c.status == Status.WAITING_APPROVAL.value)
        ).all()
        resolved = dead_letters.c.resolved_at.is_not(None)
        tenant_letters = conn.execute(
            select(dead_letters.c.tenant, dead_letters.c.code, resolved, func.count()).group_by(
                dead_letters.c.tenant, dead_letters.c.code, resolved
            )
        ).all()
        letters: dict[tuple[str, bool], int] = {}
        for _, code, done, count in tenant_letters:
            letters[(code, bool(done))] = letters.get((code, bool(done)), 0) + count
        rows, oldest_due = conn.execute(select(func.count(), func.min(outbox.c.due_at))).one()
        stalest, delayed = _runnable(conn, now)
    return Gauges(
        by_status=by_status,
        by_tenant=by_tenant,
        waiting=[(tuple(a or ()), at) for a, at in waiting],
        dead_letters=[(code, done, count) for (code, done), count in letters.items()],
        tenant_dead_letters=[(t, code, bool(done), n) for t, code, done, n in tenant_letters],
        outbox_rows=rows,
        oldest_due=oldest_due,
        stalest=stalest,
        delayed=delayed,
    )


def _runnable(conn: Connection, now: datetime) -> tuple[datetime | None, int]:
    """When the stalest runnable session last moved (or, for a delayed tick the relay has
    not published yet, fell due), leaving out sessions whose delayed tick is not yet due;
    and how many those are."""
    runnable = sessions.c.status.in_([s.value for s in RUNNABLE])
    unpublished = outbox.c.published_at.is_(None)
    moving = sessions.outerjoin(
        outbox,
        (outbox.c.session_id == sessions.c.id) & (outbox.c.version == sessions.c.version),
    )
    delayed = conn.execute(
        select(func.count()).select_from(moving).where(runnable, unpublished, outbox.c.due_at > now)
    ).scalar_one()
    since = case(
        (unpublished & (outbox.c.due_at > sessions.c.updated_at), outbox.c.due_at),
        else_=sessions.c.updated_at,
    )
    stalest = conn.execute(
        select(func.min(since))
        .select_from(moving)
        .where(runnable, or_(outbox.c.due_at.is_(None), ~unpublished, outbox.c.due_at <= now))
    ).scalar()
    return stalest, int(delayed)
