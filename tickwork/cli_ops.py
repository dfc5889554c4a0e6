"""Running tickwork: `worker`, `relay`, `db upgrade|current|history|downgrade` and `config`."""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import tempfile
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from tickwork.fsm.errors import BrokerUnavailable, ConfigurationError
from tickwork.fsm.wording import counted

from . import options, render, views
from .context import ensure_schema, load_settings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pydantic_settings import BaseSettings

    from tickwork.worker.config.settings import Settings

    from .api.settings import ApiSettings


class Pool(StrEnum):
    PREFORK = "prefork"  #: processes; a crash takes one child, not the worker
    THREADS = "threads"  #: threads of one process: for model-bound work, and the embedded broker
    SOLO = "solo"  #: one tick at a time in the main thread


#: ticks at once of `--pool threads` on a server broker when `-c` is not given: a
#: model-bound worker waits on model calls, so one process keeps hundreds in flight
#: (ops/bench/in_flight.py; docs/OPERATIONS.md, "Sizing a fleet")
MODEL_BOUND_THREADS = 250
#: the most ticks a worker runs at once: well past what one host's threads (or processes)
#: can hold; more is a typo, which Celery would try to start
MAX_CONCURRENCY = 10_000


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command()(relay)
    db = typer.Typer(no_args_is_help=True, help="The database schema: its revision and migrations.")
    db.command()(upgrade)
    db.command()(current)
    db.command()(history)
    # `-1` (one back) is a revision, not an unknown option
    db.command(context_settings={"ignore_unknown_options": True})(downgrade)
    app.add_typer(db, name="db")
    app.command()(config)


def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "-c",
            min=1,
            max=MAX_CONCURRENCY,
            help="Ticks run at once.",
            show_default=f"{MODEL_BOUND_THREADS} for --pool threads on a server broker, else CPUs",
        ),
    ] = None,
    pool: Annotated[
        Pool | None,
        typer.Option(
            "--pool",
            "-P",
            help="How ticks run: prefork (processes), threads (for model-bound workers: "
            "hundreds of sessions in flight per process), or solo (one at a time).",
            show_default="threads for the embedded broker, else prefork",
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
        str | None,
        typer.Option(
            "--hostname",
            "-n",
            help="The node name, as `celery inspect` shows it; unique per worker by default.",
            show_default="tickwork-PID@HOST",
        ),
    ] = None,
) -> None:
    """Run a Celery worker for the tick queue and the dead-letter queue; the relay runs
    inside it."""
    settings = load_settings()
    chosen = pool or (Pool.THREADS if settings.embedded_broker else Pool.PREFORK)
    # Celery's default, celery@HOST, is every worker of a host: `celery inspect` could not
    # tell them apart
    from celery.utils.nodenames import host_format

    # `%h` (the host's name) and Celery's other node name escapes, expanded here so the
    # metrics folder is named as `celery inspect` shows the worker
    node = host_format(hostname) if hostname else f"tickwork-{os.getpid()}@{socket.gethostname()}"
    if chosen is Pool.PREFORK:
        _metrics_folder(settings.state_dir, node)
    # imported after the metrics folder is chosen: prometheus_client reads it at import
    from tickwork.worker.config.settings import read_settings
    from tickwork.worker.tick.app import make_app

    for kind in worker_sections():
        read_settings(kind)  # a bad value stops the worker now, not as a warning later
    # after every setting is checked: a refused one makes nothing
    writable_folder(settings.state_dir, "TICKWORK_STATE_DIR", settings.state_dir)
    ensure_schema(settings)
    check_what_ticks_load(settings)
    queues = [settings.queue] + ([settings.dead_letter_queue] if dead_letters else [])

    argv = ["worker", "--queues", ",".join(queues), "--pool", chosen.value, "--loglevel", loglevel]
    if not concurrency and chosen is Pool.THREADS and not settings.embedded_broker:
        concurrency = MODEL_BOUND_THREADS
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    argv += ["--hostname", node]
    if settings.embedded_broker:
        # the filesystem transport has no fanout exchange for these
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    app = make_app(settings)
    if not settings.embedded_broker:
        _say_if_the_broker_is_away(app, settings)
    code, stopped_by = _run_celery(app, argv)
    if stopped_by == "SIGINT":  # Ctrl-C: Celery says 1, as for a failure
        raise typer.Exit(130)
    if code:
        raise typer.Exit(code)


