"""Benchmark: sessions in flight per host, with a slow model (issue 17, part 2).

N sessions of S steps (S-1 tool steps and a final answer) whose model answers after L
seconds: a chat-completions server on loopback (this process, ops/bench/fake_chat.py)
used as `openai:fake`, and `celery worker` processes per pool tried. The sessions are stored
first, then all published at once; the figure is the wall time until the last one
completes against the ideal S * L (every session's model calls back to back, all sessions
at once; with fewer worker slots than sessions, N * S * L / slots). Also measured: the
workers' resident memory (their whole process groups, each one's peak added) before the
sessions and at their peak, and the difference per session in flight (what one more
costs), and the peak divided by the sessions in flight (what prefork, a process per
session, costs); the most model calls in flight at once; the CPU of the workers, of
Postgres and of this process over the run; when each step's model calls arrived (how
long the ticks between two waves of model calls queued).

    python ops/bench/in_flight.py                          # 500 sessions, 5 steps, 5 s model
    python ops/bench/in_flight.py --sessions 50 --pools threads:50,gevent:50,prefork:2:4

`--pools` lists `[broker/]pool:concurrency[:sessions][xPROCESSES]` runs, one after the
other on one database: `threads` (Celery's thread pool), `gevent` (the `bench` extra;
skipped with a note when it is not installed), `prefork` (a process per slot, so its
concurrency is bounded by memory; the third field runs it with fewer sessions, as 500 on 8
processes would take 26 minutes); `x2` runs two worker processes of that concurrency
each; `amqp/` uses RabbitMQ (TICKWORK_BENCH_AMQP) instead of Redis. A run that fails is
reported and the others go on.
The issue's target: wall <= 1.25 x the ideal 25 s for 500 sessions on a 2-core machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import text

from ops.bench import common
from ops.bench.io_concurrency import done, script

PAGE = os.sysconf("SC_PAGE_SIZE")
BROKERS = {"redis": common.REDIS_URL, "amqp": common.AMQP_URL}
DEFAULT_POOLS = "threads:500,threads:250x2,amqp/threads:250x2,gevent:500,prefork:8:16"


def parse_spec(spec: str, sessions: int) -> tuple[str, str, int, int, int]:
    """`[broker/]pool:concurrency[:sessions][xPROCESSES]` -> (broker, pool, concurrency per
    process, sessions, processes)."""
    broker, _, rest = spec.rpartition("/")
    rest, _, processes = rest.partition("x")
    pool, count, count_sessions = [*rest.split(":"), "", ""][:3]
    return (
        broker or "redis",
        pool,
        int(count or sessions),
        int(count_sessions or sessions),
        int(processes or 1),
    )


TICK_HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(match: Callable[[int, str], bool]) -> float:
    """CPU seconds (user + system) used so far by the live processes `match(pgid, name)`
    selects and by their children that ended (reaped: a prefork child, a Postgres backend
    whose connection the pool closed), from /proc."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                name, _, rest = f.read().rpartition(")")
                fields = rest.split()
            if match(int(fields[2]), name.partition("(")[2]):
                # utime, stime, then cutime, cstime: the ended children's
                total += sum(int(field) for field in fields[11:15]) / TICK_HZ
        except (OSError, IndexError, ValueError):
            continue
    return total


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in process group `pgid` (the worker and its
    children), from /proc."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # fields after the name: state, ppid, pgrp, ...
                continue
            with open(f"/proc/{entry}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return total


class Sampler(threading.Thread):
    """The peak of `group_rss(pgid)`, sampled every `period` seconds."""

    def __init__(self, pgid: int, period: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pgid, self.period = pgid, period
        self.peak = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, group_rss(self.pgid))
            self._halt.wait(self.period)

    def stop(self) -> int:
        self._halt.set()
        self.join(5)
        return self.peak


def most_at_once(arrivals: dict[int, list[float]], latency: float) -> int:
    """The most model calls in flight at once: each lasts `latency` from its arrival."""
    edges = sorted(
        [(t, 1) for ts in arrivals.values() for t in ts]
        + [(t + latency, -1) for ts in arrivals.values() for t in ts]
    )
    best = now = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def run(
    url: str,
    pool: str,
    concurrency: int,
    sessions: int,
    steps: int,
    latency: float,
    *,
    processes: int = 1,
    broker: str = common.REDIS_URL,
    during: Callable[[list[common.Worker]], Callable[[], None]] | None = None,
) -> dict[str, Any]:
    """One run; `during(workers)` is called once the sessions are published and returns
    what to call once they are done (ops/bench/profile_in_flight.py samples the workers)."""
    s = common.settings(url, f"inflight-{pool}", broker_url=broker)
    fake = common.FakeChat(script(steps), delay=lambda index, attempt: latency)
    with fake.serve(), ExitStack() as stack:
        env = common.worker_env(s, OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="")
        tw = common.client(s)
        stack.callback(tw.close)
        workers = [
            stack.enter_context(
                common.worker(
                    "tickwork.worker.tick.app",
                    s.queue,
                    env,
                    pool=pool,
                    concurrency=concurrency,
                    loglevel="INFO",
                )
            )
            for _ in range(processes)
        ]

        def check() -> None:
            for w in workers:
                w.check()

        for w in workers:
            w.wait_ready(timeout=120)
        warm = [common.submit(tw, "openai:fake") for _ in range(2 * processes)]
        common.until(
            lambda: done(tw, warm) == len(warm),
            timeout=steps * latency * 4 + 60,
            poll=0.2,
            what="warm-up",
            check=check,
        )
        idle = sum(group_rss(w.proc.pid) for w in workers)
        samplers = [Sampler(w.proc.pid) for w in workers]
        for sampler in samplers:
            sampler.start()
        ids = [common.create(tw, "openai:fake") for _ in range(sessions)]
        fake.arrivals.clear()
        pgids = {w.proc.pid for w in workers}

        def cpu() -> tuple[float, float, float]:
            return (
                cpu_seconds(lambda pgid, name: pgid in pgids),
                cpu_seconds(lambda pgid, name: name.startswith("postgres")),
                sum(os.times()[:2]),  # this process: the model server, the poll, the samplers
            )

        cpu_before = cpu()
        started = time.time()
        for session_id in ids:
            tw.publish(session_id, 0)
        finish = during(workers) if during is not None else None
        common.until(
            lambda: done(tw, ids) == len(ids),
            timeout=sessions * steps * latency / max(1, min(concurrency * processes, sessions)) * 4
            + 120,
            poll=0.5,
            what="sessions",
            check=check,
        )
        peak = sum(sampler.stop() for sampler in samplers)
        used = [after - before for after, before in zip(cpu(), cpu_before, strict=True)]
        if finish is not None:
            finish()
        with tw.store.engine.connect() as conn:
            end = conn.execute(
                text(
                    "select extract(epoch from max(updated_at)) from tickwork_sessions "
                    "where id = any(:ids)"
                ),
                {"ids": ids},
            ).scalar_one()
    at_once = most_at_once(fake.arrivals, latency)
    waves = {
        index: (min(ts) - started, sorted(ts)[len(ts) // 2] - started, max(ts) - started)
        for index, ts in sorted(fake.arrivals.items())
    }
    return {
        "wall": float(end) - started,
        "idle_rss_mb": idle / 2**20,
        "peak_rss_mb": peak / 2**20,
        "model_calls_at_once": float(at_once),
        # what one more session in flight costs (threads, gevent), and the whole worker
        # divided by its sessions in flight (prefork: a process per session)
        "rss_kb_per_session_in_flight": (peak - idle) / 1024 / max(1, at_once),
        "rss_kb_per_session_whole_worker": peak / 1024 / max(1, at_once),
        "model_calls": float(sum(len(v) for v in fake.arrivals.values())),
        # CPU seconds from the first publish to the last session done: the workers (with
        # their relay and retention threads), Postgres (every process of the server), this
        # process (the model server, its poll and samplers)
        "cpu_s": {"workers": used[0], "postgres": used[1], "bench_and_model_server": used[2]},
        # when the model calls of each step arrived, in seconds after the first publish:
        # the first, the median and the last
        "waves": {str(k): [round(x, 2) for x in v] for k, v in waves.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency", type=float, default=5.0)
    parser.add_argument(
        "--pools",
        default=DEFAULT_POOLS,
        help="[broker/]pool:concurrency[:sessions][xPROCESSES] runs, comma-separated",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with common.database("inflight", keep=bool(os.environ.get("TICKWORK_BENCH_KEEP"))) as url:
        for spec in args.pools.split(","):
            broker, pool, concurrency, sessions_n, processes = parse_spec(spec, args.sessions)
            if pool in ("gevent", "eventlet") and importlib.util.find_spec(pool) is None:
                print(f"{spec}: skipped, {pool} is not installed (pip install {pool})")
                continue
            slots = min(concurrency * processes, sessions_n)
            ideal = sessions_n * args.steps * args.latency / slots
            try:
                r = run(
                    url,
                    pool,
                    concurrency,
                    sessions_n,
                    args.steps,
                    args.latency,
                    processes=processes,
                    broker=BROKERS[broker],
                )
            except Exception as exc:
                print(f"{spec}: FAILED: {type(exc).__name__}: {exc}", flush=True)
                results[spec] = {"error": str(exc)[:500]}
                continue
            r.update(ideal=ideal, sessions=sessions_n, processes=processes, broker=broker)
            r["ratio"] = r["wall"] / ideal
            results[spec] = r
            print(
                f"{spec}: {sessions_n} sessions x {args.steps} steps, {args.latency:g}s model, "
                f"{processes} worker process(es) on {broker}: wall {r['wall']:.1f}s, ideal "
                f"{ideal:.0f}s, ratio {r['ratio']:.3f}; {r['model_calls_at_once']:.0f} model "
                f"calls at once at most; workers' RSS {r['idle_rss_mb']:.0f} MB idle, "
                f"{r['peak_rss_mb']:.0f} MB at peak, {r['rss_kb_per_session_in_flight']:.0f} KB "
                f"more per session in flight ({r['rss_kb_per_session_whole_worker']:.0f} KB with "
                "the workers' own)",
                flush=True,
            )
            ticks = sessions_n * (2 * args.steps - 1)
            print(
                "  CPU from the first publish to the last session done: "
                + ", ".join(f"{k} {v:.1f}s" for k, v in r["cpu_s"].items())
                + f"; workers' CPU per tick, all in, {1000 * r['cpu_s']['workers'] / ticks:.2f} "
                f"ms ({ticks} ticks: 2 x steps - 1 per session)",
                flush=True,
            )
            print(
                "  model calls of step k arrived at (first, median, last) s after the publish: "
                + "; ".join(f"{k}: {a:.1f} {m:.1f} {z:.1f}" for k, (a, m, z) in r["waves"].items()),
                flush=True,
            )
    common.emit(
        "in_flight",
        {
            "sessions": args.sessions,
            "steps": args.steps,
            "latency": args.latency,
            "pools": results,
            "machine": common.machine(),
        },
    )


if __name__ == "__main__":
    main()
