"""Where a tick's time goes: Celery, SQL round trips, Python (SQLAlchemy, pydantic, fsm).

1. In this process, without Celery: ticks of do-nothing sessions driven one after another,
   against the baseline's transaction run the same way; per tick: time, store calls and
   Postgres round trips (psycopg waits that reach the server).
2. In a real `celery worker` (prefork, concurrency 1) during a benchmark-1 run: py-spy
   samples the pool process's main thread (idle included), so the categories add up to the
   wall time of a tick, for tickwork and for the baseline.

    python ops/bench/profile_tick.py [--seconds 12]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg
from psycopg.types.json import Jsonb

from ops.bench import common, kinds
from ops.bench.baseline_app import TABLE
from ops.bench.tick_throughput import baseline_run, tickwork_run

#: (category, frame substring) checked in order against a sampled stack, innermost phase first
PHASES = (
    ("claim", "claim (store/core.py"),
    ("start_call", "start_call (store/core.py"),
    ("save", "save (store/core.py"),
    ("model", "generate (worker/models"),
    ("tool", "run_tool (worker/tools"),
    ("publish", "apply_async (celery"),
    ("publish", "send_task (celery"),
    ("transaction", "baseline_app.py"),
    ("fsm, pydantic, advance", "advance (worker/tick/advance.py"),
    ("Celery, in the task's process", "trace_task"),
)
PG_WAIT = ("wait (psycopg/connection.py", "wait_c", "_wait (psycopg")


class RoundTrips:
    """Counts psycopg's waits that go to the server, one per Postgres round trip (or more
    for big rows); a wait that never yields (setting autocommit, a rollback with no
    transaction open) sends nothing and is not counted."""

    def __init__(self) -> None:
        self.count = 0
        original = psycopg.Connection.wait

        def counted(conn: psycopg.Connection, gen, *args, **kw):  # type: ignore[no-untyped-def]
            return original(conn, _Spied(gen, self), *args, **kw)

        psycopg.Connection.wait = counted  # type: ignore[method-assign]


class _Spied:
    """A psycopg generator that counts one round trip the first time it asks to wait."""

    def __init__(self, gen, trips: RoundTrips) -> None:  # type: ignore[no-untyped-def]
        self._gen, self._trips, self._waited = gen, trips, False

    def __iter__(self) -> _Spied:
        return self

    def __next__(self):  # type: ignore[no-untyped-def]
        return self.send(None)

    def send(self, value):  # type: ignore[no-untyped-def]
        state = self._gen.send(value)
        if not self._waited:
            self._waited = True
            self._trips.count += 1
        return state

    def throw(self, *exc):  # type: ignore[no-untyped-def]
        return self._gen.throw(*exc)


def in_process(url: str, sessions: int, steps: int, folder: Path) -> dict[str, float]:
    trips = RoundTrips()
    s = common.settings(url, "profile")
    tw = common.client(s)
    rt, published = common.in_process_runtime(s)
    timer = common.StoreTimer()
    timer.attach(rt.store)
    model = kinds.write_script(folder, "profile", kinds.replies(steps))
    common.drive(rt, published, common.submit(tw, model))  # warm-up
    timer.calls.clear()
    trips.count, ticks = 0, 0
    started = time.perf_counter()
    for _ in range(sessions):
        ticks += common.drive(rt, published, common.submit(tw, model), timer)
    spent = time.perf_counter() - started
    tw.close()
    rt.store.engine.dispose()
    out = {
        "tick_ms": spent / ticks * 1000,
        "round_trips": trips.count / ticks,
    }
    for name in ("claim", "start_call", "save"):
        out[f"{name}_ms"] = sum(c.get(name, 0.0) for c in timer.calls.values()) / ticks * 1000
    with psycopg.connect(common.plain_url(url), autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute(
            "insert into bench_chains (id, data) values ('p', %s) on conflict do nothing",
            (Jsonb({"blob": kinds.prose(4000, seed=1), "n": 0}),),
        )
        trips.count, hops = 0, 500
        started = time.perf_counter()
        for n in range(hops):
            with conn.transaction():
                (data,) = conn.execute(  # type: ignore[misc]
                    "select data from bench_chains where id = 'p' for update"
                ).fetchone()
                data["n"] = n
                conn.execute(
                    "update bench_chains set data = %s, hops = hops + 1 where id = 'p'",
                    (Jsonb(data),),
                )
        out["baseline_hop_ms"] = (time.perf_counter() - started) / hops * 1000
        out["baseline_round_trips"] = trips.count / hops
    return out


def spy(seconds: float, folded: list[Path]) -> Callable[[common.Worker], None]:
    """A `during` hook: py-spy samples the worker's pool process for `seconds`."""

    def during(w: common.Worker) -> None:
        children = common.until(
            lambda: subprocess.run(
                ["pgrep", "-P", str(w.proc.pid)], capture_output=True, text=True
            ).stdout.split(),
            timeout=10,
            what="pool process",
        )
        out = Path(tempfile.mkdtemp()) / "stacks.txt"
        subprocess.run(
            common.py_spy_record(children[0], seconds, out, idle=True),
            check=True,
            capture_output=True,
        )
        folded.append(out)

    return during