def _run_celery(app: Any, argv: list[str]) -> tuple[int, str | None]:
    """Celery's command line on `argv`: its exit code, and the signal that stopped the
    worker (None if none did). `app.start` drops the code, so a worker that stopped on an
    unrecoverable error (a queue declared with another type) exited 0."""
    import click
    from celery.bin.celery import celery as command
    from celery.signals import worker_shutting_down

    signals: list[str] = []

    def note(sig: str = "", **_: Any) -> None:
        signals.append(sig)

    worker_shutting_down.connect(note, weak=False)
    command.params[0].default = app
    try:
        code = command.main(args=argv, standalone_mode=False)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.ClickException as exc:  # Celery's Click, not Typer's: no handler
        from tickwork.fsm.errors import InvalidInput

        raise InvalidInput(
            f"Celery refused the worker's options: {exc.format_message()} (see `tickwork "
            "worker --help`)"
        ) from None
    finally:
        command.params[0].default = None
        worker_shutting_down.disconnect(note)
    return (code if isinstance(code, int) else 0), (signals[0] if signals else None)


#: how often, and how far apart, a broker's refusal that no retry mends is asked again before
#: the worker gives up: a deployment may make the virtual host, user or database just after
#: the broker answers (a one-shot `rabbitmqctl add_vhost` beside it)
REFUSAL_TRIES = 5
REFUSAL_PAUSE_S = 2.0


def _say_if_the_broker_is_away(
    app: Any,
    settings: Settings,
    *,
    probe: Callable[[Any], str | None] | None = None,
    pause: Callable[[float], None] = time.sleep,
) -> None:
    """One line on stderr, naming the setting, if the broker does not answer now: the worker
    starts anyway and Celery keeps trying to connect (a broker may start after it), but its
    own retry lines do not say which setting points there. A URL no retry mends (a Redis
    database the server has not, a login the broker refuses, a RabbitMQ virtual host it has
    not) is asked again REFUSAL_TRIES times REFUSAL_PAUSE_S apart, saying so, and if it is
    still refused it is a ConfigurationError: the worker does not start. `probe`: what
    asks the broker (`broker_away`)."""
    from tickwork.worker.config.brokers import refused
    from tickwork.worker.config.settings import mask
    from tickwork.worker.tick.app import broker_away

    ask = probe or broker_away
    why = ask(app)
    wrong = None if why is None else refused(settings.broker_url, why)
    for tried in range(REFUSAL_TRIES - 1):
        if wrong is None:
            break
        if tried == 0:
            sys.stderr.write(
                f"warning: {wrong}; asking again for {REFUSAL_PAUSE_S * (REFUSAL_TRIES - 1):g} "
                "s before the worker gives up\n"
            )
            sys.stderr.flush()
        pause(REFUSAL_PAUSE_S)
        why = ask(app)
        wrong = None if why is None else refused(settings.broker_url, why)
    if wrong is not None:
        raise ConfigurationError(wrong)
    if why is not None:
        sys.stderr.write(
            f"warning: the broker at {mask(settings.broker_url, [])} (TICKWORK_BROKER_URL) "
            f"does not answer ({why}); the worker starts and keeps trying to connect\n"
        )
        sys.stderr.flush()


def worker_sections() -> tuple[type[BaseSettings], ...]:
    """The settings sections a worker reads besides the deployment's, each from its one
    owner: /metrics, the webhook, tracing, retention."""
    from tickwork.worker.config.settings import MetricsSettings, WebhookSettings
    from tickwork.worker.observers.tracing import TracingSettings
    from tickwork.worker.tick.retention import RetentionSettings

    return (MetricsSettings, WebhookSettings, TracingSettings, RetentionSettings)


