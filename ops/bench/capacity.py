"""Per-tick costs for the capacity model (docs/CAPACITY.md), and two points to check it.

1. In this process, without Celery: ticks of do-nothing sessions driven one after another
   (as profile_tick.py); per tick: Postgres round trips, WAL bytes (pg_current_wal_lsn
   before and after; the server is shared, so the least of several windows is kept), CPU
   of this process and CPU of the Postgres backends serving it (/proc/<pid>/stat of the
   backends connected to the run's database).
2. Real `celery worker`s (prefork, concurrency 1 and 2) running 20 sessions of ~100 ticks,
   as benchmark 1: ticks/s, and CPU per tick of the worker's processes and of the backends.

    python ops/bench/capacity.py [--sessions 10] [--windows 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg

from ops.bench import common, kinds
from ops.bench.profile_tick import RoundTrips
from ops.bench.tick_throughput import tickwork_run

TICK_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK_S


def tree(pid: int) -> list[int]:
    """A process and its descendants."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except FileNotFoundError:
            continue
        todo.extend(int(c) for c in children)
    return found


class Backends:
    """CPU of the Postgres backends connected to one database (a process's own
    connections, when it is the only client)."""

    def __init__(self, admin: psycopg.Connection[Any], database: str) -> None:
        self.admin, self.database = admin, database
        self.seen: dict[int, float] = {}

    def pids(self) -> list[int]:
        rows = self.admin.execute(
            "select pid from pg_stat_activity where datname = %s and pid <> pg_backend_pid()",
            (self.database,),
        ).fetchall()
        return [r[0] for r in rows]

    def total(self) -> float:
        for pid in self.pids():
            self.seen[pid] = cpu_s(pid)
        return sum(self.seen.values())


def wal_lsn(admin: psycopg.Connection[Any]) -> int:
    (lsn,) = admin.execute(  # type: ignore[misc]
        "select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
    ).fetchone()
    return int(lsn)


def in_process(url: str, sessions: int, windows: int, folder: Path) -> dict[str, float]:
    database = url.rsplit("/", 1)[1]
    trips = RoundTrips()
    s = common.settings(url, "capacity")
    tw = common.client(s)
    rt, published = common.in_process_runtime(s)
    model = kinds.write_script(folder, "capacity", kinds.replies(10))
    common.drive(rt, published, common.submit(tw, model))  # warm-up
    per: dict[str, list[float]] = {"wal": [], "trips": [], "cpu": [], "pg_cpu": [], "wall": []}
    with psycopg.connect(common.plain_url(url), autocommit=True) as admin:
        backends = Backends(admin, database)
        for _ in range(windows):
            ids = [common.create(tw, model) for _ in range(sessions)]
            backends.seen.clear()
            pg0, wal0, cpu0 = backends.total(), wal_lsn(admin), time.process_time()
            trips.count, ticks, wall0 = 0, 0, time.perf_counter()
            for session_id in ids:
                ticks += common.drive(rt, published, session_id)
            wall = time.perf_counter() - wall0
            cpu, n_trips = time.process_time() - cpu0, trips.count
            wal, pg = wal_lsn(admin) - wal0, backends.total() - pg0
            per["wal"].append(wal / ticks)
            per["trips"].append(n_trips / ticks)
            per["cpu"].append(cpu / ticks)
            per["pg_cpu"].append(pg / ticks)
            per["wall"].append(wall / ticks)
    tw.close()
    rt.store.engine.dispose()
    return {
        "wal_bytes_per_tick_min": min(per["wal"]),
        "wal_bytes_per_tick_median": sorted(per["wal"])[len(per["wal"]) // 2],
        "round_trips_per_tick": sorted(per["trips"])[len(per["trips"]) // 2],
        "worker_cpu_ms_per_tick": 1000 * sorted(per["cpu"])[len(per["cpu"]) // 2],
        "pg_cpu_ms_per_tick": 1000 * sorted(per["pg_cpu"])[len(per["pg_cpu"]) // 2],
        "wall_ms_per_tick": 1000 * sorted(per["wall"])[len(per["wall"]) // 2],
    }


def celery_point(url: str, concurrency: int, folder: Path) -> dict[str, float]:
    """Benchmark 1's tickwork run, with the CPU of the worker and of the backends."""
    database = url.rsplit("/", 1)[1]
    marks: dict[str, float] = {}
    with psycopg.connect(common.plain_url(url), autocommit=True) as admin:
        backends = Backends(admin, database)

        def sum_versions() -> int:
            (n,) = admin.execute(  # type: ignore[misc]
                "select coalesce(sum(version), 0) from tickwork_sessions"
            ).fetchone()
            return int(n)

        def during(w: common.Worker) -> None:
            procs = tree(w.proc.pid)
            backends.seen.clear()
            marks["v0"], marks["pg0"] = sum_versions(), backends.total()
            marks["cpu0"] = sum(cpu_s(p) for p in procs)
            common.until(
                lambda: (
                    admin.execute(
                        "select count(*) from tickwork_sessions"
                        " where status in ('ready', 'executing')"
                    ).fetchone()[0]  # type: ignore[index]
                    == 0
                ),
                timeout=900,
                poll=0.05,
                what="sessions",
                check=w.check,
            )
            marks["cpu1"] = sum(cpu_s(p) for p in tree(w.proc.pid))
            marks["pg1"], marks["v1"] = backends.total(), sum_versions()

        rate = tickwork_run(url, concurrency, 20, 100, folder, during=during)
    ticks = marks["v1"] - marks["v0"]
    return {
        "concurrency": concurrency,
        "ticks_per_s": rate,
        "worker_cpu_ms_per_tick": 1000 * (marks["cpu1"] - marks["cpu0"]) / ticks,
        "pg_cpu_ms_per_tick": 1000 * (marks["pg1"] - marks["pg0"]) / ticks,
        "ticks": ticks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10, help="sessions of 21 ticks a window")
    parser.add_argument("--windows", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-capacity-"))
    print(f"load before: {common.machine()['load']}", flush=True)
    with common.database("capacity") as url:
        costs = in_process(url, args.sessions, args.windows, folder)
        print("in this process, per tick:")
        for key, value in costs.items():
            print(f"  {key}: {value:.2f}")
        points = [celery_point(url, c, folder) for c in (1, 2)]
        for p in points:
            print(
                f"celery worker, concurrency {p['concurrency']}: {p['ticks_per_s']:.1f} ticks/s; "
                f"per tick: worker CPU {p['worker_cpu_ms_per_tick']:.2f} ms, "
                f"Postgres CPU {p['pg_cpu_ms_per_tick']:.2f} ms ({p['ticks']:.0f} ticks)"
            )
    common.emit(
        "capacity", {"in_process": costs, "celery": points, "load": common.machine()["load"]}
    )


if __name__ == "__main__":
    main()
