"""LangGraph as a contender of ops/bench/peers.py: a `StateGraph` of `MessagesState` with an
agent node (the fake model) and a `ToolNode`, checkpointed by `PostgresSaver` with
`durability="sync"` (each super-step's checkpoint written before the next one starts, as
tickwork saves before the next tick). LangGraph has no workers or queue of its own: a run's
sessions are `invoke`d from a pool of `concurrency` threads, on a connection pool of as many
connections (the saver's documented settings: autocommit, no prepared statements, dict
rows).
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ops.bench import contenders


@tool
def noop(i: int) -> str:
    """Return at once."""
    return "ok"


def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
    """The fake model's reply to the transcript so far."""
    steps = config["configurable"]["steps"]
    index = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
    answer = contenders.reply(steps, index)
    calls = [
        {"name": c["name"], "args": c["arguments"], "id": f"s{index}c{i}", "type": "tool_call"}
        for i, c in enumerate(answer.get("tool_calls") or [])
    ]
    return {"messages": [AIMessage(content=answer["content"], tool_calls=calls)]}


class LangGraph:
    def __init__(self, options: contenders.Options) -> None:
        self.options = options

    def __enter__(self) -> LangGraph:
        size = self.options.concurrency
        self.pool = ConnectionPool(
            self.options.url,
            min_size=size,
            max_size=size,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=True,
        )
        saver = PostgresSaver(self.pool)  # type: ignore[arg-type]
        saver.setup()
        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_node("tools", ToolNode([noop]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        self.graph = graph.compile(checkpointer=saver)
        self.threads = ThreadPoolExecutor(size, thread_name_prefix="langgraph-session")
        return self

    def __exit__(self, *_: object) -> None:
        self.threads.shutdown()
        self.pool.close()

    def session(self, steps: int) -> float:
        """One session to its end; returns when its last checkpoint was written."""
        config: RunnableConfig = {
            "configurable": {"thread_id": uuid.uuid4().hex, "steps": steps},
            "recursion_limit": 10 * steps + 10,
        }
        result = self.graph.invoke(
            {"messages": [HumanMessage("run the benchmark script")]}, config, durability="sync"
        )
        ended = time.time()
        if len(result["messages"]) != 2 * steps + 2:
            raise RuntimeError(f"a LangGraph session ended with {len(result['messages'])} messages")
        return ended

    def run(self, sessions: int, steps: int) -> float:
        futures = [self.threads.submit(self.session, steps) for _ in range(sessions)]
        return max(f.result(timeout=contenders.TIMEOUT) for f in futures)
