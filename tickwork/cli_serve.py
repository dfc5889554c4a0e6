"""`tickwork serve`: the HTTP API, the approvals page and /metrics in one process."""

from __future__ import annotations

import errno
import socket
from enum import StrEnum
from typing import Annotated

import typer
from rich.text import Text

from tickwork.fsm.errors import InvalidInput, TickworkError

from . import render
from .context import load_settings


class LogLevel(StrEnum):
    """uvicorn's log levels."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    DEBUG = "debug"
    TRACE = "trace"


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
    log_level: Annotated[
        LogLevel, typer.Option(case_sensitive=False, help="uvicorn's log level.")
    ] = LogLevel.INFO,
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
    host = host or api.api_host
    listening = _listen(host, port if port is not None else api.api_port)
    port = listening.getsockname()[1]  # the one the system chose for --port 0
    render.show(Text(f"tickwork API and page on http://{host}:{port}/ (Ctrl-C stops it)"))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level.value,
        http=guarded_protocol(
            header_timeout_s=api.api_header_timeout_s, max_per_ip=api.api_max_connections_per_ip
        ),
        proxy_headers=True,
        timeout_keep_alive=api.api_keepalive_s,
        timeout_graceful_shutdown=5,
        ws="none",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    server.run(sockets=[listening])
    if not server.started:  # the app's startup failed: uvicorn has logged why
        raise typer.Exit(1)


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port for uvicorn to serve on; an error naming the address and
    what to change if it cannot be, said before the server says it serves there."""
    where = f"cannot listen on {host}:{port}"
    how = "give --host (or TICKWORK_API_HOST) an address of this machine, e.g. 127.0.0.1 or 0.0.0.0"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidInput(f"{where}: {getattr(exc, 'strerror', None) or exc}; {how}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise TickworkError(
                f"{where}: the address is in use (another `tickwork serve`?); stop what "
                "listens there, or give another --port (or TICKWORK_API_PORT)"
            ) from None
        if exc.errno == errno.EACCES:
            how = "give --port (or TICKWORK_API_PORT) above 1023, which needs no privilege"
        raise InvalidInput(f"{where}: {exc.strerror or exc}; {how}") from None
    sock.set_inheritable(True)
    return sock
