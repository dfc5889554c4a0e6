"""Graph job kinds for the tests: the example refund graph, a slow payer a kill can land
in, loops that never reach END, and a second version of the refund graph."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Literal

from pydantic import BaseModel
from tickwork.fsm.errors import SessionFinished
from tickwork.fsm.graph import END, START, Branches, Graph, add, append, fan_out
from tickwork.worker.tick.graphs import NodeContext, graph_kind

from examples import refund_graph

#: the example as shipped
REFUND = refund_graph.KIND
#: the example at version 2: a worker with it refuses version 1's sessions
REFUND_V2 = graph_kind(refund_graph.build(version="2").compile())


def slow_refund(state: refund_graph.Refund, ctx: NodeContext) -> dict[str, object]:
    """Pays, then sleeps (in a worker started with TICKWORK_TEST_SLOW=1) before its update
    is saved: a kill there leaves a payment made and the node's run unsaved."""
    done = refund_graph.refund(state, ctx)
    if os.environ.get("TICKWORK_TEST_SLOW") == "1":
        time.sleep(30)
    return done


def _slow(name: str = "refund_slow", *, careful: bool = False) -> Graph:
    graph = refund_graph.build()
    graph.name = name
    graph.nodes.pop("refund")
    graph.add_node(
        "refund",
        slow_refund,
        interrupt_before=not careful,
        idempotent=not careful,
        on_reject="report",
    )
    return graph


SLOW_REFUND = graph_kind(_slow().compile())
#: the slow payer, not idempotent and not interrupted: a kill leaves it in doubt
CAREFUL_REFUND = graph_kind(_slow("refund_careful", careful=True).compile())


class Poll(BaseModel):
    n: int = 0
    done: bool = False


def wait_for_it(state: Poll) -> dict[str, object]:
    return {}


def count(state: Poll) -> dict[str, object]:
    return {"n": state.n + 1}


def again(state: Poll) -> Literal["poll", "__end__"]:
    return END if state.done else "poll"


def _loop(name: str, fn: object) -> Graph:
    graph = Graph(name, version="1", state=Poll)
    graph.add_node("poll", fn, idempotent=True)  # type: ignore[arg-type]
    graph.add_edge(START, "poll")
    graph.add_conditional_edges("poll", again)
    return graph


#: polls on the same state for ever: loop detection stops it
STUCK = graph_kind(_loop("stuck", wait_for_it).compile())
#: counts for ever (the state changes): the step budget stops it
COUNTER = graph_kind(_loop("counter", count).compile(), budgets={"max_steps": 6})


def sloppy(state: Poll) -> dict[str, object]:
    return {"n": 1, "colour": "red"}  # not in the state: refused when it returns


def _sloppy() -> Graph:
    graph = Graph("sloppy", version="1", state=Poll)
    graph.add_node("paint", sloppy, idempotent=True)
    graph.add_edge(START, "paint").add_edge("paint", END)
    return graph


SLOPPY = graph_kind(_sloppy().compile())


def offer(state: Poll) -> dict[str, object]:
    return {"n": 100}


def _proposing() -> Graph:
    graph = Graph("proposing", version="1", state=Poll)
    graph.add_node(
        "offer",
        offer,
        idempotent=True,
        approve_update=lambda update: "a big offer" if update.get("n", 0) > 50 else None,
    )
    graph.add_node("close", lambda s: {"done": True}, idempotent=True)
    graph.add_edge(START, "offer").add_edge("offer", "close").add_edge("close", END)
    return graph


#: the update `offer` proposes waits for a person when it is big
PROPOSING = graph_kind(_proposing().compile())


def _broken_check(update: object) -> str | None:
    raise ValueError("the offer limit is not configured")


def _checking() -> Graph:
    graph = Graph("checking", version="1", state=Poll)
    graph.add_node("offer", offer, idempotent=True, approve_update=_broken_check)
    graph.add_edge(START, "offer").add_edge("offer", END)
    return graph


#: the check of `offer`'s update raises: a person decides on it
CHECKING = graph_kind(_checking().compile())


class Ask(BaseModel):
    size: int = 0
    answer: str = ""


def ask(state: Ask, ctx: NodeContext) -> dict[str, object]:
    """Asks the model about six tool outputs of `size` bytes each."""
    messages: list[dict[str, object]] = [{"role": "user", "content": "what do these say?"}]
    messages += [
        {"role": "tool", "tool_call_id": f"t{i}", "content": f"{i}" * state.size} for i in range(6)
    ]
    return {"answer": ctx.generate(messages).content}


