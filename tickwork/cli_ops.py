"""Running tickwork: `worker`, `relay`, `db upgrade` and `config`."""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from . import options, render, views
from .context import ensure_schema, load_settings


class Pool(StrEnum):
    PREFORK = "prefork"  #: processes; a crash takes one child, not the worker
    THREADS = "threads"  #: threads of one process; the default for the embedded broker
    SOLO = "solo"  #: one tick at a time in the main thread


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(relay)
    db = typer.Typer(no_args_is_help=True, help="The database schema.")
    db.command()(upgrade)
    app.add_typer(db, name="db")
    app.command()(config)


def worker(
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", min=1, help="Ticks run at once [default: CPU count]."),
    ] = None,
    pool: Annotated[
        Pool | None,
        typer.Option(
            "--pool", "-P", help="[default: threads for the embedded broker, else prefork]"
        ),
    ] = None,
    dead_letters: Annotated[
        bool,
        typer.Option(
            "--dead-letters/--no-dead-letters",
            help="Also consume the dead-letter queue: log and count each dead letter.",
        ),
    ] = True,
    loglevel: Annotated[str, typer.Option("--loglevel", "-l", help="Celery's log level.")] = "INFO",
    hostname: Annotated[
        str | None, typer.Option("--hostname", "-n", help="The node name [default: celery@HOST].")
    ] = None,
) -> None:
    """Run a Celery worker for the tick queue and the dead-letter queue; the relay runs
    inside it."""
    settings = load_settings()
    ensure_schema(settings)
    queues = [settings.queue] + ([settings.dead_letter_queue] if dead_letters else [])
    chosen = pool or (Pool.THREADS if settings.embedded_broker else Pool.PREFORK)
    if chosen is Pool.PREFORK:
        _metrics_folder(settings.state_dir, hostname)
    from worker.app import make_app  # after the metrics folder is chosen

    argv = ["worker", "--queues", ",".join(queues), "--pool", chosen.value, "--loglevel", loglevel]
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    if hostname:
        argv += ["--hostname", hostname]
    if settings.embedded_broker:
        # the filesystem transport has no fanout exchange for these
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    code = make_app(settings).start(argv)
    if code:
        raise typer.Exit(code)


def _metrics_folder(state_dir: Path, hostname: str | None) -> None:
    """Prefork children count their ticks in their own processes; prometheus_client adds
    them up from files in PROMETHEUS_MULTIPROC_DIR, which must be set before it is first
    imported. Unless the operator set one, it is `<state dir>/metrics/<node>`, emptied
    here so counts of a previous run do not add up with this one's."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    node = re.sub(r"[^A-Za-z0-9_.@-]", "_", hostname or f"celery@{socket.gethostname()}")
    folder = (state_dir / "metrics" / node).absolute()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)


def relay(
    once: Annotated[
        bool,
        typer.Option(
            "--once", help="One pass, then exit [default: every TICKWORK_RELAY_PERIOD_S]."
        ),
    ] = False,
    json_output: options.Json = False,
) -> None:
    """Publish delayed ticks now due and ticks whose message may be lost, and revive
    sessions whose worker died.

    Workers run the relay themselves; this runs it alone, e.g. from cron with --once.
    """
    from worker.app import make_app, runtime
    from worker.relay import RelayThread, relay_once

    settings = load_settings()
    ensure_schema(settings)
    rt = runtime(make_app(settings, relay=False))
    try:
        if once:
            done = relay_once(rt)
            if json_output:
                views.emit(
                    {
                        "republished": done.republished,
                        "lease_expiries": done.lease_expiries,
                        "delayed": done.delayed,
                    }
                )
            else:
                render.show(
                    Text(
                        f"republished {done.republished} ticks, revived "
                        f"{done.lease_expiries} sessions with expired leases, published "
                        f"{done.delayed} delayed ticks now due"
                    )
                )
            return
        thread = RelayThread(rt)
        render.show(Text(f"relay: a pass every {settings.relay_period_s:g}s; Ctrl-C stops it"))
        thread.start()
        try:
            while thread.is_alive():
                time.sleep(0.5)
        finally:
            thread.stop()
    finally:
        rt.store.engine.dispose()


def upgrade(json_output: options.Json = False) -> None:
    """Create or migrate the schema of the database in TICKWORK_DATABASE_URL."""
    from alembic.script import ScriptDirectory

    from store.migrate import alembic_config
    from store.migrate import upgrade as migrate
    from worker.settings import mask

    settings = load_settings()
    url = settings.db_url
    # a new SQLite file appears whole, so commands running meanwhile never see half a schema
    ensure_schema(settings)
    migrate(url)
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    shown = mask(url, [])
    if json_output:
        views.emit({"database_url": shown, "revision": head})
    else:
        render.show(Text(f"database {shown} is at schema revision {head}"))


def config(json_output: options.Json = False) -> None:
    """Show the settings in force, secrets masked."""
    settings = load_settings()
    shown = {k: _masked(v, settings.secret_patterns) for k, v in settings.masked().items()}
    if json_output:
        views.emit(shown)
    else:
        render.show(render.settings_table(shown))


def _masked(value: Any, patterns: list[str]) -> Any:
    """`Settings.masked` masks top-level strings; this reaches into lists and mappings too."""
    from worker.settings import mask

    if isinstance(value, str):
        return mask(value, patterns)
    if isinstance(value, list):
        return [_masked(v, patterns) for v in value]
    if isinstance(value, dict):
        return {k: _masked(v, patterns) for k, v in value.items()}
    return value
