"""Cached prompt tokens: read from the server's usage, stored per call, priced at the model's
cached price and shown (docs/DESIGN.md section 14)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tickwork.fsm.values import EventKind, Status, Usage
from tickwork.worker.models import price_for

from tickwork import render, views

from .test_models_ticks import KIND, Ticks


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def _completion(content: str, usage: dict[str, Any], calls: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "echo", "arguments": '{"text": "a"}'},
            }
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    }


def test_cached_prompt_tokens_are_stored_priced_and_shown(
    ticks: Ticks, chat_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    chat_server.respond(
        200, _completion("look", {"prompt_tokens": 1000, "completion_tokens": 10}, calls=True)
    )
    cached = {
        "prompt_tokens": 2000,
        "completion_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 1500},
    }
    chat_server.respond(200, _completion("done", cached, calls=False))
    head = ticks.client.submit(KIND, {}, model="openai:gpt-4o")

    done = ticks.run(head.id)

    assert done.status is Status.COMPLETED
    session = ticks.store.load(head.id)
    assert [s.usage for s in session.steps] == [
        Usage(prompt_tokens=1000, completion_tokens=10),
        Usage(prompt_tokens=2000, completion_tokens=20, cached_prompt_tokens=1500),
    ]
    price = price_for("gpt-4o")
    assert price is not None and price.cached == price.prompt / 2
    second = (500 * price.prompt + 1500 * price.cached + 20 * price.completion) / 1e6
    assert session.steps[1].cost_usd == pytest.approx(second)
    assert second < (2000 * price.prompt + 20 * price.completion) / 1e6
    called = [e.data for e in session.events if e.kind is EventKind.MODEL_CALLED]
    assert [d["cached_prompt_tokens"] for d in called] == [0, 1500]

    view = views.session(session)
    assert [s["cached_prompt_tokens"] for s in view["steps"]] == [0, 1500]
    assert view["totals"]["cached_prompt_tokens"] == 1500
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(render.timeline(view))
    shown = console.export_text()
    assert "2,000+20 tokens · 1,500 cached" in shown
    assert "(3,000 prompt, 1,500 cached, 30 completion)" in shown


def test_cached_tokens_are_counted_in_the_metrics() -> None:
    from tickwork.worker.models import Providers
    from tickwork.worker.observers.metrics import MODEL_TOKENS, ModelLabels, count_model
    from tickwork.worker.observers.report import ModelCall

    model = "openai:metrics-cached-test"
    usage = Usage(
        prompt_tokens=900, completion_tokens=9, cached_prompt_tokens=700, cache_creation_tokens=50
    )
    call = ModelCall(spec=model, started_ns=0, ended_ns=1, outcome="ok", usage=usage)

    def counted(kind: str) -> float:
        return MODEL_TOKENS.labels(model, kind, "default")._value.get()

    before = {k: counted(k) for k in ("prompt", "cached_prompt", "cache_write")}
    count_model(call, ModelLabels(Providers())(model), tenant="default")
    after = {k: counted(k) - before[k] for k in before}

    assert after == {"prompt": 900, "cached_prompt": 700, "cache_write": 50}


def test_a_submitted_price_may_give_the_cached_rate_and_the_bill_uses_it(
    ticks: Ticks, chat_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--price PROMPT,COMPLETION` took two numbers only: a model nobody else prices (a
    local vLLM with prefix caching) then paid its whole prompt rate for every cache read.
    A third number is the cached rate, and the bill reads the cache at it."""
    from tickwork import options

    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    usage = {
        "prompt_tokens": 2000,
        "completion_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 1500},
    }
    for _ in range(2):
        chat_server.respond(200, _completion("done", usage, calls=False))
    two = ticks.client.submit(KIND, {}, model="openai:local", price=options.price("0.5,1.5"))
    three = ticks.client.submit(KIND, {}, model="openai:local", price=options.price("0.5,1.5,0.05"))

    whole, cached = ticks.run(two.id), ticks.run(three.id)

    assert (whole.status, cached.status) == (Status.COMPLETED, Status.COMPLETED)
    # without a cached rate, a cache read is a prompt token
    assert whole.cost_usd == pytest.approx((2000 * 0.5 + 20 * 1.5) / 1e6)
    assert cached.cost_usd == pytest.approx((500 * 0.5 + 1500 * 0.05 + 20 * 1.5) / 1e6)
    assert ticks.store.get(three.id).config["price"] == {
        "prompt": 0.5,
        "completion": 1.5,
        "cached": 0.05,
    }
