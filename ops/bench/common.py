"""Shared helpers of the benchmarks: a database per run, workers, a fake model server,
timers on the store, and the figures' statistics.

Every benchmark creates its own database (`tickwork_bench_<pid>_...`) and Celery queue and
removes them, and stops every process it started, by its own process group.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from sqlalchemy import Engine, text  # noqa: E402

from ops.bench.fake_chat import FakeChat  # noqa: E402
from ops.bench.meters import StoreTimer, WriteCounter  # noqa: E402

__all__ = ["FakeChat", "StoreTimer", "WriteCounter"]

PG_ADMIN = os.environ.get("TICKWORK_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TICKWORK_BENCH_REDIS", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("TICKWORK_BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672//")
TICKWORK_TABLES = (
    "tickwork_sessions",
    "tickwork_steps",
    "tickwork_calls",
    "tickwork_observations",
    "tickwork_decisions",
    "tickwork_events",
    "tickwork_outbox",
    "tickwork_dead_letters",
    "tickwork_dead_letter_counts",
    "tickwork_dead_letter_totals",
)


@contextmanager
def database(tag: str, *, migrate: bool = True, keep: bool = False) -> Iterator[str]:
    """A fresh database for one benchmark run (tickwork's schema unless `migrate=False`),
    dropped afterwards unless `keep`; yields its SQLAlchemy URL."""
    name = f"tickwork_bench_{os.getpid()}_{tag}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    try:
        if migrate:
            from tickwork.store.migrate import upgrade

            upgrade(url)
        yield url
    finally:
        if not keep:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def plain_url(url: str) -> str:
    """A libpq URL (no `+psycopg`)."""
    return url.replace("postgresql+psycopg://", "postgresql://")


def queue_name(tag: str) -> str:
    return f"tickwork.bench.{tag}.{uuid.uuid4().hex[:8]}"


def settings(db_url: str, tag: str, **overrides: Any) -> Any:
    """tickwork settings on `db_url` and Redis with a queue of its own; the rest default."""
    from tickwork.worker.config.settings import Settings

    queue = queue_name(tag)
    overrides.setdefault("broker_url", REDIS_URL)
    return Settings(
        database_url=db_url,
        queue=queue,
        dead_letter_queue=f"{queue}.dead",
        state_dir=Path(tempfile.gettempdir()) / f"tickwork-bench-{os.getpid()}",
        **overrides,
    )


def worker_env(s: Any, **extra: str) -> dict[str, str]:
    """The environment of a `celery worker` for settings `s`; only what differs from the
    defaults is passed, so the workers run with default settings otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    env.update(
        PYTHONPATH=str(ROOT),
        TICKWORK_DATABASE_URL=s.database_url,
        TICKWORK_BROKER_URL=s.broker_url,
        TICKWORK_QUEUE=s.queue,
        TICKWORK_DEAD_LETTER_QUEUE=s.dead_letter_queue,
        TICKWORK_STATE_DIR=str(s.state_dir),
    )
    env.update(extra)
    return env


class Worker:
    """A `celery worker` subprocess in its own process group."""

    def __init__(
        self,
        app: str,
        queue: str,
        env: dict[str, str],
        *,
        pool: str = "prefork",
        concurrency: int = 1,
        loglevel: str = "WARNING",
        command: list[str] | None = None,
    ) -> None:
        """`celery -A app worker` on `queue`, or `command` instead (another worker's command
        line, such as `tickwork worker`), with `env`."""
        self.log = Path(tempfile.gettempdir()) / f"tickwork-bench-worker-{uuid.uuid4().hex[:8]}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                command
                or [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    app,
                    "worker",
                    "--pool",
                    pool,
                    "--concurrency",
                    str(concurrency),
                    "-Q",
                    queue,
                    "--loglevel",
                    loglevel,
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "--hostname",
                    f"bench-{uuid.uuid4().hex[:8]}@%h",  # several workers on one host
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Waits for Celery's `ready.` line (needs loglevel INFO)."""
        until(
            lambda: b" ready." in self.log.read_bytes(),
            timeout=timeout,
            what="worker ready",
            check=self.check,
        )

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker exited {self.proc.returncode}: {self.tail()}")

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def kill(self) -> float:
        """SIGKILL the whole worker; returns the time it was sent."""
        at = time.time()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        return at

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.unlink(missing_ok=True)


@contextmanager
def worker(app: str, queue: str, env: dict[str, str], **kw: Any) -> Iterator[Worker]:
    w = Worker(app, queue, env, **kw)
    try:
        yield w
    finally:
        w.stop()


def until(
    predicate: Callable[[], Any],
    *,
    timeout: float = 60.0,
    poll: float = 0.02,
    what: str = "condition",
    check: Callable[[], None] | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if check is not None:
            check()
        time.sleep(poll)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def client(s: Any) -> Any:
    from tickwork import Tickwork

    return Tickwork(s)


def submit(tw: Any, model: str, *, session_id: str | None = None) -> str:
    from ops.bench.kinds import BUDGETS, KIND

    return str(tw.submit(KIND, {}, model=model, budgets=BUDGETS, session_id=session_id).id)


def create(tw: Any, model: str) -> str:
    """A session stored with its outbox row but not published yet (publish it with
    `tw.publish(session_id, 0)`), so that a measurement can start all sessions at once."""
    publish = tw.publish
    tw.publish = lambda *_: None
    try:
        return submit(tw, model)
    finally:
        tw.publish = publish


def stats(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def show(name: str, values: list[float], unit: str = "", digits: int = 2) -> str:
    s = stats(values)
    return (
        f"{name}: median {s['median']:.{digits}f}{unit} "
        f"(min {s['min']:.{digits}f}, max {s['max']:.{digits}f}, n={s['n']})"
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def emit(name: str, figures: dict[str, Any]) -> None:
    """Print a benchmark's figures as one JSON line (run_all collects them)."""
    print(f"RESULT {name} " + json.dumps(figures, default=str), flush=True)


def machine() -> dict[str, str]:
    import celery
    import sqlalchemy

    with psycopg.connect(PG_ADMIN) as conn:
        pg = conn.execute("show server_version").fetchone()[0]  # type: ignore[index]
    return {
        "python": platform.python_version(),
        "celery": celery.__version__,
        "sqlalchemy": sqlalchemy.__version__,
        "psycopg": psycopg.__version__,
        "postgres": pg,
        "cpus": str(os.cpu_count()),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def autovacuum_off(url: str) -> bool:
    """Whether the server runs no autovacuum (this machine's does not): a benchmark that
    writes a lot then vacuums itself, as autovacuum would, or each run is slower than the
    one before it for the dead rows it left."""
    import psycopg

    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        return conn.execute("SHOW autovacuum").fetchone() == ("off",)  # type: ignore[comparison-overlap]


def vacuum(url: str) -> None:
    """VACUUM ANALYZE every tickwork table: what autovacuum would have done."""
    import psycopg

    with psycopg.connect(plain_url(url), autocommit=True) as conn:
        for table in TICKWORK_TABLES:
            conn.execute(f"VACUUM ANALYZE {table}")


def table_sizes(engine: Engine, tables: tuple[str, ...] = TICKWORK_TABLES) -> dict[str, int]:
    """pg_total_relation_size of each table (heap, TOAST and indexes)."""
    with engine.connect() as conn:
        return {
            t: conn.execute(text("select pg_total_relation_size(:t)"), {"t": t}).scalar_one()
            for t in tables
        }


def in_process_runtime(s: Any) -> tuple[Any, list[tuple[str, int]]]:
    """A worker Runtime in this process whose published ticks are collected, not sent."""
    from tickwork.worker.config.stores import build_store
    from tickwork.worker.jobs import Jobs
    from tickwork.worker.tick.runtime import Runtime

    published: list[tuple[str, int]] = []
    rt = Runtime(
        settings=s,
        store=build_store(s),
        jobs=Jobs(s.imports),
        publish_tick=lambda sid, version, countdown: published.append((sid, version)),
    )
    return rt, published


def drive(
    rt: Any,
    published: list[tuple[str, int]],
    session_id: str,
    timer: StoreTimer | None = None,
    on_tick: Callable[[int, float], None] | None = None,
) -> int:
    """Run a session's ticks one after another in this process, as a worker would without
    Celery; returns the number of ticks. `on_tick(n, seconds)` is told each tick's time."""
    from tickwork.worker.tick.advance import Outcome, advance

    version = rt.store.get(session_id).version
    ticks = 0
    while True:
        if timer is not None:
            timer.tick = ticks
        del published[:]
        started = time.perf_counter()
        outcome = advance(rt, session_id, version).outcome
        spent = time.perf_counter() - started
        if outcome is not Outcome.SAVED:
            raise RuntimeError(f"tick {ticks} of {session_id} was {outcome.value}")
        if on_tick is not None:
            on_tick(ticks, spent)
        ticks += 1
        if not published:
            return ticks
        version = published[-1][1]


def py_spy_record(pid: int | str, seconds: float, out: Path, *, idle: bool = False) -> list[str]:
    """The command that has py-spy sample process `pid` at 100 Hz for `seconds` into `out`
    (raw stacks, one line per stack and count); with `idle`, the samples off the CPU too."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return [
        spy,
        "record",
        *(["--idle"] if idle else []),
        "-r",
        "100",
        "-f",
        "raw",
        "-d",
        str(int(seconds)),
        "-o",
        str(out),
        "-p",
        str(pid),
    ]