def check_what_ticks_load(settings: Settings) -> None:
    """The database's schema, the job kinds of TICKWORK_IMPORTS and the built-in ones with
    their roles (TICKWORK_ROLES_FILE's too), the tenants file and the artifact store,
    checked once before the worker starts: one it could not load would fail every session
    it ticks (or, without a schema or with a bad tenants file, every relay pass)."""
    from tickwork.fsm.errors import ConfigurationError
    from tickwork.store.artifacts import check_reachable
    from tickwork.store.migrate import behind, current, head
    from tickwork.worker.config.settings import mask
    from tickwork.worker.config.stores import build_store

    at = current(settings.db_url)
    if at is None:
        raise ConfigurationError(
            f"the database {mask(settings.db_url, [])} has no tickwork schema; run "
            "`tickwork db upgrade` before starting workers"
        )
    if behind(settings.db_url, at):
        # its relay would fail every pass and its ticks every save, on tables it lacks; a
        # database newer than the code is fine (old workers run on beside a migration)
        raise ConfigurationError(
            f"the database {mask(settings.db_url, [])} is at schema revision {at}, older than "
            f"this tickwork's ({head(settings.db_url)}); run `tickwork db upgrade` before "
            "starting workers (`tickwork runbook upgrades`)"
        )
    check_kinds(settings)
    from tickwork.worker.config.settings import read_settings
    from tickwork.worker.tick.retention import RetentionSettings

    variable = "TICKWORK_WORKSPACES_DIR" if settings.workspaces_dir else "TICKWORK_STATE_DIR"
    given = settings.workspaces_dir or settings.state_dir
    writable_folder(settings.workspaces_path, variable, given)  # every repair tick's files
    # first the artifact store, which the archive's default derives from: its error names it
    check_reachable(settings.artifacts_url)
    read_settings(RetentionSettings).archive(settings)  # an archive it cannot open, too
    from tickwork.worker.config.tenants import Tenants, TenantSettings

    # a tenants file it cannot take would stop every relay pass (no admission, no republish)
    Tenants.of(settings.section(TenantSettings))
    if settings.artifacts_url:
        store = build_store(settings)
        try:
            artifacts = store.artifacts(settings.artifacts_url)
            getattr(artifacts, "close", lambda: None)()
        finally:
            store.close()


def check_kinds(settings: Settings) -> None:
    """The job kinds of TICKWORK_IMPORTS and the built-in ones, each with its roles
    (TICKWORK_ROLES_FILE's over its own), and the model providers of TICKWORK_IMPORTS:
    ConfigurationError naming the first that a worker could not load."""
    from tickwork.fsm.errors import ConfigurationError
    from tickwork.worker.config.imports import load_object
    from tickwork.worker.config.settings import RoleSettings
    from tickwork.worker.jobs import BUILTIN, Jobs
    from tickwork.worker.models.providers import Provider, Providers

    jobs = Jobs(settings.imports, roles_file=settings.section(RoleSettings).roles_file)
    named = dict(BUILTIN)  # a kind's name -> its spec: a session is found by the name
    for spec in settings.imports:
        if not isinstance(load_object(spec), Provider):
            name = jobs.get(spec).name
            if named.setdefault(name, spec) != spec:
                first = named[name] + (" (built in)" if name in BUILTIN else "")
                raise ConfigurationError(
                    f"TICKWORK_IMPORTS: {spec} is a job kind named {name!r}, as {first} "
                    "is; sessions find their kind by its name, so only one of them would ever "
                    "run: give each kind its own name"
                )
            jobs.roles(name)  # a bad roles file stops the worker here
    for name in BUILTIN:
        jobs.roles(name)
    _ = Providers(settings.imports).known  # a provider that cannot register stops it too


