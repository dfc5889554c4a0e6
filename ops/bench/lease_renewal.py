"""Benchmark: one round of a worker's lease renewals, with N ticks in flight (issue 27).

A threads worker at 500 sessions in flight holds about 250 leases, and its lease thread
renews them all every third of TICKWORK_LEASE_S. This stores N sessions on Postgres,
claims them all as one worker, holds their leases in one `Leases` and times its
`renew_all`: the CPU of this process (`time.process_time`) and the wall time per round,
the median of `--rounds`. With `--against CLONE` it measures that clone too (its own
`.venv`), each in a child process, alternately, the order swapped each round, and prints
the ratio this / that of the CPU per round and its median:

    .venv/bin/python ops/bench/lease_renewal.py --leases 250 --against /work/fix5-base
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def measure(tree: Path, leases: int, rounds: int) -> dict[str, float]:
    """CPU and wall seconds of one `renew_all` of `leases` held leases, medians of `rounds`,
    with the code of `tree` (this process's `tickwork` must be that tree's: its own venv)."""
    sys.path.insert(0, str(tree))
    from tickwork.worker.tick.runtime import Leases

    from ops.bench import common

    with common.database("renewal") as url:
        s = common.settings(url, "renewal")
        tw = common.client(s)
        try:
            ids = [common.create(tw, "openai:fake") for _ in range(leases)]
            store, now = tw.store, datetime.now(UTC)
            for session_id in ids:
                assert store.claim(session_id, 0, owner="bench", now=now, lease_s=60) is not None
            held = Leases(store, lease_s=60, clock=lambda: datetime.now(UTC))
            cpu, wall = [], []
            with ExitStack() as stack:
                for session_id in ids:
                    stack.enter_context(held.hold(session_id, 0, "bench"))
                held.renew_all()  # warm: the statement prepared, the pool's connection open
                for _ in range(rounds):
                    c, w = time.process_time(), time.perf_counter()
                    held.renew_all()
                    cpu.append(time.process_time() - c)
                    wall.append(time.perf_counter() - w)
                assert all(held.lost(session_id, 0) is None for session_id in ids)
        finally:
            tw.close()
    return {"cpu_s": statistics.median(cpu), "wall_s": statistics.median(wall)}


def child(tree: Path, leases: int, rounds: int) -> dict[str, float]:
    """`measure` of `tree` in a process of its own, with that tree's venv."""
    sizes = ["--leases", str(leases), "--rounds", str(rounds)]
    out = subprocess.run(
        [str(tree / ".venv/bin/python"), __file__, "--child", str(tree), *sizes],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"the measurement of {tree} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--against", type=Path, help="a clone to alternate with, its own .venv")
    parser.add_argument("--repeats", type=int, default=3, help="alternations, with --against")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None or args.against is None:
        print(json.dumps(measure(args.child or ROOT, args.leases, args.rounds)))
        return
    here = ROOT
    ratios = []
    for repeat in range(args.repeats):
        pair = [(here, "this"), (args.against, "that")]
        got = {}
        for root, name in pair if repeat % 2 == 0 else pair[::-1]:
            got[name] = child(root, args.leases, args.rounds)
            print(
                f"round {repeat + 1}, {name} ({root}): one renew_all of {args.leases} leases: "
                f"CPU {got[name]['cpu_s'] * 1000:.1f} ms, wall {got[name]['wall_s'] * 1000:.1f} ms",
                flush=True,
            )
        ratios.append(got["this"]["cpu_s"] / got["that"]["cpu_s"])
        print(f"round {repeat + 1}: CPU this / that {ratios[-1]:.3f}", flush=True)
    print(
        f"CPU per renewal round, this / that: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}) of {len(ratios)}"
    )


if __name__ == "__main__":
    main()
