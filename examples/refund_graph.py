"""An approval pipeline as a graph: draft a refund, check it, wait for a person before the
money moves, move it once (idempotency key), report.

    START -> draft -> check -> (ok?) refund -> report -> END
                                   \\-> report (refused by the checks)

`refund` is interrupted before it runs: a person approves it, edits the state (e.g. a lower
amount) or rejects it (the graph then goes to `report`). The payment is keyed by the node's
idempotency key, so a worker that dies while paying and runs the node again pays once.

Run it: `tickwork demo --graph` (offline: a scripted model drafts the note), or register
`KIND` with TICKWORK_IMPORTS=refund_graph:KIND (this folder on the workers' PYTHONPATH).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from tickwork.fsm.graph import END, START, Graph
from tickwork.worker.tick.graphs import NodeContext, graph_kind

#: the most a refund may be without a manager; larger ones are refused by the checks
LIMIT = 500.0


class Refund(BaseModel):
    order_id: str
    amount: float
    reason: str = ""
    #: the JSON Lines file payments are written to (the effect's stand-in for a bank)
    ledger: str
    note: str = ""
    problems: list[str] = []
    payment_id: str = ""
    report: str = ""


def draft(state: Refund, ctx: NodeContext) -> dict[str, object]:
    """The model writes the note to the customer."""
    reply = ctx.generate(
        [
            {"role": "system", "content": "You write short, polite refund notes."},
            {
                "role": "user",
                "content": f"Order {state.order_id}: refund ${state.amount:.2f} "
                f"because {state.reason or 'the customer asked'}. Write the note.",
            },
        ]
    )
    return {"note": reply.content.strip()}


def check(state: Refund) -> dict[str, object]:
    """Rules a refund must pass before anyone is asked."""
    problems = []
    if state.amount <= 0:
        problems.append("the amount is not positive")
    if state.amount > LIMIT:
        problems.append(f"${state.amount:.2f} is over the ${LIMIT:.0f} limit")
    if not state.note:
        problems.append("there is no note for the customer")
    return {"problems": problems}


def route(state: Refund) -> Literal["refund", "report"]:
    return "report" if state.problems else "refund"


def pay(ledger: Path, key: str, order_id: str, amount: float) -> str:
    """The effect: one payment per idempotency key, however often it is asked for."""
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            entry = json.loads(line)
            if entry["key"] == key:
                return str(entry["payment_id"])
    payment_id = "pay-" + hashlib.sha256(key.encode()).hexdigest()[:12]
    entry = {"key": key, "order_id": order_id, "amount": amount, "payment_id": payment_id}
    with open(ledger, "a") as out:
        out.write(json.dumps(entry) + "\n")
        out.flush()
        os.fsync(out.fileno())
    return payment_id


def refund(state: Refund, ctx: NodeContext) -> dict[str, object]:
    """Move the money, keyed by the node's idempotency key."""
    payment = pay(Path(state.ledger), ctx.idempotency_key, state.order_id, state.amount)
    return {"payment_id": payment}


def report(state: Refund) -> dict[str, object]:
    if state.payment_id:
        text = f"refunded ${state.amount:.2f} for order {state.order_id} ({state.payment_id})"
    elif state.problems:
        text = f"not refunded: {'; '.join(state.problems)}"
    else:
        text = f"not refunded: a person rejected the refund of order {state.order_id}"
    return {"report": text}


def build(version: str = "1") -> Graph:
    graph = Graph("refund", version=version, state=Refund)
    graph.add_node("draft", draft, idempotent=True)
    graph.add_node("check", check, idempotent=True)
    graph.add_node("refund", refund, interrupt_before=True, idempotent=True, on_reject="report")
    graph.add_node("report", report, idempotent=True)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "check")
    graph.add_conditional_edges("check", route)
    graph.add_edge("refund", "report")
    graph.add_edge("report", END)
    return graph


GRAPH = build().compile()
KIND = graph_kind(GRAPH)
