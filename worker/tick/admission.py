"""Admission in the worker (docs/DESIGN.md section 15): the relay's pass over queued
sessions, and the nudge that admits a tenant's next session as soon as one of its
sessions ends, so a tenant at its limit does not wait a relay period per session.

The limits are the tenants file's (`TICKWORK_TENANTS_FILE`), read again when it changes.
"""

from __future__ import annotations

import logging

from tickwork.fsm.admission import Admission, TenantLimit
from tickwork.fsm.wording import counted
from tickwork.store.relay import LOGGED_IDS, Due, named
from tickwork.worker.config.tenants import TenantTable
from tickwork.worker.observers.report import Outcome, TickReport
from tickwork.worker.tick.runtime import Runtime

log = logging.getLogger("tickwork.relay")


def policy(table: TenantTable) -> Admission:
    """What admission needs of the tenants file: each tenant's in-flight limit and weight."""

    def limit(max_in_flight: int | None, weight: float) -> TenantLimit:
        return TenantLimit(max_in_flight=max_in_flight, weight=weight)

    return Admission(
        tenants={n: limit(q.max_in_flight, q.weight) for n, q in table.listed.items()},
        default=limit(table.others.max_in_flight, table.others.weight),
    )


def admit_queued(rt: Runtime, *, tenants: list[str] | None = None) -> list[Due]:
    """Admit what may be admitted now (of `tenants` only, if given) and publish the ticks,
    in the fair order; a tick not published (the broker away) is the relay's as any other.
    A full pass (no `tenants`) first fails `DEADLINE` the sessions whose deadline passed
    while they waited, and announces their dead letters as a tick that failed one does."""
    now = rt.clock()
    if tenants is None:
        expired = rt.store.expire(now=now)
        for head in expired:
            rt.announce_dead_letter(head)
        if expired:
            log.warning(
                "relay: failed DEADLINE %s whose deadline passed while they waited: %s",
                counted(len(expired), "session"),
                ", ".join(h.id for h in expired[:LOGGED_IDS])
                + (f" and {len(expired) - LOGGED_IDS} more" if len(expired) > LOGGED_IDS else ""),
            )
    admitted = rt.store.admit(policy(rt.tenants.table()), now=now, tenants=tenants)
    for tick in admitted:
        rt.publish(tick.session_id, tick.version)
    if admitted:
        log.info(
            "admission: let in %s: %s", counted(len(admitted), "queued session"), named(admitted)
        )
    return admitted


class Admitter:
    """An observer of the tick: when a tick ends a session that held room a queued session
    may wait for (its tenant has an in-flight limit, or it had a concurrency key), its
    tenant's next queued session is admitted at once instead of at the relay's next pass.
    Another end frees no such room, and costs no query (sessions queued under a limit
    since taken out of the tenants file wait for the relay's pass)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def __call__(self, report: TickReport) -> None:
        head = report.head
        if report.outcome is not Outcome.SAVED or head is None or not head.status.terminal:
            return
        limited = policy(self.rt.tenants.table()).of(head.tenant).max_in_flight is not None
        if limited or head.concurrency_key is not None:
            admit_queued(self.rt, tenants=[head.tenant])
