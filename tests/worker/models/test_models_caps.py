"""The completion cap through real ticks: a budget is a bound, not an estimate
(docs/DESIGN.md section 14).

A server that wants to write more than the session can pay for: when it honours the cap it
is sent (as OpenAI, vLLM and Anthropic do, stopping with `finish_reason: length`), the
session ends within `max_cost_usd` plus at most one call's capped cost; when it ignores the
cap, tickwork counts what it was billed and stops at the next check, and only then can one
call take the session further past its budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import ErrorCode, Status

from .conftest import Canned, ChatServer
from .test_models_ticks import KIND, Ticks

#: USD per million tokens: $0.0001 a completion token
PRICE = (1.0, 100.0)
#: what the server would write each time, unless told to stop sooner ($0.30)
WANTS = 3_000
BUDGET = 1.0


class GreedyServer(ChatServer):
    """Answers every request with an echo call and `WANTS` completion tokens, or the cap the
    request carries if it is lower and `honest` (then cut off: `finish_reason: length`, no
    calls, as a server cut in the middle of its answer); it bills the prompt it was sent at
    four characters a token."""

    def __init__(self, *, honest: bool, reasoning: bool = False) -> None:
        super().__init__()
        self.honest = honest
        #: a reasoning model cut while it thinks has written no answer at all
        self.reasoning = reasoning
        self.billed: list[tuple[int, int]] = []
        self.caps: list[int | None] = []

    def refusal(self, body: Any) -> Canned | None:
        cap = body.get("max_tokens", body.get("max_completion_tokens"))
        self.caps.append(cap)
        written = min(WANTS, cap) if self.honest and cap is not None else WANTS
        cut = written < WANTS
        prompt = len(json.dumps(body["messages"])) // 4
        self.billed.append((prompt, written))
        text = "" if cut and self.reasoning else "w" * min(written, 100)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if not cut:
            message["tool_calls"] = [
                {
                    "id": f"call_{len(self.billed)}",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"text": "again"}'},
                }
            ]
        return Canned(
            body={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": "local",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "length" if cut else "tool_calls",
                    }
                ],
                "usage": {"prompt_tokens": prompt, "completion_tokens": written},
            }
        )


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def _usd(prompt: int, completion: int) -> float:
    return (prompt * PRICE[0] + completion * PRICE[1]) / 1e6


def _run(ticks: Ticks, server: GreedyServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    head = ticks.client.submit(
        KIND, {}, model="openai:local", price=PRICE, budgets={"max_cost_usd": BUDGET}
    )
    try:
        return ticks.run(head.id), ticks.store.load(head.id)
    finally:
        server.close()


@pytest.mark.parametrize("reasoning", [False, True], ids=["cut_text", "cut_while_thinking"])
def test_an_honest_server_keeps_the_session_within_one_capped_call_of_its_budget(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch, reasoning: bool
) -> None:
    """A reply cut while a reasoning model thinks has no text at all: it is still billed,
    recorded and ends the session (not retried as an empty reply)."""
    server = GreedyServer(honest=True, reasoning=reasoning)

    done, session = _run(ticks, server, monkeypatch)

    assert done.status is Status.FAILED and done.error_code is ErrorCode.BUDGET_COST
    assert "cut at" in (done.error_message or "")
    # every call carried a cap, none larger than what the budget left for it
    assert all(cap is not None for cap in server.caps)
    spent = 0.0
    for (prompt, written), cap in zip(server.billed, server.caps, strict=True):
        assert cap is not None and written <= cap
        assert spent + _usd(0, cap) <= BUDGET + 1e-9
        spent += _usd(prompt, written)
    # the last call was cut at the cap: the budget, not the server, decided its size
    assert server.billed[-1][1] < WANTS
    # what tickwork recorded is what the server billed, call by call
    assert [(s.usage.prompt_tokens, s.usage.completion_tokens) for s in session.steps] == (
        server.billed
    )
    assert done.cost_usd == pytest.approx(spent)
    last_prompt, _ = server.billed[-1]
    assert done.cost_usd <= BUDGET + _usd(last_prompt, server.caps[-1])


def test_a_server_that_ignores_the_cap_is_counted_and_stopped_at_the_next_check(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound holds only for a server that honours the cap: this one writes past it,
    tickwork charges what it billed and calls it no more."""
    server = GreedyServer(honest=False)

    done, session = _run(ticks, server, monkeypatch)

    assert done.error_code is ErrorCode.BUDGET_COST
    billed = sum(_usd(p, c) for p, c in server.billed)
    assert done.cost_usd == pytest.approx(billed) and done.cost_usd > BUDGET
    # the call that went past the budget was sent a cap it did not honour, and was the last
    assert server.billed[-1][1] > (server.caps[-1] or 0)
    before_last = billed - _usd(*server.billed[-1])
    assert before_last < BUDGET
    assert len(session.steps) == len(server.billed)


class EmptyServer(ChatServer):
    """Answers every request with no content and no tool calls, and bills its prompt."""

    def __init__(self) -> None:
        super().__init__()
        self.billed: list[tuple[int, int]] = []

    def refusal(self, body: Any) -> Canned | None:
        prompt = len(json.dumps(body["messages"])) // 4
        self.billed.append((prompt, 7))
        message = {"role": "assistant", "content": ""}
        return Canned(
            body={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": "local",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 7},
            }
        )


def test_an_empty_reply_retried_is_billed_as_the_server_billed_it(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty reply (or summary) is retried, but the server billed it: its tokens and
    cost count towards the budgets, the dead letter's and `ls`'s (they were dropped)."""
    server = EmptyServer()
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    head = ticks.client.submit(
        KIND, {}, model="openai:local", price=PRICE, budgets={"max_model_retries": 2}
    )
    try:
        done = ticks.run(head.id)
    finally:
        server.close()

    assert done.error_code is ErrorCode.MODEL_ERROR and len(server.billed) == 3
    assert done.tokens == sum(p + c for p, c in server.billed)
    assert done.cost_usd == pytest.approx(sum(_usd(p, c) for p, c in server.billed))
    session = ticks.store.load(head.id)
    retries = [e.data for e in session.events if e.kind == "model_retry"]
    assert [r["tokens"] for r in retries] == [p + c for p, c in server.billed[:2]]