def _metrics_folder(state_dir: Path, node: str) -> None:
    """Prefork children count their ticks in their own processes; prometheus_client adds
    them up from files in PROMETHEUS_MULTIPROC_DIR, which must be set before it is first
    imported. Unless the operator set one, it is `<state dir>/metrics/<node>`, emptied
    here so counts of a previous run do not add up with this one's; the folders of this
    host's default-named workers that are gone are removed."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    metrics = (state_dir / "metrics").absolute()
    folder = metrics / _file_name(node)
    shutil.rmtree(folder, ignore_errors=True)
    writable_folder(folder, "TICKWORK_STATE_DIR", state_dir)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    mine = re.compile(rf"tickwork-(\d+)@{re.escape(_file_name(socket.gethostname()))}")
    for other in metrics.iterdir():
        found = mine.fullmatch(other.name)
        if found and other != folder and not _alive(int(found[1])):
            shutil.rmtree(other, ignore_errors=True)


def _file_name(node: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", node)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def writable_folder(folder: Path, variable: str, given: Path) -> None:
    """Make `folder` (under `given`, the value of `variable`) and check this process can
    write in it; a ConfigurationError naming the variable if not. A worker checks its own
    folders before it starts: one it could not write failed every session it ticked."""
    from tickwork.fsm.errors import ConfigurationError

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as exc:
        raise ConfigurationError(
            f"{variable}={given}: cannot make or write the folder {folder} "
            f"({exc.strerror or exc}); point {variable} at a folder this worker's user can "
            "write"
        ) from None


def relay(
    once: Annotated[
        bool,
        typer.Option(
            "--once", help="One pass, then exit.", show_default="every TICKWORK_RELAY_PERIOD_S"
        ),
    ] = False,
    json_output: options.Json = False,
) -> None:
    """Publish delayed ticks now due and ticks whose message may be lost, and revive
    sessions whose worker died.

    Workers run the relay themselves; this runs it alone, e.g. from cron with --once (every
    pass the workers' relay runs, once: a sign of life seen gone is looked at again after
    TICKWORK_LIVENESS_GRACE_S).
    """
    from tickwork.worker.tick.app import make_app, runtime
    from tickwork.worker.tick.relay import RelayThread, relay_all_once

    settings = load_settings()
    ensure_schema(settings)
    app = make_app(settings, relay=False)
    rt = runtime(app)
    try:
        if once:
            done = relay_all_once(rt)
            if json_output:
                views.emit(
                    {
                        "republished": done.republished,
                        "lease_expiries": done.lease_expiries,
                        "delayed": done.delayed,
                        "taken_over": done.taken_over,
                        "admitted": done.admitted,
                        "unsent": done.unsent,
                    }
                )
            else:
                render.show(
                    Text(
                        f"republished {counted(done.republished, 'tick')}, revived "
                        f"{counted(done.lease_expiries, 'session')} with expired leases, took "
                        f"over {counted(done.taken_over, 'session')} whose worker is gone, "
                        f"published {counted(done.delayed, 'delayed tick')} now due, admitted "
                        f"{counted(done.admitted, 'queued session')}"
                    )
                )
            if done.unsent or rt.cannot_publish:  # a takeover's ticks count no unsent
                from tickwork.worker.config.settings import mask

                raise BrokerUnavailable(
                    f"the broker at {mask(settings.broker_url, [])} (TICKWORK_BROKER_URL) did "
                    f"not take {counted(done.unsent, 'tick') if done.unsent else 'a tick'}; "
                    "they stay in the outbox, due at once: start "
                    "the broker or correct TICKWORK_BROKER_URL, then run `tickwork relay "
                    "--once` again (the workers' relays publish them once it answers)"
                )
            return
        thread = RelayThread(rt)
        render.show(Text(f"relay: a pass every {settings.relay_period_s:g}s; Ctrl-C stops it"))
        thread.start()
        for background in rt.background:  # with TICKWORK_WEBHOOK_URL: approval cards too
            background.start()
        try:
            while thread.is_alive():
                time.sleep(0.5)
        finally:
            thread.stop()
            for background in rt.background:
                background.stop()
    finally:
        app.close()  # the runtime's sign of life and threads too, and its store


def upgrade(json_output: options.Json = False) -> None:
    """Create or migrate the schema of the database in TICKWORK_DATABASE_URL."""
    from tickwork.store.migrate import head as head_of
    from tickwork.store.migrate import upgrade as migrate
    from tickwork.worker.config.secrets import mask

    settings = load_settings()
    url = settings.db_url
    # a new SQLite file appears whole, so commands running meanwhile never see half a schema
    ensure_schema(settings)
    migrate(url)
    head = head_of(url)
    shown = mask(url, [])
    if json_output:
        views.emit({"database_url": shown, "revision": head})
    else:
        render.show(Text(f"database {shown} is at schema revision {head}"))


def current(json_output: options.Json = False) -> None:
    """Show the schema revision the database is at, and the newest this code knows.

    Exits 1 if the database has no tickwork schema at all."""
    from tickwork.fsm.errors import NoDatabase
    from tickwork.store.migrate import current as revision_of
    from tickwork.store.migrate import head
    from tickwork.worker.config.secrets import mask

    settings = load_settings()
    url = settings.db_url
    at = None if _no_sqlite_file(url) else revision_of(url)
    newest = head(url)
    shown = mask(url, [])
    if json_output:
        views.emit(
            {"database_url": shown, "revision": at, "head": newest, "up_to_date": at == newest}
        )
    if at is None:
        # a script reads exit 0 as "migrated": no schema at all is a fault it must see
        raise NoDatabase(f"database {shown} has no tickwork schema; run `tickwork db upgrade`")
    if json_output:
        return
    if at == newest:
        render.show(Text(f"database {shown} is at schema revision {at}, the newest"))
    else:
        render.show(
            Text(
                f"database {shown} is at schema revision {at}; this code's newest is {newest}: "
                "run `tickwork db upgrade` (or upgrade tickwork, if the database is newer)",
                "yellow",
            )
        )


def history(json_output: options.Json = False) -> None:
    """List the schema revisions this code knows, newest first, marking the database's."""
    from tickwork.store.migrate import current as revision_of
    from tickwork.store.migrate import history as revisions

    settings = load_settings()
    url = settings.db_url
    at = None if _no_sqlite_file(url) else revision_of(url)
    found = [
        {
            "revision": r.id,
            "follows": list(r.follows),
            "doc": r.doc,
            "head": r.is_head,
            "current": r.id == at,
        }
        for r in revisions(url)
    ]
    if json_output:
        views.emit(found)
        return
    for r in found:
        marks = [m for m, on in (("head", r["head"]), ("current", r["current"])) if on]
        follows = ", ".join(r["follows"]) or "base"
        line = Text(f"{follows} -> {r['revision']}", style="bold" if r["current"] else "")
        line.append(f" ({', '.join(marks)})" if marks else "", style="green")
        line.append(f"  {r['doc']}")
        render.show(line)
    if at is None:
        render.show(Text("the database has no tickwork schema yet", style="yellow"))


