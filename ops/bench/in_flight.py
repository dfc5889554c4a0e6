"""Benchmark: sessions in flight per host, with a slow model (issue 17, part 2).

N sessions of S steps (S-1 tool steps and a final answer) whose model answers after L
seconds: a chat-completions server on loopback (this process, ops/bench/fake_chat.py)
used as `openai:fake`, and one `celery worker` per pool tried. The sessions are stored
first, then all published at once; the figure is the wall time until the last one
completes against the ideal S * L (every session's model calls back to back, all sessions
at once; with fewer worker slots than sessions, N * S * L / slots). Also measured: the
worker's resident memory (its whole process group) before the sessions and at its peak,
and the difference per session in flight (what one more costs), and the peak divided by
the sessions in flight (what prefork, a process per session, costs); the most model calls
in flight at once.

    python ops/bench/in_flight.py                          # 500 sessions, 5 steps, 5 s model
    python ops/bench/in_flight.py --sessions 50 --pools threads:50,gevent:50,prefork:2:4

`--pools` lists `pool:concurrency[:sessions]` runs, one after the other on one database:
`threads` (Celery's thread pool), `gevent` (the `bench` extra; skipped with a note when it
is not installed), `prefork` (a process per slot, so its concurrency is bounded by memory;
the third field runs it with fewer sessions, as 500 on 8 processes would take 26 minutes).
The issue's target: wall <= 1.25 x the ideal 25 s for 500 sessions on a 2-core machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import text

from ops.bench import common
from ops.bench.io_concurrency import done, script

PAGE = os.sysconf("SC_PAGE_SIZE")


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
    url: str, pool: str, concurrency: int, sessions: int, steps: int, latency: float
) -> dict[str, float]:
    s = common.settings(url, f"inflight-{pool}")
    fake = common.FakeChat(script(steps), delay=lambda index, attempt: latency)
    with fake.serve():
        env = common.worker_env(s, OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="")
        tw = common.client(s)
        try:
            with common.worker(
                "worker.app", s.queue, env, pool=pool, concurrency=concurrency, loglevel="INFO"
            ) as w:
                w.wait_ready(timeout=120)
                warm = [common.submit(tw, "openai:fake") for _ in range(2)]
                common.until(
                    lambda: done(tw, warm) == len(warm),
                    timeout=steps * latency * 4 + 60,
                    poll=0.2,
                    what="warm-up",
                    check=w.check,
                )
                idle = group_rss(w.proc.pid)
                sampler = Sampler(w.proc.pid)
                sampler.start()
                ids = [common.create(tw, "openai:fake") for _ in range(sessions)]
                fake.arrivals.clear()
                started = time.time()
                for session_id in ids:
                    tw.publish(session_id, 0)
                common.until(
                    lambda: done(tw, ids) == len(ids),
                    timeout=sessions * steps * latency / max(1, min(concurrency, sessions)) * 4
                    + 120,
                    poll=0.5,
                    what="sessions",
                    check=w.check,
                )
                peak = sampler.stop()
            with tw.store.engine.connect() as conn:
                end = conn.execute(
                    text(
                        "select extract(epoch from max(updated_at)) from tickwork_sessions "
                        "where id = any(:ids)"
                    ),
                    {"ids": ids},
                ).scalar_one()
        finally:
            tw.close()
    at_once = most_at_once(fake.arrivals, latency)
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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency", type=float, default=5.0)
    parser.add_argument(
        "--pools",
        default="threads:500,gevent:500,prefork:8:16",
        help="pool:concurrency[:sessions] runs, comma-separated",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with common.database("inflight") as url:
        for spec in args.pools.split(","):
            pool, count, sessions = [*spec.split(":"), "", ""][:3]
            concurrency = int(count or args.sessions)
            sessions_n = int(sessions or args.sessions)
            if pool in ("gevent", "eventlet") and importlib.util.find_spec(pool) is None:
                print(f"{spec}: skipped, {pool} is not installed (pip install {pool})")
                continue
            slots = min(concurrency, sessions_n)
            ideal = sessions_n * args.steps * args.latency / slots
            try:
                r = run(url, pool, concurrency, sessions_n, args.steps, args.latency)
            except (RuntimeError, TimeoutError) as exc:
                print(f"{spec}: FAILED: {exc}", flush=True)
                results[spec] = {"error": str(exc)[:500]}
                continue
            r["ideal"] = ideal
            r["sessions"] = sessions_n
            r["ratio"] = r["wall"] / ideal
            results[spec] = r
            print(
                f"{spec}: {sessions_n} sessions x {args.steps} steps, {args.latency:g}s model: "
                f"wall {r['wall']:.1f}s, ideal {ideal:.0f}s, ratio {r['ratio']:.3f}; "
                f"{r['model_calls_at_once']:.0f} model calls at once at most; worker RSS "
                f"{r['idle_rss_mb']:.0f} MB idle, {r['peak_rss_mb']:.0f} MB at peak, "
                f"{r['rss_kb_per_session_in_flight']:.0f} KB more per session in flight "
                f"({r['rss_kb_per_session_whole_worker']:.0f} KB with the worker's own)",
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
