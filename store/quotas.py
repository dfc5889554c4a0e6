"""A tenant's quotas checked at submit (and at a fork: a new session of the tenant too), in
the transaction that inserts the session.

What each quota counts (docs/OPERATIONS.md, "Tenants and quotas"):

- `max_queued`: the tenant's sessions waiting to start: in the `queued` status, or
  runnable and never ticked (version 0: submitted, waiting in the broker for a worker).
  The new session counts too, so at most `max_queued` wait at once.
- `max_usd_per_day`: what the tenant's sessions created since the last UTC midnight spent
  themselves, each counted once: their recorded cost (`cost_usd`) less the children's cost
  charged to them at their joins (a `children_joined` event with `cost_usd`; the children
  are counted as sessions themselves) and less a fork's inherited cost (the steps it kept
  from its parent, spent by the parent); refused once it reached the quota, until the next
  midnight. The same count (`spent_on`, `Store.day_spent`) is read before each model call
  of the tenant's sessions, capped at what is left of their day and stopped `BUDGET_COST`
  once it is spent (`tickwork.fsm.budgets.TenantDay`).
- `max_stored_bytes`: the characters of the tenant's live transcripts (the model's thoughts
  and the tools' observations; ~bytes), summed at most once a minute per process (a join
  over every step, too dear for every submit); refused once it reached the quota.

On Postgres a per-tenant advisory lock, held to the transaction's end, serialises the
count and the insert of concurrent submits of one tenant (other tenants do not wait); on
SQLite the store's transactions are `BEGIN IMMEDIATE`, so writers are serialised anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, Connection, Engine, func, or_, select, text
from tickwork.fsm.errors import QuotaExceeded
from tickwork.fsm.tenants import Quotas
from tickwork.fsm.values import RUNNABLE, EventKind, Head, utc_date
from tickwork.fsm.wording import counted, dollars, plain
from tickwork.store.schema import events, joins, observations, sessions, steps

#: the status a session waits in for admission (docs/DESIGN.md section 15)
QUEUED = "queued"
#: stored bytes are summed again after this many seconds
BYTES_TTL_S = 60.0
#: the Retry-After of a full queue, and of stored bytes over their quota
QUEUED_RETRY_S, BYTES_RETRY_S = 30, 3600
#: what a full queue's refusal says besides waiting: who raises the quota, and where
RAISE = "ask the operator to raise it (in TICKWORK_TENANTS_FILE, read again when it changes)"
#: the advisory locks' first key: tickwork's tenants ("tkwT")
LOCK_CLASS = 0x746B7754


def waiting(tenant: str) -> ColumnElement[bool]:
    """The condition of `tenant`'s sessions waiting to start."""
    never_ticked = (sessions.c.version == 0) & sessions.c.status.in_([s.value for s in RUNNABLE])
    return (sessions.c.tenant == tenant) & or_(sessions.c.status == QUEUED, never_ticked)


