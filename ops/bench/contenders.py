"""The contenders of ops/bench/peers.py and how one run of one is measured.

Every contender does the same work: `sessions` sessions at once, each of `steps` steps of
one model reply (the fake model of `reply`, answering at once with one call of the no-op
tool) and one tool call, then a final reply; durable after every reply and every tool
call, so `2 * steps + 1` durable writes a session. A contender is a context manager that
starts what it needs on its own database (`__enter__`), runs sessions to their end (`run`,
which returns when the last one's last write was made) and stops everything it started
(`__exit__`).
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import psycopg

from ops.bench import common, kinds
from ops.bench.meters import DatabaseCounts

NAMES = ("tickwork", "dbos", "langgraph", "bare")
#: what each contender imports beyond the test extra; missing, it is skipped
NEEDS = {
    "dbos": ("dbos",),
    "langgraph": ("langgraph.graph", "langgraph.checkpoint.postgres", "psycopg_pool"),
}
WARM_STEPS = 2
SETTLE_S = 10.5  #: PGSTAT_IDLE_INTERVAL and a margin (see `measure`)
TIMEOUT = 900.0


@cache
def script(steps: int) -> tuple[dict[str, Any], ...]:
    """The fake model's replies for a session of `steps` steps: a call of `noop` each, then
    a final answer (tickwork's scripted model plays the same list)."""
    return tuple(kinds.replies(steps))


def reply(steps: int, index: int) -> dict[str, Any]:
    """The fake model's answer to a transcript that holds `index` replies already."""
    return script(steps)[index]


def unavailable(names: tuple[str, ...]) -> dict[str, str]:
    """The contenders of `names` that cannot run here, each with why and what to do."""
    out = {}
    for name in names:
        for module in NEEDS.get(name, ()):
            try:
                importlib.import_module(module)
            except ImportError as exc:
                out[name] = (
                    f"{module} cannot be imported ({exc}); install the bench extra: "
                    "pip install -e '.[bench]'"
                )
                break
    return out


class Contender(Protocol):
    def __enter__(self) -> Contender: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def run(self, sessions: int, steps: int) -> float:
        """Runs `sessions` sessions of `steps` steps to their end; returns the epoch time of
        the last durable write."""
        ...


@dataclass(frozen=True)
class Options:
    url: str  #: the contender's own database (a libpq URL)
    concurrency: int  #: sessions at once (worker threads, queue slots, threads)
    pool: str = "threads"  #: the Celery pool of tickwork's worker and the bare hop's
    dbos_poll_s: float = 0.1  #: how often DBOS's queue thread looks for work


@dataclass(frozen=True)
class Run:
    """One measured run of one contender."""

    contender: str
    sessions: int
    steps: int
    wall_s: float
    counts: DatabaseCounts

    def figures(self) -> dict[str, float]:
        done = self.sessions * self.steps
        return {
            "wall_s": self.wall_s,
            "steps_per_s": done / self.wall_s,
            "commits_per_step": self.counts.commits / done,
            "rows_per_step": self.counts.rows / done,
            "inserted_per_step": self.counts.inserted / done,
            "updated_per_step": self.counts.updated / done,
            "deleted_per_step": self.counts.deleted / done,
        }


def measure(name: str, options: Options, sessions: int, steps: int) -> tuple[float, DatabaseCounts]:
    """One run: the contender started and warmed up (sessions of WARM_STEPS steps), then
    `sessions` sessions of `steps` steps timed from their submission to their last durable
    write. Returns the wall time and the database's counters before the timed sessions; the
    caller reads them again once this process and its workers exited (`DatabaseCounts.settled`),
    so background work during the run (the relay's and DBOS's queue polls) counts with it.

    The counters before are read SETTLE_S after the warm-up: a backend that reported its
    counts less than a second ago holds the next ones until it next goes idle a second later,
    or for ten seconds when it stays idle (Postgres's PGSTAT_IDLE_INTERVAL), as a pooled
    connection does between the warm-up and the run."""
    database = options.url.rsplit("/", 1)[1]
    with build(name, options) as contender:
        contender.run(options.concurrency, WARM_STEPS)
        time.sleep(SETTLE_S)
        before = DatabaseCounts.read(common.PG_ADMIN, database)
        started = time.time()
        ended = contender.run(sessions, steps)
    return ended - started, before


def build(name: str, options: Options) -> Contender:
    if name == "tickwork":
        return Tickwork(options)
    if name == "bare":
        return BareHop(options)
    if name == "dbos":
        from ops.bench.dbos_peer import Dbos

        return Dbos(options)
    if name == "langgraph":
        from ops.bench.langgraph_peer import LangGraph

        return LangGraph(options)
    raise ValueError(f"unknown contender {name!r}; choose from {', '.join(NAMES)}")


def wait_for(
    url: str,
    query: str,
    params: tuple[Any, ...],
    done: Callable[[tuple[Any, ...]], bool],
    *,
    what: str,
    check: Callable[[], None] | None = None,
) -> tuple[Any, ...]:
    """Polls `query` until `done(row)`; every poll is rolled back, so that it adds no commit
    to the counters."""
    with psycopg.connect(url) as conn:

        def poll() -> tuple[Any, ...] | None:
            row = conn.execute(query, params).fetchone()
            conn.rollback()
            return row if row is not None and done(row) else None

        row = common.until(poll, timeout=TIMEOUT, poll=0.02, what=what, check=check)
    return tuple(row)


class Tickwork:
    """The documented worker, `tickwork worker --pool threads -c C`, on Postgres and Redis,
    with sessions submitted by the client; the model is the scripted model playing
    `script`."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.folder = Path(tempfile.mkdtemp(prefix="tickwork-peers-"))

    def __enter__(self) -> Tickwork:
        s = common.settings(self.options.url, "peers")
        self.client = common.client(s)
        command = [
            *(sys.executable, "-m", "tickwork", "worker"),
            *("--pool", self.options.pool, "--concurrency", str(self.options.concurrency)),
            *("--loglevel", "WARNING", "--hostname", f"peers-{uuid.uuid4().hex[:8]}@%h"),
        ]
        self.worker = common.Worker("", s.queue, common.worker_env(s), command=command)
        return self

    def __exit__(self, *_: object) -> None:
        self.worker.stop()
        self.client.close()

    def run(self, sessions: int, steps: int) -> float:
        model = kinds.write_script(self.folder, f"peers{steps}", list(script(steps)))
        ids = [common.submit(self.client, model) for _ in range(sessions)]
        _, failed, ended = wait_for(
            self.options.url,
            "select count(*) filter (where status = 'completed'),"
            " count(*) filter (where status not in ('completed', 'ready', 'executing')),"
            " extract(epoch from max(updated_at)) from tickwork_sessions where id = any(%s)",
            (ids,),
            lambda row: row[0] + row[1] == len(ids),
            what="tickwork sessions",
            check=self.worker.check,
        )
        if failed:
            raise RuntimeError(f"{failed} tickwork sessions did not complete")
        return float(ended)


class BareHop:
    """The floor: a Celery task that INSERTs one row and enqueues the next hop
    (ops/bench/baseline_app.py `step`), `2 * steps + 1` hops a session, on a worker with
    the same pool and concurrency as tickwork's."""

    def __init__(self, options: Options) -> None:
        self.options = options

    def __enter__(self) -> BareHop:
        from ops.bench import baseline_app

        self.queue = common.queue_name("peers.bare")
        baseline_app.app.conf.update(broker_url=common.REDIS_URL, task_default_queue=self.queue)
        self.step = baseline_app.step
        with psycopg.connect(self.options.url, autocommit=True) as conn:
            conn.execute(baseline_app.STEPS_TABLE)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TICKWORK_", "BENCH_"))}
        env.update(
            PYTHONPATH=str(common.ROOT),
            BENCH_BROKER_URL=common.REDIS_URL,
            BENCH_QUEUE=self.queue,
            BENCH_DB_URL=self.options.url,
        )
        self.worker = common.Worker(
            "ops.bench.baseline_app",
            self.queue,
            env,
            pool=self.options.pool,
            concurrency=self.options.concurrency,
        )
        return self

    def __exit__(self, *_: object) -> None:
        self.worker.stop()

    def run(self, sessions: int, steps: int) -> float:
        hops = 2 * steps + 1
        ids = [uuid.uuid4().hex for _ in range(sessions)]
        for session in ids:
            self.step.apply_async((session, 0, hops), queue=self.queue)
        _, ended = wait_for(
            self.options.url,
            "select count(*), extract(epoch from max(at)) from bench_steps where session = any(%s)",
            (ids,),
            lambda row: row[0] == sessions * hops,
            what="bare hops",
            check=self.worker.check,
        )
        return float(ended)