def _asking() -> Graph:
    graph = Graph("asking", version="1", state=Ask)
    graph.add_node("ask", ask, idempotent=True)
    graph.add_edge(START, "ask").add_edge("ask", END)
    return graph


#: one node that calls the model (`ctx.generate`)
ASK = graph_kind(_asking().compile())


def ask_more(state: Ask, ctx: NodeContext) -> dict[str, object]:
    """Asks the model about one tool output of `size` bytes, then, after its answer, about
    five more (a scripted model plays its first reply, then its second)."""
    messages: list[dict[str, object]] = [{"role": "user", "content": "what does this say?"}]
    messages.append({"role": "tool", "tool_call_id": "t0", "content": "0" * state.size})
    said = ctx.generate(messages).content
    messages += [{"role": "assistant", "content": said}, {"role": "user", "content": "and?"}]
    messages += [
        {"role": "tool", "tool_call_id": f"t{i}", "content": f"{i}" * state.size}
        for i in range(1, 6)
    ]
    return {"answer": ctx.generate(messages).content}


def _asking_more() -> Graph:
    graph = Graph("asking_more", version="1", state=Ask)
    graph.add_node("ask", ask_more, idempotent=True)
    graph.add_edge(START, "ask").add_edge("ask", END)
    return graph


#: one node that calls the model twice, the second prompt six times the first's size
ASK_MORE = graph_kind(_asking_more().compile())


def peek(state: Ask, ctx: NodeContext) -> dict[str, object]:
    """Asks the model about one tool output of `size` bytes."""
    messages: list[dict[str, object]] = [{"role": "user", "content": "what does this say?"}]
    messages.append({"role": "tool", "tool_call_id": "t0", "content": "0" * state.size})
    return {"answer": ctx.generate(messages).content}


def _peeking_then_asking() -> Graph:
    graph = Graph("peeking_then_asking", version="1", state=Ask)
    graph.add_node("peek", peek, idempotent=True)
    graph.add_node("ask", ask, idempotent=True)
    graph.add_edge(START, "peek").add_edge("peek", "ask").add_edge("ask", END)
    return graph


#: two nodes that call the model once each, the second's prompt six times the first's size
PEEK_THEN_ASK = graph_kind(_peeking_then_asking().compile())


class AskAround(BaseModel):
    size: int = 0
    part: int = 0
    answers: list[str] = []


def ask_then_split(state: AskAround, ctx: NodeContext) -> object:
    """Asks the model as `ask` does, then fans out to two branches that ask it too."""
    ask(Ask(size=state.size), ctx)
    return fan_out("ask_part", [{"part": i} for i in range(2)])


def ask_part(state: AskAround, ctx: NodeContext) -> dict[str, object]:
    return {"answers": [str(ask(Ask(size=state.size), ctx)["answer"])]}


def _asking_around() -> Graph:
    graph = Graph("asking_around", "1", AskAround, reducers={"answers": append})
    graph.add_node("split", ask_then_split, idempotent=True)
    graph.add_node("ask_part", ask_part, branch=True, idempotent=True)
    graph.add_edge(START, "split").add_edge("split", END)
    return graph


#: a node that calls the model and fans out to branches that call it too
ASK_AROUND = graph_kind(_asking_around().compile())


class MapSum(BaseModel):
    """A map-reduce over `items`: each branch squares its `item`."""

    items: list[int] = []
    item: int = 0
    squares: list[int] = []
    total: int = 0
    finished: bool = False


def split(state: MapSum) -> object:
    return fan_out("square", [{"item": i} for i in state.items])


def square(state: MapSum, ctx: NodeContext) -> dict[str, object]:
    if os.environ.get("TICKWORK_TEST_SLOW") == "1":
        time.sleep(0.5)  # a kill lands while branches run
    # a branch gives its own part; the reducers merge the parts at the join
    return {"squares": [state.item * state.item], "total": state.item * state.item}


def square_after_a_cancel(state: MapSum, ctx: NodeContext) -> dict[str, object]:
    """Cancels its tree's root (as `tickwork cancel ROOT` would), then squares: the cancel
    lands while the branch's tick runs."""
    assert ctx.head.root_id is not None
    with contextlib.suppress(SessionFinished):  # cancelled by an earlier branch
        ctx.rt.store.request_cancel(ctx.head.root_id, now=ctx.rt.clock(), by="a test")
    return square(state, ctx)


def finish(state: MapSum) -> dict[str, object]:
    return {"finished": True}


def _map_sum(name: str = "mapsum", square: object = square) -> Graph:
    graph = Graph(name, "1", MapSum, reducers={"squares": append, "total": add})
    # idempotent: a node a kill lands in runs again (else it would wait for a person)
    graph.add_node("split", split, idempotent=True)
    graph.add_node("square", square, branch=True, idempotent=True)  # type: ignore[arg-type]
    graph.add_node("finish", finish, idempotent=True)
    graph.add_edge(START, "split").add_edge("split", "finish").add_edge("finish", END)
    return graph


