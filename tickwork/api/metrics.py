"""The API's own metrics and its /metrics endpoint.

/metrics serves this process's metrics (with PROMETHEUS_MULTIPROC_DIR, every process's
that writes there, workers on the same host included) and the store's gauges, read at
each scrape: sessions by status, approvals waiting and their age, dead letters by code,
the outbox backlog. /api/v1/metrics serves a token the same series of its own tenant only:
the store's per-tenant gauges, and the workers' per-tenant counters only where this process
shares PROMETHEUS_MULTIPROC_DIR with the workers (else they are on each worker's port).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Query, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.registry import Collector
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwork.fsm.tenants import TENANT_PATTERN
from tickwork.worker.observers.metrics import StoreCollector, registry

from .auth import Reader
from .errors import ApiError, documented_beside_text

REQUESTS = Counter(
    "tickwork_api_requests", "API requests by route and status", ["method", "route", "status"]
)
REQUEST_SECONDS = Histogram(
    "tickwork_api_request_duration_seconds",
    "API request time (to the first byte for streams)",
    ["method", "route"],
)
DECISIONS = Counter("tickwork_decisions", "Decisions made through the API", ["kind"])
DECISION_WAIT = Histogram(
    "tickwork_approval_decision_wait_seconds",
    "From a session's approval request to a person's decision",
    buckets=(10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400),
)

router = APIRouter()

#: methods counted by name; any other (made up) method is counted as OTHER
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def method_label(method: str) -> str:
    """The method as a label value: one of METHODS or OTHER, so labels stay bounded."""
    return method if method in METHODS else "OTHER"


class _Both(Collector):
    def __init__(self, *sources: Any) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Any]:
        for source in self.sources:
            yield from source.collect()


def exposition(store_collector: StoreCollector, multiproc_dir: str | None) -> bytes:
    combined = CollectorRegistry(auto_describe=False)
    combined.register(_Both(registry(multiproc_dir), store_collector))
    return generate_latest(combined)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """The operators' scrape: every process's metrics and every tenant's gauges."""
    state = request.app.state
    body = await anyio.to_thread.run_sync(exposition, state.store_collector, state.multiproc_dir)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


class _OneTenant(Collector):
    """The samples of `source` labelled with `tenant`, and no others."""

    def __init__(self, source: Collector, tenant: str) -> None:
        self.source, self.tenant = source, tenant

    def collect(self) -> Iterator[Any]:
        for family in self.source.collect():
            kept = [s for s in family.samples if s.labels.get("tenant") == self.tenant]
            if kept:
                family.samples = kept
                yield family


def tenant_exposition(
    store_collector: StoreCollector, multiproc_dir: str | None, tenant: str
) -> bytes:
    """`tenant`'s series of the whole scrape: the store's gauges and the workers' counters
    labelled with it. A tenant past the label cap is counted under `other`, a name no
    tenant may take, so its series are never shown as another's."""
    scoped = CollectorRegistry(auto_describe=False)
    scoped.register(_OneTenant(_Both(registry(multiproc_dir), store_collector), tenant))
    return generate_latest(scoped)


class Exposition(Response):
    """Prometheus's text format: the schema states the route's 200 as this text only."""

    media_type = CONTENT_TYPE_LATEST.split(";")[0]


@router.get(
    "/api/v1/metrics",
    tags=["ops"],
    summary="The token's tenant's metrics, in Prometheus's text format",
    response_class=Exposition,
    responses={
        200: {"description": "The tenant's series (an admin's: every tenant's, or `tenant`'s)"},
        **documented_beside_text(401, 403, 422, 503),
        404: {
            **documented_beside_text(404)[404],
            "description": "`tenant_not_found`: a `tenant` not the token's",
        },
    },
)
async def tenant_metrics(
    request: Request,
    who: Reader,
    tenant: Annotated[
        str | None,
        Query(
            max_length=64,
            pattern=TENANT_PATTERN,
            description="An admin token: this tenant's series only; another token: its own "
            "tenant only (another is 404 `tenant_not_found`).",
        ),
    ] = None,
) -> Response:
    """The caller's tenant's series, as `/metrics` has them (an admin: the whole scrape, or
    `tenant`'s); another tenant's is 404, as one nobody made. An own-only token gets none:
    the series count every session of its tenant, not only its own."""
    state = request.app.state
    if who.own_only and not who.admin:
        raise ApiError(
            403,
            "forbidden",
            f"{who.name}'s token is own_only: it sees the sessions it submitted, and its "
            f"tenant's metrics count every session of tenant {who.tenant}; read your "
            "sessions' cost and tokens in GET /api/v1/sessions, or ask an operator for a "
            "token of the whole tenant",
        )
    if tenant is not None and not who.admin and tenant != who.tenant:
        raise ApiError(
            404,
            "tenant_not_found",
            f"no metrics of tenant {tenant!r} for this token: it sees its own tenant's "
            "(leave out `tenant`)",
        )
    scope = tenant or who.scope
    if scope is None:
        body = await anyio.to_thread.run_sync(
            exposition, state.store_collector, state.multiproc_dir
        )
    else:
        body = await anyio.to_thread.run_sync(
            tenant_exposition, state.store_collector, state.multiproc_dir, scope
        )
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def route_label(scope: Scope, asked: Scope) -> str:
    """The route a request took, as a label: an API route's path template; else the path of
    the plain route (the OpenAPI schema) or of the mounted folder (the page's files) that
    takes the request as it was `asked` (before a mount rewrote the scope); `unmatched`
    only for a request no route takes (a mistyped URL, a scan). Labels stay bounded."""
    path = getattr(scope.get("route"), "path", None)
    if path:
        return path
    app = asked.get("app")
    for route in getattr(getattr(app, "router", None), "routes", ()):
        if route.matches(asked)[0] is Match.FULL:
            return getattr(route, "path", None) or "unmatched"
    return "unmatched"


class CountRequests:
    """ASGI middleware: count and time requests by route template (bounded labels)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]
        asked = dict(scope)  # the routing below rewrites the scope for a mounted folder

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                route = route_label(scope, asked)
                if route != "/metrics":
                    REQUEST_SECONDS.labels(method_label(scope["method"]), route).observe(
                        time.perf_counter() - started
                    )
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = route_label(scope, asked)
            if route != "/metrics":
                REQUESTS.labels(method_label(scope["method"]), route, str(status[0])).inc()