class StoredBytes:
    """The characters of each tenant's live transcripts, summed at most every BYTES_TTL_S."""

    def __init__(
        self, *, ttl_s: float = BYTES_TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl, self._clock = ttl_s, clock
        self._held: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def of(self, conn: Connection, tenant: str) -> int:
        now = self._clock()
        with self._lock:
            held = self._held.get(tenant)
        if held is not None and now - held[0] < self._ttl:
            return held[1]
        mine = select(sessions.c.id).where(sessions.c.tenant == tenant).scalar_subquery()
        said = select(func.coalesce(func.sum(func.length(steps.c.thought)), 0)).where(
            steps.c.session_id.in_(mine)
        )
        seen = select(func.coalesce(func.sum(func.length(observations.c.content)), 0)).where(
            observations.c.session_id.in_(mine)
        )
        total = int(conn.execute(said).scalar_one()) + int(conn.execute(seen).scalar_one())
        with self._lock:
            self._held[tenant] = (now, total)
        return total


def midnight_before(now: datetime) -> datetime:
    """The UTC midnight the day's spend is counted from."""
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def spent_today(conn: Connection, tenant: str, *, now: datetime) -> float:
    """What `tenant`'s sessions created since the last UTC midnight spent (`spent_on`)."""
    return spent_on(conn, tenant, day=midnight_before(now))


def spent_on(conn: Connection, tenant: str, *, day: datetime) -> float:
    """What `tenant`'s sessions created on the UTC day starting at `day` spent, each
    session's own spending once: a join adds its children's cost to their parent's
    `cost_usd` (the root's is the tree's), so the cost charged at each join (its
    `children_joined` event) is taken off the parent's, the children being counted
    themselves; a fork's `cost_usd` starts at its kept steps' cost, spent by its parent,
    which its `forked` event records (`inherited_cost_usd`) and which is taken off too.

    One statement, read before each model call of a tenant with a day quota: the sessions
    by their (tenant, created_at) index; the events only of the day's sessions that spawned
    (a row in the joins) or are forks, not every event of the day."""
    today = (
        (sessions.c.tenant == tenant)
        & (sessions.c.created_at >= day)
        & (sessions.c.created_at < day + timedelta(days=1))
    )
    recorded = select(func.coalesce(func.sum(sessions.c.cost_usd), 0.0)).where(today)
    parents = select(sessions.c.id).where(today, sessions.c.id.in_(select(joins.c.parent_id)))
    charged = select(func.coalesce(func.sum(events.c.data["cost_usd"].as_float()), 0.0)).where(
        events.c.session_id.in_(parents.scalar_subquery()),
        events.c.kind == EventKind.CHILDREN_JOINED.value,
    )
    forks = select(sessions.c.id).where(today, sessions.c.fork_step.is_not(None))
    inherited = select(
        func.coalesce(func.sum(events.c.data["inherited_cost_usd"].as_float()), 0.0)
    ).where(
        events.c.session_id.in_(forks.scalar_subquery()), events.c.kind == EventKind.FORKED.value
    )
    row = conn.execute(
        select(recorded.scalar_subquery(), charged.scalar_subquery(), inherited.scalar_subquery())
    ).one()
    total = float(row[0]) - float(row[1]) - float(row[2])
    # to the nano-dollar: a sum of float costs less others is off by some 1e-18
    return max(0.0, round(total, 9))


def lock(conn: Connection, tenant: str) -> None:
    """Hold `tenant`'s lock until `conn`'s transaction ends (Postgres; SQLite: a no-op, its
    writers are serialised by BEGIN IMMEDIATE)."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:cls, hashtext(:tenant))"),
            {"cls": LOCK_CLASS - (1 << 31), "tenant": tenant},
        )


def check(
    conn: Connection, head: Head, quotas: Quotas, *, now: datetime, stored: StoredBytes
) -> None:
    """QuotaExceeded, naming the quota, if storing `head` would take its tenant past one;
    call it after `lock`, in the transaction that inserts the session."""
    tenant = head.tenant
    if quotas.max_queued is not None:
        count = select(func.count()).select_from(sessions).where(waiting(tenant))
        queued = int(conn.execute(count).scalar_one())
        if queued + 1 > quotas.max_queued:
            raise QuotaExceeded(
                f"tenant {tenant} has {counted(queued, 'session')} waiting to start, and this one "
                f"would be one more than its quota `max_queued` of {quotas.max_queued}: "
                + (
                    f"wait for some to start, or cancel some, or {RAISE}"
                    if queued
                    else f"this tenant may not queue sessions at all; {RAISE}"
                ),
                tenant=tenant,
                quota="max_queued",
                limit=quotas.max_queued,
                used=queued,
                retry_after_s=QUEUED_RETRY_S,
            )
    if quotas.max_usd_per_day is not None:
        spent = spent_today(conn, tenant, now=now)
        if spent >= quotas.max_usd_per_day:
            until = midnight_before(now) + timedelta(days=1)
            raise QuotaExceeded(
                f"tenant {tenant} spent ${dollars(spent)} today (UTC), its quota "
                f"`max_usd_per_day` is ${plain(quotas.max_usd_per_day)}: try again after "
                f"{utc_date(until)}, when the quota resets (or ask the operator to raise it)",
                tenant=tenant,
                quota="max_usd_per_day",
                limit=quotas.max_usd_per_day,
                used=round(spent, 6),
                retry_after_s=max(1, int((until - now).total_seconds()) + 1),
            )
    if quotas.max_stored_bytes is not None:
        used = stored.of(conn, tenant)
        if used >= quotas.max_stored_bytes:
            raise QuotaExceeded(
                f"tenant {tenant} stores {used:,} bytes of live transcripts, its quota "
                f"`max_stored_bytes` is {quotas.max_stored_bytes:,}: archiving its finished "
                "sessions frees them (`tickwork gc` archives those past their retention age, "
                "TICKWORK_RETENTION_COMPLETED_S, _CANCELLED_S and _FAILED_S; with none set, "
                "none is ever archived), or ask the operator to raise the quota; the bytes are "
                "counted again at most once a minute",
                tenant=tenant,
                quota="max_stored_bytes",
                limit=quotas.max_stored_bytes,
                used=used,
                retry_after_s=BYTES_RETRY_S,
            )


def usage(engine: Engine, tenant: str, *, now: datetime, stored: StoredBytes) -> dict[str, float]:
    """What `tenant` uses of each quota now (for `tickwork tenants` and the docs' sizing)."""
    with engine.connect() as conn:
        queued = conn.execute(select(func.count()).select_from(sessions).where(waiting(tenant)))
        return {
            "max_queued": int(queued.scalar_one()),
            "max_usd_per_day": spent_today(conn, tenant, now=now),
            "max_stored_bytes": stored.of(conn, tenant),
        }
