"""`tickwork serve`: the HTTP API, the approvals page and /metrics in one process."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from . import render
from .context import load_settings


def register(app: typer.Typer) -> None:
    app.command()(serve)


def serve(
    host: Annotated[
        str | None,
        typer.Option(
            help="The address to listen on.", show_default="$TICKWORK_API_HOST or 127.0.0.1"
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="The port.", show_default="$TICKWORK_API_PORT or 8000"),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn's log level.")] = "info",
) -> None:
    """Serve the HTTP API (/api/v1, docs at /api/v1/docs), the page for approvals and dead
    letters (/), and Prometheus metrics (/metrics). Tokens come from TICKWORK_API_TOKENS or
    TICKWORK_API_TOKENS_FILE."""
    import uvicorn

    from tickwork.worker.config.settings import read_settings

    from .api import ApiSettings, make_api
    from .api.connections import guarded_protocol

    api = read_settings(ApiSettings)
    app = make_api(load_settings(), api)
    where = f"http://{host or api.api_host}:{port if port is not None else api.api_port}/"
    render.show(Text(f"tickwork API and page on {where} (Ctrl-C stops it)"))
    uvicorn.run(
        app,
        host=host or api.api_host,
        port=port if port is not None else api.api_port,
        log_level=log_level,
        http=guarded_protocol(
            header_timeout_s=api.api_header_timeout_s, max_per_ip=api.api_max_connections_per_ip
        ),
        proxy_headers=True,
        timeout_keep_alive=api.api_keepalive_s,
        timeout_graceful_shutdown=5,
        ws="none",
        lifespan="on",
    )