def downgrade(
    revision: Annotated[
        str,
        typer.Argument(
            metavar="REV",
            help="The revision to go back to (see `tickwork db history`), `-1` for one back, "
            "or `base` for none.",
        ),
    ],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask: the tables and columns go.")
    ] = False,
    json_output: options.Json = False,
) -> None:
    """Migrate the schema back to REV: what later revisions added is dropped, with its data.

    Stop the workers first, and take a backup (`tickwork runbook backups`)."""
    import sys

    from rich.prompt import Confirm

    from tickwork.fsm.errors import InvalidInput
    from tickwork.store.migrate import current as revision_of
    from tickwork.store.migrate import downgrade as migrate_down
    from tickwork.worker.config.secrets import mask

    settings = load_settings()
    url = settings.db_url
    shown = mask(url, [])
    if _no_sqlite_file(url) or revision_of(url) is None:
        raise InvalidInput(f"database {shown} has no tickwork schema: nothing to downgrade")
    if not yes:
        if not sys.stdin.isatty():
            raise InvalidInput(
                "a downgrade drops what later revisions added, with its data; "
                "pass --yes to go ahead (after a backup)"
            )
        question = f"Downgrade {shown} to {revision}, dropping what later revisions added?"
        if not Confirm.ask(question, default=False):
            raise typer.Exit(1)
    migrate_down(url, revision)
    at = revision_of(url)
    if json_output:
        views.emit({"database_url": shown, "revision": at})
    else:
        render.show(Text(f"database {shown} is at schema revision {at or 'base (no schema)'}"))


