"""Liveness and readiness: /healthz says the process answers, /readyz that it can work.

/readyz checks the database (it answers), its schema (at the migrations' head, so a
database nobody upgraded is not ready) and the broker (a connection opens), and names the
first that is not ready in a 503. It needs no token (probes send none), so the answer says
only which check failed and what to do in general; the reason itself (the database's or
the broker's error text: hosts, users, the driver's words) goes to the server's log, and
to a caller with an admin token.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from fastapi import APIRouter, Request

from tickwork.client import Tickwork
from tickwork.fsm.errors import StoreError
from tickwork.store.migrate import head

from .auth import bearer_token
from .errors import ApiError, documented
from .settings import Role

log = logging.getLogger("tickwork.api")

router = APIRouter(tags=["ops"])

#: what /readyz tells a caller without an admin token, by check
GENERIC = {
    "database": "database: does not answer",
    "schema": "schema: not at this version's migrations; run `tickwork db upgrade`",
    "broker": "broker: cannot connect",
}
#: where the reason is
WHERE = "; the reason is in the server's log (and in /readyz's answer to an admin token)"

#: seconds a readiness check waits for the broker
BROKER_TIMEOUT_S = 3.0


def check_database(client: Tickwork) -> str | None:
    """What is wrong with the database or its schema, or None."""
    try:
        current = client.store.revisions()
    except Exception as exc:
        said = exc.message if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}"
        return f"database: does not answer ({said.strip()[:300]})"
    wanted = set(head(client.settings.db_url).split(","))
    if current != wanted:
        found = ", ".join(sorted(current)) or "no schema"
        return (
            f"schema: the database is at revision {found}, this version needs "
            f"{', '.join(sorted(wanted))}; run `tickwork db upgrade`"
        )
    return None


def check_broker(client: Tickwork) -> str | None:
    """What is wrong with the broker, or None."""
    from tickwork.worker.config.brokers import refused
    from tickwork.worker.tick.app import broker_away

    why = broker_away(client.app, timeout_s=BROKER_TIMEOUT_S)
    if why is None:
        return None
    wrong = refused(client.settings.broker_url, why)
    return f"broker: {wrong}" if wrong is not None else f"broker: cannot connect ({why})"


# HEAD too, as uptime monitors and load balancers ask (out of the schema: one operation)
@router.get("/healthz", summary="Liveness: 200 while the server answers (checks nothing else)")
@router.head("/healthz", include_in_schema=False)
async def healthz() -> dict[str, Any]:
    return {"ok": True}


@router.head("/readyz", include_in_schema=False)
@router.get(
    "/readyz",
    summary="Readiness: the database answers, its schema is at head, the broker connects",
    responses=documented(503),
)
async def readyz(request: Request) -> dict[str, Any]:
    client: Tickwork = request.app.state.client
    for check in (check_database, check_broker):
        wrong = await anyio.to_thread.run_sync(check, client)
        if wrong is not None:
            name = wrong.partition(":")[0]
            _log_once(request, wrong)
            said = wrong if _admin(request) else GENERIC[name] + WHERE
            raise ApiError(503, "not_ready", said, check=name)
    request.app.state.readyz_said = None
    return {"ok": True, "checks": {"database": "ok", "schema": "ok", "broker": "ok"}}


def _admin(request: Request) -> bool:
    """Whether the caller sent an admin's token (the deployment's operators)."""
    token = bearer_token(request.scope)
    found = None if token is None else request.app.state.tokens.find(token)
    return found is not None and Role.ADMIN in found.roles


def _log_once(request: Request, wrong: str) -> None:
    """Log why the server is not ready, once a reason (probes ask every few seconds)."""
    if getattr(request.app.state, "readyz_said", None) != wrong:
        request.app.state.readyz_said = wrong
        log.warning("/readyz: not ready: %s", wrong)