MAP_SUM = graph_kind(_map_sum().compile())
#: the map-reduce whose branches cancel the tree's root while they run
MAP_SUM_CANCELLED = graph_kind(_map_sum("mapsum_cancelled", square_after_a_cancel).compile())


class Ledger(BaseModel):
    """A node that raises `message` (`times` copies of it), and a map-reduce whose branch
    raises it."""

    message: str = "the ledger is closed"
    times: int = 1
    items: list[int] = []
    item: int = 0
    squares: list[int] = []


def charge(state: Ledger) -> dict[str, object]:
    raise LookupError(state.message * state.times)


def split_ledger(state: Ledger) -> object:
    return fan_out("charge", [{"item": i} for i in state.items])


def split_lazily(state: Ledger) -> object:
    # built by hand, not with fan_out: a generator of inputs, which has no length
    return Branches("charge", (dict(item=i) for i in state.items))  # type: ignore[arg-type]


def _raising(name: str, *, idempotent: bool) -> Graph:
    graph = Graph(name, "1", Ledger)
    graph.add_node("charge", charge, idempotent=idempotent)
    graph.add_edge(START, "charge").add_edge("charge", END)
    return graph


def _raising_branches() -> Graph:
    graph = Graph("raising_branches", "1", Ledger, reducers={"squares": append})
    graph.add_node("split", split_ledger, idempotent=True)
    graph.add_node("charge", charge, branch=True, idempotent=True)
    graph.add_edge(START, "split").add_edge("split", END)
    return graph


def _lazy_branches() -> Graph:
    graph = Graph("lazy_branches", "1", Ledger, reducers={"squares": append})
    graph.add_node("split", split_lazily, idempotent=True)
    graph.add_node("charge", charge, branch=True, idempotent=True)
    graph.add_edge(START, "split").add_edge("split", END)
    return graph


#: one node that raises, and may run twice
RAISING = graph_kind(_raising("raising", idempotent=True).compile())
#: one node that raises, and may not run twice
RAISING_ONCE = graph_kind(_raising("raising_once", idempotent=False).compile())
#: a node that fans out to branches that raise
RAISING_BRANCHES = graph_kind(_raising_branches().compile())


class Rounds(BaseModel):
    """A fan-out run `rounds` times, `width` branches each: `parts` gathers the branches'."""

    rounds: int = 1
    width: int = 1
    done: int = 0
    parts: list[int] = []


def split_round(state: Rounds) -> object:
    return fan_out("part", [{"done": state.done}] * state.width)


def part(state: Rounds) -> dict[str, object]:
    return {"parts": [state.done]}


def next_round(state: Rounds) -> dict[str, object]:
    return {"done": state.done + 1}


def _more(state: Rounds) -> Literal["split", "__end__"]:
    return "split" if state.done < state.rounds else END


def _rounds() -> Graph:
    graph = Graph("rounds", "1", Rounds, reducers={"parts": append})
    graph.add_node("split", split_round, idempotent=True)
    graph.add_node("part", part, branch=True, idempotent=True)
    graph.add_node("count", next_round, idempotent=True)
    graph.add_edge(START, "split").add_edge("split", "count")
    graph.add_conditional_edges("count", _more)
    return graph


#: a node that fans out again after each join: its tree grows by `width` a round
ROUNDS = graph_kind(_rounds().compile())


class Nested(BaseModel):
    """Branches that fan out again, `width` each, until `depth` levels of them."""

    depth: int = 1
    width: int = 1
    level: int = 0
    leaves: list[int] = []


def split_nested(state: Nested) -> object:
    return fan_out("deeper", [{"level": 1}] * state.width)


def deeper(state: Nested) -> object:
    if state.level < state.depth:
        return fan_out("deeper", [{"level": state.level + 1}] * state.width)
    return {"leaves": [state.level]}


def _nested() -> Graph:
    graph = Graph("nested", "1", Nested, reducers={"leaves": append})
    graph.add_node("split", split_nested, idempotent=True)
    graph.add_node("deeper", deeper, branch=True, idempotent=True)
    graph.add_edge(START, "split").add_edge("split", END)
    return graph


#: a branch node that fans out to itself: each level a child of the one above it
NESTED = graph_kind(_nested().compile())
#: a node whose branches break the worker's handling of them (a TypeError, not a refusal)
LAZY_BRANCHES = graph_kind(_lazy_branches().compile())
