"""The in-process tick's CPU on SQLite (the embedded default), alone or against another tree.

Sessions of a scripted model whose tool does nothing (`kinds.replies`: a THINK and an
EXECUTE a step, then the final answer) are driven one tick after another in one process,
without Celery (`common.drive`), on a fresh SQLite file; the figure is the process's CPU
time per tick (`time.process_time`, so a busy machine slows it less than the wall time).
Each measurement runs in a child process of its own, after one session of warm-up, and
gives the median of its sessions' figures.

With `--against CLONE` (a clone of tickwork with its own `.venv`, say at the commit before
a change), this tree and that one are measured alternately in the same window, the order
swapped each round (this, that; that, this; ...), and the ratio this / that is printed
per round with its median: on a machine other work loads, compare ratios, not times.
With `--profile FILE` this tree's ticks run once under cProfile instead, the stats written
to FILE and the top functions printed.

    python ops/bench/sqlite_tick.py [--sessions 6] [--steps 50] [--repeats 5]
        [--against /path/to/clone] [--profile FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def measure(tree: Path, sessions: int, steps: int, profile: str | None) -> dict[str, Any]:
    """Drive `sessions` sessions of `steps` steps on a fresh SQLite file with the code of
    `tree` (this process's `tickwork` must be that tree's: its own venv)."""
    sys.path.insert(0, str(tree))
    from tickwork.store.migrate import upgrade

    from ops.bench import common, kinds

    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-sqlite-"))
    url = f"sqlite:///{folder / 'tickwork.db'}"
    upgrade(url)
    s = common.settings(url, "sqlite")
    tw = common.client(s)
    rt, published = common.in_process_runtime(s)
    model = kinds.write_script(folder, "sqlite", kinds.replies(steps))
    common.drive(rt, published, common.create(tw, model))  # warm-up
    ids = [common.create(tw, model) for _ in range(sessions)]
    profiler = None
    if profile is not None:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    per_session: list[float] = []
    ticks, wall = 0, time.perf_counter()
    for session_id in ids:
        cpu = time.process_time()
        n = common.drive(rt, published, session_id)
        per_session.append((time.process_time() - cpu) / n * 1000)
        ticks += n
    wall = time.perf_counter() - wall
    if profiler is not None:
        import pstats

        profiler.disable()
        profiler.dump_stats(profile)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    tw.close()
    rt.store.engine.dispose()
    shutil.rmtree(folder)
    shutil.rmtree(s.state_dir, ignore_errors=True)
    # the median of the sessions' figures: a burst of other work on the machine moves one
    return {
        "ticks": ticks,
        "cpu_ms": statistics.median(per_session),
        "wall_ms": wall / ticks * 1000,
    }


def child(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement of `tree` in a process of its own: this tree's with this Python,
    another's with its own venv's."""
    python = Path(sys.executable) if tree == ROOT else tree / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{tree} has no .venv: python3 -m venv .venv; .venv/bin/pip install -e .")
    sizes = ["--sessions", str(args.sessions), "--steps", str(args.steps)]
    out = subprocess.run(
        [str(python), __file__, "--child", str(tree), *sizes],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"the measurement of {tree} failed:\n{out.stderr[-3000:]}")
    line = next(x for x in out.stdout.splitlines() if x.startswith("SQLITE_TICK "))
    return dict(json.loads(line.removeprefix("SQLITE_TICK ")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", type=Path, help="a clone of tickwork with its own .venv")
    parser.add_argument("--profile", help="run this tree's ticks under cProfile into this file")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        figures = measure(args.child, args.sessions, args.steps, None)
        print("SQLITE_TICK " + json.dumps(figures), flush=True)
        return
    if args.profile is not None:
        figures = measure(ROOT, args.sessions, args.steps, args.profile)
        print(f"under cProfile: {figures['cpu_ms']:.2f} ms of CPU a tick, {figures['ticks']} ticks")
        return
    sys.path.insert(0, str(ROOT))
    from ops.bench import common

    print(json.dumps(common.machine()), flush=True)
    ours: list[float] = []
    theirs: list[float] = []
    for n in range(args.repeats):
        trees = [ROOT] if args.against is None else [ROOT, args.against.resolve()]
        if n % 2:
            trees.reverse()
        got = {tree: child(tree, args) for tree in trees}
        mine = got[ROOT]["cpu_ms"]
        ours.append(mine)
        line = f"round {n + 1}: this tree {mine:.3f} ms of CPU a tick ({got[ROOT]['ticks']} ticks)"
        if args.against is not None:
            other = got[args.against.resolve()]["cpu_ms"]
            theirs.append(other)
            line += f", {args.against} {other:.3f} ms, ratio {mine / other:.3f}"
        print(line, flush=True)
    figures: dict[str, Any] = {"cpu_ms": common.stats(ours)}
    print(common.show("this tree, CPU a tick", ours, " ms", 3))
    if args.against is not None:
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        figures["against"] = str(args.against)
        figures["their_cpu_ms"] = common.stats(theirs)
        figures["ratio"] = common.stats(ratios)
        print(common.show(f"{args.against}, CPU a tick", theirs, " ms", 3))
        print(common.show("ratio this / that", ratios, "", 3))
    common.emit("sqlite_tick", figures)


if __name__ == "__main__":
    main()
