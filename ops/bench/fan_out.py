"""Benchmark: fan-out. A root spawns 50 children of 5 steps (4 tool steps and a final
answer) whose model takes 1 s, and is woken once when all have ended.

1. Wall time. The model is scripted with a 1 s sleep before each reply; the root's two
   replies (the spawn, the final answer) take 1 s each too. With every child running at
   once the ideal is the critical path: 2 root replies + 5 child replies = 7 s. The root is
   stored first, then published; the figure is the wall time until it completes, against
   the ideal (target <= 1.15). Workers: `celery worker --pool threads` on Postgres + Redis.
   Beside it, the CPU seconds the workers and Postgres spent per tick meanwhile (from
   /proc): the children's ticks come in bursts (all 50 models answer at once), so on a
   machine of few cores the wall time over the ideal is mostly their CPU.
2. The join's own cost per child, in-process (no Celery, no model delay): the spawn tick's
   time and the woken root's join tick's time, each divided by the number of children, and
   what a child's last tick costs more than the same session's last tick outside a tree
   (counting itself on the join's row, waking the parent).

    python ops/bench/fan_out.py [--children 50] [--steps 5] [--latency 1] [--workers 2]
                                [--threads 32] [--repeats 2] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import text
from tickwork.worker.jobs import JobKind
from tickwork.worker.tools.registry import ToolRegistry
from tickwork.worker.tools.spawn import SPAWN_TOOL

from ops.bench import common, kinds
from ops.bench.in_flight import cpu_seconds

#: workers import the kind by this name (the repository root is on their PYTHONPATH)
KIND = "ops.bench.fan_out:FAN_OUT"


def _tools() -> ToolRegistry:
    return ToolRegistry([kinds.noop, SPAWN_TOOL])


def _prepare(data: Mapping[str, Any]) -> dict[str, Any]:
    return {"user_prompt": str(data.get("task", "fan out"))}


FAN_OUT = JobKind(
    name="fan_out", system_prompt="You are a benchmark agent.", tools=_tools, prepare=_prepare
)


def _delayed(replies: list[dict[str, Any]], latency: float) -> list[dict[str, Any]]:
    return [{**r, "delay_s": latency} for r in replies] if latency else replies


def scripts(folder: Path, children: int, steps: int, latency: float) -> str:
    """The root's model spec; its spawn names the children's script."""
    child = kinds.write_script(
        folder, f"child-{steps}-{latency:g}", _delayed(kinds.replies(steps - 1), latency)
    )
    spawn = {"children": [{"role": "worker", "input": {}, "model": child}] * children}
    root = [
        {"content": "fan out", "tool_calls": [{"name": "spawn_agents", "arguments": spawn}]},
        {"content": "joined"},
    ]
    return kinds.write_script(folder, f"root-{children}-{latency:g}", _delayed(root, latency))


def _status(tw: Any, session_id: str) -> str:
    return str(tw.store.get(session_id).status.value)


def wall_run(
    url: str, folder: Path, *, children: int, steps: int, latency: float, workers: int, threads: int
) -> dict[str, float]:
    """Seconds from publishing the root until it completed, and the ideal."""
    s = common.settings(url, "fanout")
    tw = common.client(s)
    root_model = scripts(folder, children, steps, latency)
    warm_model = scripts(folder, 2, 2, 0.0)
    env = common.worker_env(s)
    pools = [
        common.Worker("tickwork.worker.tick.app", s.queue, env, pool="threads", concurrency=threads)
        for _ in range(workers)
    ]
    try:

        def check() -> None:
            for w in pools:
                w.check()

        warm = str(tw.submit(KIND, {}, model=warm_model, budgets=kinds.BUDGETS).id)
        common.until(
            lambda: _status(tw, warm) == "completed", timeout=120, what="warm-up", check=check
        )
        publish = tw.publish
        tw.publish = lambda *_: None
        try:
            root = str(tw.submit(KIND, {}, model=root_model, budgets=kinds.BUDGETS).id)
        finally:
            tw.publish = publish
        pgids = {w.proc.pid for w in pools}

        def cpu() -> tuple[float, float]:
            return (
                cpu_seconds(lambda pgid, name: pgid in pgids),
                cpu_seconds(lambda pgid, name: name.startswith("postgres")),
            )

        cpu_before = cpu()
        started = time.time()
        tw.publish(root, 0)
        common.until(
            lambda: tw.store.get(root).status.terminal,
            timeout=600,
            poll=0.02,
            what="the root",
            check=check,
        )
        finished = time.time()
        cpu_after = cpu()
        head = tw.store.get(root)
        if head.status.value != "completed":
            raise RuntimeError(f"the root ended {head.status.value}: {head.error_message}")
        with tw.store.engine.connect() as conn:
            ticks = conn.execute(
                text("select sum(version) from tickwork_sessions where root_id = :r or id = :r"),
                {"r": root},
            ).scalar_one()
    finally:
        for w in pools:
            w.stop()
        tw.close()
    ideal = (2 + steps) * latency
    wall = finished - started
    workers_cpu = cpu_after[0] - cpu_before[0]
    postgres_cpu = cpu_after[1] - cpu_before[1]
    return {
        "wall_s": wall,
        "ideal_s": ideal,
        "ratio": wall / ideal,
        "ticks": float(ticks),
        "worker_cpu_ms_per_tick": 1000 * workers_cpu / ticks,
        "postgres_cpu_ms_per_tick": 1000 * postgres_cpu / ticks,
    }


def _tick(rt: Any, session_id: str) -> float:
    """One tick of the session, in this process; its seconds."""
    from tickwork.worker.tick.advance import Outcome, advance

    version = rt.store.get(session_id).version
    started = time.perf_counter()
    outcome = advance(rt, session_id, version).outcome
    spent = time.perf_counter() - started
    if outcome is not Outcome.SAVED:
        raise RuntimeError(f"a tick of {session_id} was {outcome.value}")
    return spent


def _last_tick(rt: Any, session_id: str) -> float:
    """Tick the session until it ends; the seconds of its last tick."""
    spent = 0.0
    for _ in range(1000):
        if rt.store.get(session_id).status.terminal:
            return spent
        spent = _tick(rt, session_id)
    raise RuntimeError(f"{session_id} did not end")


def join_cost(url: str, folder: Path, *, children: int, steps: int) -> dict[str, float]:
    """Milliseconds per child the tree itself costs: spawning, the child's end counted on
    the join, the woken root's join tick."""
    s = common.settings(url, "join")
    rt, _ = common.in_process_runtime(s)
    tw = common.client(s)
    tw.publish = lambda *_: None
    try:
        model = scripts(folder, children, steps, 0.0)
        root = str(tw.submit(KIND, {}, model=model, budgets=kinds.BUDGETS).id)
        _tick(rt, root)  # the model asks for the spawn
        spawn = _tick(rt, root)  # the spawn: children, their first ticks, the join's row
        assert rt.store.get(root).status.value == "waiting_children"
        ends = [_last_tick(rt, c.id) for c in rt.store.children(root)]
        join = _tick(rt, root)  # the woken root records its children's outcomes
        _last_tick(rt, root)
        child_model = kinds.write_script(
            folder, f"child-{steps}-0", _delayed(kinds.replies(steps - 1), 0.0)
        )
        plain = []
        for _ in range(children):
            alone = str(tw.submit(KIND, {}, model=child_model, budgets=kinds.BUDGETS).id)
            plain.append(_last_tick(rt, alone))
    finally:
        rt.close()
        tw.close()
    end_extra = statistics.median(ends) - statistics.median(plain)
    return {
        "spawn_ms_per_child": 1000 * spawn / children,
        "join_tick_ms_per_child": 1000 * join / children,
        "end_extra_ms_per_child": 1000 * end_extra,
        "join_ms_per_child": 1000 * ((spawn + join) / children + end_extra),
        "child_last_tick_ms": 1000 * statistics.median(ends),
        "plain_last_tick_ms": 1000 * statistics.median(plain),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=50)
    parser.add_argument("--steps", type=int, default=5, help="model replies a child makes")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds a model reply takes")
    parser.add_argument("--workers", type=int, default=2, help="celery worker processes")
    parser.add_argument("--threads", type=int, default=32, help="threads each worker runs")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--quick", action="store_true", help="a check: 5 children of 2 steps, 0.2 s, 1 repeat"
    )
    args = parser.parse_args()
    if args.quick:
        args.children, args.steps, args.latency, args.repeats = 5, 2, 0.2, 1
        args.workers, args.threads = 1, 8
    print(common.machine(), flush=True)
    walls: list[dict[str, float]] = []
    joins: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for repeat in range(args.repeats):
            with common.database(f"fanout{repeat}") as url:
                walls.append(
                    wall_run(
                        url,
                        folder,
                        children=args.children,
                        steps=args.steps,
                        latency=args.latency,
                        workers=args.workers,
                        threads=args.threads,
                    )
                )
            print(f"run {repeat}: {walls[-1]}", flush=True)
            with common.database(f"join{repeat}") as url:
                joins.append(join_cost(url, folder, children=args.children, steps=args.steps))
            print(f"join {repeat}: {joins[-1]}", flush=True)
    ratios = [w["ratio"] for w in walls]
    print(common.show("wall / ideal", ratios), flush=True)
    print(common.show("join ms per child", [j["join_ms_per_child"] for j in joins]), flush=True)
    for key in ("worker_cpu_ms_per_tick", "postgres_cpu_ms_per_tick"):
        print(common.show(key.replace("_", " "), [w[key] for w in walls]), flush=True)
    common.emit(
        "fan_out",
        {
            "children": args.children,
            "steps": args.steps,
            "latency_s": args.latency,
            "workers": args.workers,
            "threads": args.threads,
            "repeats": args.repeats,
            "ideal_s": walls[0]["ideal_s"],
            "wall_s": common.stats([w["wall_s"] for w in walls]),
            "ratio": common.stats(ratios),
            "target_ratio": 1.15,
            "cpu_ms_per_tick": {
                k: common.stats([w[f"{k}_cpu_ms_per_tick"] for w in walls])
                for k in ("worker", "postgres")
            },
            "join": {k: common.stats([j[k] for j in joins]) for k in joins[0]},
            "load": common.machine()["load"],
        },
    )


if __name__ == "__main__":
    main()
