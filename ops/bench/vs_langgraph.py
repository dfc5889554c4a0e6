"""Benchmark 3: the same agent loop on tickwork and on LangGraph (StateGraph + PostgresSaver).

A fake model returns one tool call with 2 KB of text per step, the tool returns 200
characters, 300 iterations, then a final answer. Both run in this process on the same
Postgres, each in a database of its own:

- tickwork: ticks driven one after another without Celery; database time per tick = the
  store's claim + start_call + save.
- LangGraph: `MessagesState`, an agent node and a `ToolNode`, `PostgresSaver` with
  `durability="sync"` (a checkpoint written before the next super-step, as tickwork saves
  before the next tick); checkpoint time per super-step = put + put_writes (+ get_tuple).

Figures: persistence time per step (tick / super-step) and per iteration (two of each), its
growth first 20 against last 20 iterations, and the bytes stored (pg_total_relation_size,
over the empty schema). Needs the `bench` extra (langgraph-checkpoint-postgres).

    python ops/bench/vs_langgraph.py [--iterations 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops.bench import common, kinds

LANGGRAPH_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations")
EDGE = 20


def tickwork(iterations: int, text_chars: int, folder: Path) -> dict[str, Any]:
    with common.database("vs_tw") as url:
        s = common.settings(url, "vs")
        tw = common.client(s)
        rt, published = common.in_process_runtime(s)
        timer = common.StoreTimer()
        timer.attach(rt.store)
        model = kinds.write_script(
            folder,
            f"vs{iterations}",
            kinds.replies(iterations, tool_name="pad200", text_chars=text_chars),
        )
        empty = sum(common.table_sizes(rt.store.engine).values())
        started = time.perf_counter()
        ticks = common.drive(rt, published, common.submit(tw, model), timer)
        wall = time.perf_counter() - started
        stored = sum(common.table_sizes(rt.store.engine).values()) - empty
        tw.close()
        rt.store.engine.dispose()
    per_tick = timer.per_tick("claim", "start_call", "save")
    assert ticks == 2 * iterations + 1, ticks
    per_iteration = [per_tick[2 * i] + per_tick[2 * i + 1] for i in range(iterations)]
    return {
        "per_step": per_tick,
        "per_iteration": per_iteration,
        "stored": stored,
        "wall": wall,
        "writes": timer.per_tick("start_call", "save"),
        "reads": timer.per_tick("claim"),
    }


def langgraph(iterations: int, text_chars: int) -> dict[str, Any]:
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from sqlalchemy import create_engine

    thoughts = [kinds.prose(text_chars, seed=i) for i in range(iterations)]

    @tool
    def pad200(i: int) -> str:
        """Return 200 characters."""
        return f"{i:08d}" + "y" * 192

    def agent(state: MessagesState) -> dict[str, Any]:
        n = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        if n >= iterations:
            return {"messages": [AIMessage(content="done")]}
        return {
            "messages": [
                AIMessage(
                    content=thoughts[n],
                    tool_calls=[
                        {
                            "name": "pad200",
                            "args": {"i": n},
                            "id": f"s{n + 1}c0",
                            "type": "tool_call",
                        }
                    ],
                )
            ]
        }

    class Timed(PostgresSaver):
        """Times the checkpoint calls and groups them by super-step (one `put` each)."""

        steps: list[float]
        pending: float = 0.0

        def _timed(self, fn: Any, *args: Any, ends_step: bool = False, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.pending += time.perf_counter() - started
                if ends_step:
                    self.steps.append(self.pending)
                    self.pending = 0.0

        def get_tuple(self, config: Any) -> Any:
            return self._timed(super().get_tuple, config)

        def put(self, *args: Any, **kw: Any) -> Any:
            return self._timed(super().put, *args, ends_step=True, **kw)

        def put_writes(self, *args: Any, **kw: Any) -> Any:
            return self._timed(super().put_writes, *args, **kw)

    with (
        common.database("vs_lg", migrate=False) as url,
        Timed.from_conn_string(common.plain_url(url)) as saver,
    ):
        saver.setup()
        engine = create_engine(url)
        empty = sum(common.table_sizes(engine, LANGGRAPH_TABLES).values())
        saver.steps = []
        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_node("tools", ToolNode([pad200]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        app = graph.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 10 * iterations}
        started = time.perf_counter()
        result = app.invoke(
            {"messages": [("user", "run the benchmark script")]}, config, durability="sync"
        )
        wall = time.perf_counter() - started
        assert len(result["messages"]) == 2 * iterations + 2, len(result["messages"])
        stored = sum(common.table_sizes(engine, LANGGRAPH_TABLES).values()) - empty
        engine.dispose()
    # super-step 0 is the input; then agent, tools, agent, tools, ... agent (final)
    steps = saver.steps[1:]
    per_iteration = [steps[2 * i] + steps[2 * i + 1] for i in range(iterations)]
    return {"per_step": saver.steps, "per_iteration": per_iteration, "stored": stored, "wall": wall}


def growth(per_iteration: list[float]) -> float:
    return statistics.mean(per_iteration[-EDGE:]) / statistics.mean(per_iteration[:EDGE])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--text", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-"))
    rows: dict[str, list[float]] = {
        k: []
        for k in (
            "tw_step_ms",
            "lg_step_ms",
            "step_ratio",
            "tw_write_ms",
            "tw_claim_ms",
            "write_ratio",
            "tw_write_growth",
            "tw_iter_ms",
            "lg_iter_ms",
            "tw_growth",
            "lg_growth",
            "tw_last20_ms",
            "lg_last20_ms",
            "tw_stored",
            "lg_stored",
            "stored_ratio",
        )
    }
    for rep in range(args.repeats):
        tw = tickwork(args.iterations, args.text, folder)
        lg = langgraph(args.iterations, args.text)
        tw_step = statistics.mean(tw["per_step"]) * 1000
        lg_step = statistics.mean(lg["per_step"]) * 1000
        values = {
            "tw_step_ms": tw_step,
            "lg_step_ms": lg_step,
            "step_ratio": tw_step / lg_step,
            "tw_write_ms": statistics.mean(tw["writes"]) * 1000,
            "tw_claim_ms": statistics.mean(tw["reads"]) * 1000,
            "write_ratio": statistics.mean(tw["writes"]) * 1000 / lg_step,
            "tw_write_growth": growth(
                [tw["writes"][2 * i] + tw["writes"][2 * i + 1] for i in range(args.iterations)]
            ),
            "tw_iter_ms": statistics.mean(tw["per_iteration"]) * 1000,
            "lg_iter_ms": statistics.mean(lg["per_iteration"]) * 1000,
            "tw_growth": growth(tw["per_iteration"]),
            "lg_growth": growth(lg["per_iteration"]),
            "tw_last20_ms": statistics.mean(tw["per_iteration"][-EDGE:]) * 1000,
            "lg_last20_ms": statistics.mean(lg["per_iteration"][-EDGE:]) * 1000,
            "tw_stored": tw["stored"],
            "lg_stored": lg["stored"],
            "stored_ratio": tw["stored"] / lg["stored"],
        }
        for key, value in values.items():
            rows[key].append(value)
        print(
            f"run {rep + 1}: tickwork {tw_step:.2f} ms/tick, LangGraph {lg_step:.2f} "
            f"ms/super-step (ratio {tw_step / lg_step:.3f}); growth first/last {EDGE} "
            f"iterations: tickwork x{values['tw_growth']:.2f}, LangGraph "
            f"x{values['lg_growth']:.2f}; stored: tickwork {tw['stored'] / 2**20:.2f} MiB, "
            f"LangGraph {lg['stored'] / 2**20:.1f} MiB (ratio {values['stored_ratio']:.4f}); "
            f"wall: tickwork {tw['wall']:.1f}s, LangGraph {lg['wall']:.1f}s",
            flush=True,
        )
    for key, values in rows.items():
        print(common.show(key, values, digits=4 if "ratio" in key else 2))
    common.emit("vs_langgraph", {k: common.stats(v) for k, v in rows.items()})


if __name__ == "__main__":
    main()
