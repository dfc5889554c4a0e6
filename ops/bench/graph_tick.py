"""Benchmark: a graph's per-node tick against the agent tick of benchmark 1.

The graph: 100 nodes in a line whose functions do nothing but set one state field (one
tick each, plus the first tick that picks the first node). The agent: benchmark 1's
sessions (ops/bench/tick_throughput.py: a scripted model, tools that return at once).
Same settings: 20 concurrent sessions, one `celery worker` (prefork) at concurrency 1 and
2 on Postgres + Redis, a fresh warmed-up worker per run, runs alternating. Prints ticks/s
of each and the ratio graph / agent (above 1: a node's tick is cheaper than an agent's).

    python ops/bench/graph_tick.py [--repeats 3] [--sessions 20] [--nodes 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pydantic import BaseModel
from sqlalchemy import text
from tickwork.fsm.graph import END, START, Graph
from tickwork.worker.tick.graphs import graph_kind

from ops.bench import common, kinds
from ops.bench.tick_throughput import tickwork_run

NODES = 100
#: workers import the kind by this name (the repository root is on their PYTHONPATH)
KIND = "ops.bench.graph_tick:LINEAR"


class Line(BaseModel):
    at: int = 0


def _node(i: int) -> Any:
    def node(state: Line) -> dict[str, int]:
        return {"at": i}

    return node


def line(nodes: int = NODES) -> Graph:
    graph = Graph("bench_line", version="1", state=Line)
    names = [f"n{i}" for i in range(nodes)]
    for i, name in enumerate(names):
        graph.add_node(name, _node(i), idempotent=True)
    for a, b in zip([START, *names], [*names, END], strict=True):
        graph.add_edge(a, b)
    return graph


LINEAR = graph_kind(line().compile(), budgets={**kinds.BUDGETS})


def graph_run(url: str, concurrency: int, sessions: int, folder: Path) -> float:
    """ticks/s of sessions of the linear graph."""
    s = common.settings(url, "graph")
    tw = common.client(s)
    model = kinds.write_script(folder, "graph-none", kinds.replies(1))

    def create() -> str:
        publish = tw.publish
        tw.publish = lambda *_: None
        try:
            return str(tw.submit(KIND, {}, model=model, budgets=kinds.BUDGETS).id)
        finally:
            tw.publish = publish

    def finished(ids: list[str]) -> bool:
        with tw.store.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "select status, count(*) from tickwork_sessions where id = any(:ids) group by 1"
                ),
                {"ids": ids},
            ).all()
        counts = {status: n for status, n in rows}
        if set(counts) - {"completed", "ready", "executing"}:
            raise RuntimeError(f"benchmark graph sessions did not complete: {counts}")
        return counts.get("completed", 0) == len(ids)

    try:
        with common.worker(
            "tickwork.worker.tick.app", s.queue, common.worker_env(s), concurrency=concurrency
        ) as w:
            warm = [create() for _ in range(2 * concurrency)]
            for session_id in warm:
                tw.publish(session_id, 0)
            common.until(lambda: finished(warm), timeout=300, what="graph warm-up", check=w.check)
            ids = [create() for _ in range(sessions)]
            started = time.time()
            for session_id in ids:
                tw.publish(session_id, 0)
            common.until(
                lambda: finished(ids), timeout=900, poll=0.05, what="graph sessions", check=w.check
            )
        with tw.store.engine.connect() as conn:
            end, total = conn.execute(
                text(
                    "select extract(epoch from max(updated_at)), sum(version) from "
                    "tickwork_sessions where id = any(:ids)"
                ),
                {"ids": ids},
            ).one()
    finally:
        tw.close()
    return float(total) / (float(end) - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=100, help="the agent sessions' ticks")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-"))
    figures: dict[str, dict[str, object]] = {}
    with common.database("graph_tick") as url:
        for concurrency in args.concurrency:
            agent, graph, ratio = [], [], []
            for rep in range(args.repeats):
                a = tickwork_run(url, concurrency, args.sessions, args.ticks, folder)
                g = graph_run(url, concurrency, args.sessions, folder)
                agent.append(a)
                graph.append(g)
                ratio.append(g / a)
                print(
                    f"c={concurrency} run {rep + 1}: agent {a:.1f} ticks/s, "
                    f"graph {g:.1f} ticks/s, ratio graph/agent {g / a:.3f}",
                    flush=True,
                )
            print(common.show(f"c={concurrency} agent ticks/s", agent, digits=1))
            print(common.show(f"c={concurrency} graph node ticks/s", graph, digits=1))
            print(common.show(f"c={concurrency} ratio graph/agent", ratio, digits=3))
            figures[f"c{concurrency}"] = {
                "agent": common.stats(agent),
                "graph": common.stats(graph),
                "ratio": common.stats(ratio),
            }
    common.emit("graph_tick", figures)


if __name__ == "__main__":
    main()