def _no_sqlite_file(url: str) -> bool:
    """Whether `url` is a SQLite file that does not exist (looking must not make it)."""
    from tickwork.store.urls import sqlite_file

    path = sqlite_file(url)
    return path is not None and not path.exists()


def _check_named_files(settings: Settings, api: ApiSettings) -> None:
    """Read the files the settings name as the processes that use them do: a tenants, roles
    or tokens file they would refuse is refused here too (ConfigurationError naming it), so
    an edit can be checked before the workers and the API read it (they keep the old one)."""
    from tickwork.worker.config.settings import RoleSettings
    from tickwork.worker.config.tenants import Tenants, TenantSettings

    from .api.auth import index

    Tenants.of(settings.section(TenantSettings))
    if settings.section(RoleSettings).roles_file is not None:
        check_kinds(settings)  # the roles of TICKWORK_IMPORTS' kinds too, as a worker's
    index(api.tokens())


def config(json_output: options.Json = False) -> None:
    """Show every setting in force, secrets masked: the deployment's, a worker's /metrics and
    webhooks, and `tickwork serve`'s."""
    from tickwork.worker.config.settings import read_settings
    from tickwork.worker.observers.tracing import TracingSettings
    from tickwork.worker.observers.tracing import status as tracing_status
    from tickwork.worker.observers.webhooks import masked_url

    from .api.settings import ApiSettings

    settings = load_settings()
    others = [read_settings(kind) for kind in (*worker_sections(), ApiSettings)]
    _check_named_files(settings, next(o for o in others if isinstance(o, ApiSettings)))
    shown = settings.masked(*others)
    if shown.get("webhook_url"):  # receivers keep their secret in the path, as logs know
        shown["webhook_url"] = masked_url(shown["webhook_url"])
    tracing = tracing_status(read_settings(TracingSettings))
    if json_output:
        views.emit({**shown, "tracing": tracing})
    else:
        render.show(render.settings_table(shown))
        render.show(Text(f"tracing: {tracing}"))
    for name, like in unknown_variables(os.environ, shown):
        guess = f"; did you mean {like}?" if like else ";"
        render.note(
            f"{name} is no tickwork setting and is ignored{guess} (`tickwork config` lists "
            "every setting)"
        )


#: TICKWORK_ variables that are no setting: the remote client's, and what a repair's
#: commands are given
NOT_SETTINGS = frozenset({"SERVER", "TOKEN", "SERVER_TIMEOUT_S", "SESSION_ID", "IDEMPOTENCY_KEY"})


def unknown_variables(
    environ: Mapping[str, str], settings: Mapping[str, Any]
) -> list[tuple[str, str | None]]:
    """Each TICKWORK_ variable that names no setting (a typo, ignored by every process),
    with the setting's variable it is most like, if one is."""
    import difflib

    known = {f"TICKWORK_{name.upper()}" for name in (*settings, *NOT_SETTINGS)}
    found = []
    for name in sorted(environ):
        if not name.startswith("TICKWORK_") or name.startswith("TICKWORK_TEST_"):
            continue
        if name in known or name.split("__", 1)[0] in known:  # a nested one: BUDGETS__MAX_STEPS
            continue
        like = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        found.append((name, like[0] if like else None))
    return found