def categorise(path: Path) -> Counter[str]:
    """Samples of the pool process's main thread by what it was doing."""
    found: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if frames and frames[0].startswith("process "):
            frames = frames[1:]
        if not frames or "_bootstrap (threading.py" in frames[0]:
            continue  # another thread: the lease renewer, the tool's thread
        if not frames[0].startswith("_run_module_as_main"):
            found["(stack not read)"] += int(n)
            continue
        joined = ";".join(frames)
        phase = next((name for name, key in PHASES if key in joined), None)
        if phase is None:
            found["idle: waiting for Celery to hand over the next task"] += int(n)
            continue
        if phase == "model" and "psycopg" not in joined:
            found[phase] += int(n)
            continue
        waiting = any(k in frames[-1] for k in PG_WAIT)
        if phase == "publish" or "kombu" in joined or "redis" in joined:
            found[
                "publish (Redis, kombu)"
                if phase != "Celery, in the task's process"
                else "Celery, in the task's process"
            ] += int(n)
        elif waiting:
            found[f"{phase}: waiting on Postgres"] += int(n)
        else:
            found[f"{phase}: Python"] += int(n)
    return found


def report(name: str, samples: Counter[str], tick_ms: float) -> dict[str, float]:
    total = sum(samples.values())
    print(f"{name}: {tick_ms:.2f} ms of wall time per tick, by what the pool process did")
    out = {}
    for what, n in samples.most_common():
        share = n / total
        out[what] = share * tick_ms
        print(f"  {share * 100:5.1f}%  {share * tick_ms:6.2f} ms  {what}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--sessions", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-"))
    with common.database("profile") as url:
        inproc = in_process(url, args.sessions, 50, folder)
        print("in this process, without Celery (per tick):")
        for key, value in inproc.items():
            print(f"  {key}: {value:.2f}")
        base_stacks: list[Path] = []
        tick_stacks: list[Path] = []
        base_rate = baseline_run(url, 1, 20, 100, during=spy(args.seconds, base_stacks))
        tick_rate = tickwork_run(url, 1, 20, 100, folder, during=spy(args.seconds, tick_stacks))
    print(f"under py-spy: baseline {base_rate:.1f} ticks/s, tickwork {tick_rate:.1f} ticks/s")
    figures = {
        "in_process": inproc,
        "baseline": report("baseline", categorise(base_stacks[0]), 1000 / base_rate),
        "tickwork": report("tickwork", categorise(tick_stacks[0]), 1000 / tick_rate),
    }
    common.emit("profile_tick", figures)


if __name__ == "__main__":
    main()
