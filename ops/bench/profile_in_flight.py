"""Where a worker's CPU goes with 500 sessions in flight (issue 17, part 2's profile).

One run of `in_flight.py` (500 sessions of 5 steps, a 5 s model) on a gevent worker: its
ticks run the same code as a threads worker's, but in one OS thread, which py-spy samples
whole (a process of 500 threads it cannot: most of its samples come back empty). py-spy
records only the samples where the worker is on the CPU, so the shares below split the
workers' CPU per tick, which the run measures from /proc.

    python ops/bench/profile_in_flight.py [--pool gevent:500] [--seconds 25]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops.bench import common
from ops.bench.in_flight import run

#: (category, frame substring), checked in order against each sampled stack
CATEGORIES = (
    ("logging (Celery's task received / succeeded lines)", "logging/__init__.py"),
    ("model call: request, HTTP, reply", "generate (worker/models"),
    ("store: claim", "claim (store/core.py"),
    ("store: start_call", "start_call (store/core.py"),
    ("store: save", "save (store/core.py"),
    ("publish the next tick (Celery, kombu, Redis)", "send_task (celery"),
    ("tool", "run_tool (worker/tools"),
    ("lease renewals", "Leases._run"),
    ("watching the head while a tool runs", "Watches.look"),
    ("the rest of the tick (fsm, pydantic, report, observers)", "advance (worker/tick/advance.py"),
    ("Celery: receiving and acknowledging messages", "Request.acknowledge"),
    ("Celery: the task around the tick", "trace_task"),
    ("Celery: receiving and acknowledging messages", "asynloop"),
    ("Celery: receiving and acknowledging messages", "synloop"),
    ("relay, dispatcher, retention", "worker/tick/relay.py"),
    ("relay, dispatcher, retention", "worker/tick/dispatcher.py"),
    ("relay, dispatcher, retention", "worker/tick/pruner.py"),
    ("gevent's own thread pool and hub", "_WorkerGreenlet.run"),
    ("gevent's own thread pool and hub", "Hub.run"),
)


def spy(seconds: float, out: list[Path]) -> Callable[[list[common.Worker]], Callable[[], None]]:
    """A `during` hook for `in_flight.run`: py-spy records each worker for `seconds`."""

    def during(workers: list[common.Worker]) -> Callable[[], None]:
        spies = []
        for w in workers:
            path = Path(tempfile.mkdtemp()) / "stacks.txt"
            out.append(path)
            spies.append(
                subprocess.Popen(
                    common.py_spy_record(w.proc.pid, seconds, path),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        def finish() -> None:
            for p in spies:
                p.wait(seconds + 30)

        return finish

    return during


def categorise(paths: list[Path]) -> Counter[str]:
    found: Counter[str] = Counter()
    for path in paths:
        for line in path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            what = next((name for name, key in CATEGORIES if key in stack), "other")
            found[what] += int(n)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pool", default="gevent:500")
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=25)
    args = parser.parse_args()
    pool, _, count = args.pool.partition(":")
    stacks: list[Path] = []
    with common.database("profile-inflight") as url:
        concurrency = int(count or args.sessions)
        r = run(url, pool, concurrency, args.sessions, 5, 5.0, during=spy(args.seconds, stacks))
    ticks = args.sessions * 9
    per_tick = 1000 * r["cpu_s"]["workers"] / ticks
    samples = categorise(stacks)
    total = sum(samples.values())
    print(
        f"{args.pool}, {args.sessions} sessions x 5 steps, 5 s model: wall {r['wall']:.1f} s; "
        f"workers' CPU {r['cpu_s']['workers']:.1f} s, {per_tick:.2f} ms per tick ({ticks} "
        f"ticks); {total} samples on the CPU in the first {args.seconds:g} s"
    )
    shares = {}
    for what, n in samples.most_common():
        share = n / total
        shares[what] = share * per_tick
        print(f"  {share * 100:5.1f}%  {share * per_tick:5.2f} ms per tick  {what}")
    common.emit(
        "profile_in_flight",
        {"pool": args.pool, "wall": r["wall"], "cpu_ms_per_tick": per_tick, "ms": shares},
    )


if __name__ == "__main__":
    main()
