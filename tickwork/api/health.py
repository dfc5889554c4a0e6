"""Liveness and readiness: /healthz says the process answers, /readyz that it can work.

/readyz checks the database (it answers), its schema (at the migrations' head, so a
database nobody upgraded is not ready) and the broker (a connection opens), and names the
first that is not ready in a 503.
"""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Request

from tickwork.client import Tickwork
from tickwork.fsm.errors import StoreError
from tickwork.store.migrate import head

from .errors import ApiError, documented

router = APIRouter(tags=["ops"])

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
    from tickwork.worker.tick.app import broker_away

    why = broker_away(client.app, timeout_s=BROKER_TIMEOUT_S)
    return None if why is None else f"broker: cannot connect ({why})"


@router.get("/healthz", summary="Liveness: 200 while the server answers (checks nothing else)")
async def healthz() -> dict[str, Any]:
    return {"ok": True}


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
            raise ApiError(503, "not_ready", wrong, check=wrong.partition(":")[0])
    return {"ok": True, "checks": {"database": "ok", "schema": "ok", "broker": "ok"}}
