"""What a graph node's model calls put on the session's bill: every call the provider
charged for, with the prompt tokens it read from and wrote to the provider's cache, on
the node's step (`tickwork show`) and in the session's totals; on SQLite and on Postgres
(the one-statement save; tests/store has the Core store's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tickwork.fsm.values import Status

from tests.worker.test_graph_reports import REFUND
from tests.worker.ticking import Ticks

#: the draft node's one model call, a third of its prompt read from the provider's cache
CACHED_NOTE = [
    {
        "content": "Sorry about that; your refund is on its way.",
        "usage": {
            "prompt_tokens": 300,
            "completion_tokens": 12,
            "cached_prompt_tokens": 100,
            "cache_creation_tokens": 40,
        },
    }
]


def test_a_nodes_model_calls_keep_their_cached_tokens_on_its_step_and_the_bill(
    ticks: Ticks, tmp_path: Path
) -> None:
    """A node's calls were charged to its step with their prompt and completion tokens and
    their cost, but not the prompt tokens the provider's cache read or wrote: `tickwork
    show` said none of a graph's prompts were cached, though its `model_called` events and
    the price did."""
    from tickwork import render, views

    script = tmp_path / "note.json"
    script.write_text(json.dumps(CACHED_NOTE))
    head = ticks.client.submit(
        REFUND,
        {"order_id": "A-1", "amount": 900, "ledger": str(tmp_path / "ledger.jsonl")},
        model=f"scripted:{script}",
    )
    assert ticks.run(head.id).status is Status.COMPLETED
    session = ticks.client.load(head.id)
    (draft,) = [s for s in session.steps if any(c.name == "draft" for c in s.calls)]
    assert (draft.usage.cached_prompt_tokens, draft.usage.cache_creation_tokens) == (100, 40)
    view = views.session(session)
    totals = view["totals"]
    assert (totals["cached_prompt_tokens"], totals["cache_creation_tokens"]) == (100, 40)
    assert totals["prompt_tokens"] == 300
    shown = render.console()
    with shown.capture() as captured:
        shown.print(render.timeline(view))
    assert "300+12 tokens · 100 cached, 40 written to the cache" in captured.get()


def test_a_node_that_raises_keeps_the_model_calls_it_made_on_the_bill(
    ticks: Ticks, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A node whose second model call failed (and so the node raised, failing the session
    MODEL_ERROR) lost its first call, which the provider charged for: its tokens and cost were
    on no step, in no budget and in no dead letter's totals, and its `model_called` event
    was dropped. They are kept as a node's that finished are."""
    from tickwork.fsm.values import EventKind
    from tickwork.store.dead_letters import export_rows

    script = tmp_path / "broken.json"
    script.write_text(
        json.dumps(
            [
                CACHED_NOTE[0],
                {"error": {"transient": False, "message": "400 the content was filtered"}},
            ]
        )
    )
    head = ticks.client.submit(
        "tests.graphs:ASK_MORE", {"size": 100}, model=f"scripted:{script}", price=(1.0, 2.0)
    )
    with caplog.at_level("ERROR", logger="tickwork.tick"):
        done = ticks.run(head.id)
    assert (done.status, done.error_code) == (Status.FAILED, "MODEL_ERROR")
    # the log line a tick that fails the session writes, where operators look for it
    assert f"tick of session {head.id} v1 failed" in [
        r.getMessage() for r in caplog.records if r.name == "tickwork.tick"
    ]
    assert "node 'ask' raised PermanentModelError: 400 the content was filtered" in (
        done.error_message or ""
    )
    session = ticks.client.load(head.id)
    (called,) = [e for e in session.events if e.kind is EventKind.MODEL_CALLED]
    assert (called.data["node"], called.data["prompt_tokens"]) == ("ask", 300)
    cost = called.data["cost_usd"]
    assert cost > 0
    assert (done.tokens, done.cost_usd) == (312, pytest.approx(cost))
    (ask,) = [s for s in session.steps if any(c.name == "ask" for c in s.calls)]
    assert (ask.usage.prompt_tokens, ask.usage.completion_tokens) == (300, 12)
    assert ask.usage.cached_prompt_tokens == 100
    assert ask.cost_usd == pytest.approx(cost)
    (letter,) = export_rows(ticks.store.engine)
    assert (letter["own_tokens"], letter["own_cost_usd"]) == (312, pytest.approx(cost))
