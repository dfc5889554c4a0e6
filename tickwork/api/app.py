"""The HTTP API and the approvals page, built by `make_api` from settings.

uvicorn --factory tickwork.api:make_api      # or: tickwork serve
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from swagger_ui_bundle import swagger_ui_path

from tickwork.client import Tickwork, WholeIds
from tickwork.worker.config.release import version
from tickwork.worker.config.settings import Settings, load_settings
from tickwork.worker.config.tenants import TenantSettings
from tickwork.worker.observers.metrics import StoreCollector, tenant_labels

from . import dead_letters, errors, forks, health, metrics, sessions, stream
from .auth import TokenGate, Tokens
from .bodies import page_bounds
from .connections import BodyTimeout
from .limits import BodyLimit, clean_parameters, state_clean_text
from .settings import ApiSettings

STATIC = Path(__file__).parent / "static"
#: the page loads nothing from elsewhere and runs no inline script
PAGE_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; "
        b"base-uri 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
DESCRIPTION = """\
Submit and follow tickwork sessions, decide on tool calls waiting for a person, and
analyse dead letters.

Every request carries `Authorization: Bearer <token>`, checked before the body is read;
a token belongs to one person and holds roles:

| role | may |
|---|---|
| any role | read: sessions, their events and stream, the approvals queue, dead letters |
| `submitter` | submit sessions (recorded as `submitted_by`) |
| `approver` | decide on waiting calls, cancel |
| `operator` | cancel, fork sessions and dead letters |

A token without a role may only ask `/me`. Errors are JSON `{"code": ..., "message": ...}`:
401 no or bad token, 403 wrong role, 404 not found, 409 not now (already decided,
arguments changed, finished), 413 body too large, 422 bad input.
"""


class PageHeaders:
    """ASGI middleware: security headers on the page and its files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path not in ("/", "/api/v1/docs", "/favicon.ico") and not path.startswith("/static/"):
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *PAGE_HEADERS]
            await send(message)

        await self.app(scope, receive, sending)


def page_html() -> str:
    """The page, with the bounds its forms offer read from the API's bodies (a meta tag:
    the CSP runs no inline script), so no copy of them can drift."""
    bounds = html.escape(json.dumps(page_bounds()), quote=True)
    return (STATIC / "index.html").read_text().replace("__BOUNDS__", bounds)


def labels_of(client: Tickwork) -> Callable[[Iterable[str]], dict[str, str]]:
    """The tenants' metric labels: those the tenants file lists by name, the first
    TICKWORK_TENANT_LABEL_CAP others too, the rest `other`."""
    cap = client.settings.section(TenantSettings).tenant_label_cap

    def labels(seen: Iterable[str]) -> dict[str, str]:
        return tenant_labels(seen, listed=client.tenants.table().names, cap=cap)

    return labels


def make_api(
    settings: Settings | None = None,
    api: ApiSettings | None = None,
    *,
    client: Tickwork | None = None,
    multiproc_dir: str | None = None,
) -> FastAPI:
    """The ASGI app: API under /api/v1, the page at /, metrics at /metrics."""
    settings = settings or (client.settings if client else load_settings())
    api = api or ApiSettings()
    tokens = Tokens.of(api)  # no tokens: refuse to start rather than refuse everyone
    owned = client is None
    if client is None:
        from tickwork.context import ensure_schema

        ensure_schema(settings)
        client = WholeIds(settings)
    else:  # a path's id is whole: a start is looked up among what a token sees (`id_prefix`)
        client = client.whole_ids()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if owned:
            client.close()

    app = FastAPI(
        title="tickwork",
        version=version(),
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/api/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(clean_parameters)],
    )
    app.state.client = client
    app.state.tokens = tokens
    app.state.api_settings = api
    client.tenants.table()  # a missing or broken tenants file stops the start, named
    app.state.store_collector = StoreCollector(
        client.store, clock=client.clock, tenants=labels_of(client)
    )
    app.state.multiproc_dir = multiproc_dir or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    errors.install(app)
    # added last runs first: count, then the token, then the size, before any body is read
    app.add_middleware(BodyLimit, limit=api.api_max_body_bytes)
    app.add_middleware(TokenGate, tokens=tokens)
    app.add_middleware(PageHeaders)
    app.add_middleware(metrics.CountRequests)
    app.add_middleware(BodyTimeout, timeout_s=api.api_body_timeout_s)  # outermost: every read
    app.include_router(sessions.router)
    app.include_router(forks.router)
    app.include_router(stream.router)
    app.include_router(dead_letters.router)
    app.include_router(metrics.router)
    app.include_router(health.router)

    generated = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = state_clean_text(generated())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    shown = page_html()

    # the file's own path too: served raw, `JSON.parse("__BOUNDS__")` threw in admission.js
    @app.get("/", include_in_schema=False)
    @app.get("/static/index.html", include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(shown, headers={"Cache-Control": "no-cache"})

    @app.get("/api/v1/docs", include_in_schema=False)
    async def docs() -> FileResponse:
        return FileResponse(STATIC / "docs.html", headers={"Cache-Control": "no-cache"})

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:
        # the pages name their icon; this is for whatever asks for the usual place anyway
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    app.mount("/static/swagger", StaticFiles(directory=swagger_ui_path), name="swagger")
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
