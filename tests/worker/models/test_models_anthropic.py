"""`anthropic:MODEL` against a local server speaking the Messages API (tests/anthropic_fake)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import (
    ConfigurationError,
    ContextTooLong,
    PermanentModelError,
    TransientModelError,
)
from tickwork.fsm.values import Status, Usage
from tickwork.worker.models import ModelSettings, Providers, price_for
from tickwork.worker.models.anthropic import AnthropicMessagesModel
from tickwork.worker.models.pricing import Price, charge

from tests.anthropic_fake import KEY, FakeAnthropic, fake_anthropic_server
from tickwork.cli_demo import DEMO_SCRIPT, demo_input, prepare_demo_workspace

from .test_models_ticks import Ticks

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file in the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the tests.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
#: a transcript as tickwork.fsm.transcript builds it: a step with two calls, one failed, then a
#: nudge
TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "You repair code."},
    {"role": "user", "content": "Fix the failing test."},
    {
        "role": "assistant",
        "content": "I look first.",
        "tool_calls": [
            {
                "id": "toolu_a",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
            },
            {"id": "s1c1", "type": "function", "function": {"name": "run_tests", "arguments": "{"}},
        ],
    },
    {"role": "tool", "tool_call_id": "toolu_a", "content": "print(1)"},
    {"role": "tool", "tool_call_id": "s1c1", "content": "ERROR: arguments are not JSON"},
    {"role": "user", "content": "You repeat yourself."},
]
REPLIES = [
    {"content": "Reading.", "tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]},
    {"content": "Done."},
]


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with fake_anthropic_server(FakeAnthropic(REPLIES)) as found:
        yield found


def _model(server: FakeAnthropic, name: str = "claude-sonnet-4-5") -> AnthropicMessagesModel:
    made = Providers().make(
        f"anthropic:{name}", env={"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": KEY}
    )
    assert isinstance(made, AnthropicMessagesModel)
    return made


def test_the_transcript_is_sent_in_the_messages_shape(server: FakeAnthropic) -> None:
    reply = _model(server).generate(TRANSCRIPT, TOOLS, ModelSettings(max_tokens=500))

    assert reply.content == "Done."
    ((headers, body),) = server.requests
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert body["max_tokens"] == 500
    assert body["system"] == [
        {"type": "text", "text": "You repair code.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"][0] == {
        "name": "read_file",
        "description": "Read a file in the workspace.",
        "input_schema": TOOLS[0]["function"]["parameters"],
    }
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    first, step, results = body["messages"]
    assert first == {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": "Fix the failing test.",
                "cache_control": {"type": "ephemeral"},  # where the last call ended
            }
        ],
    }
    assert step["content"] == [
        {"type": "text", "text": "I look first."},
        {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a.py"}},
        {"type": "tool_use", "id": "s1c1", "name": "run_tests", "input": {"arguments": "{"}},
    ]
    assert results["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "print(1)"},
        {
            "type": "tool_result",
            "tool_use_id": "s1c1",
            "content": "ERROR: arguments are not JSON",
            "is_error": True,
        },
        {
            "type": "text",
            "text": "You repeat yourself.",
            "cache_control": {"type": "ephemeral"},
        },
    ]


def test_arguments_nested_too_deep_to_parse_go_back_as_text(server: FakeAnthropic) -> None:
    """The model's arguments are stored as written when they do not parse (nested deeper
    than the parser goes: the call got an error); the next request still goes out, with
    them as text, instead of the tick failing on them every time."""
    deep = "[" * 100_000 + "]" * 100_000
    transcript = [
        {"role": "user", "content": "Fix it."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "s1c0",
                    "type": "function",
                    "function": {"name": "run_tests", "arguments": deep},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "s1c0", "content": "ERROR: arguments are not JSON"},
    ]
    reply = _model(server).generate(transcript, TOOLS, ModelSettings(max_tokens=500))
    assert reply.content == "Done."
    ((_, body),) = server.requests
    use = body["messages"][1]["content"][-1]
    assert use["type"] == "tool_use" and use["input"] == {"arguments": deep}


def test_a_tool_use_answer_and_its_usage_with_cache_reads_and_writes(
    server: FakeAnthropic,
) -> None:
    model = _model(server)
    start = TRANSCRIPT[:2]

    first = model.generate(start, TOOLS, ModelSettings())
    (call,) = first.calls
    assert (call.name, json.loads(str(call.arguments)), call.id) == (
        "read_file",
        {"path": "a"},
        "toolu_0_0",
    )
    assert first.model == "claude-sonnet-4-5" and not first.truncated
    assert server.requests[0][1]["max_tokens"] == 4096  # the API wants a cap: the default
    following = [
        *start,
        {
            "role": "assistant",
            "content": first.content,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "x" * 4000},
    ]
    second = model.generate(following, TOOLS, ModelSettings())

    (total, completion, read, written) = server.billed[1]
    assert second.usage == Usage(
        prompt_tokens=total,
        completion_tokens=completion,
        cached_prompt_tokens=read,
        cache_creation_tokens=written,
    )
    # the first call's whole prompt is read back; the new turn is written
    assert read == server.billed[0][0] and written > 1000
    assert first.usage.cache_creation_tokens == server.billed[0][0]


def test_an_answer_cut_at_the_cap_is_marked(server: FakeAnthropic) -> None:
    reply = _model(server).generate(TRANSCRIPT[:2], TOOLS, ModelSettings(max_tokens=3))
    assert reply.truncated and reply.usage.completion_tokens == 3


@pytest.mark.parametrize("status", [529, 429, 500])
def test_overloaded_and_rate_limited_are_retried_when_the_server_says(status: int) -> None:
    fake = FakeAnthropic(REPLIES, fail=[(status, {"retry-after": "3"})])
    with fake_anthropic_server(fake), pytest.raises(TransientModelError) as raised:
        _model(fake).generate(TRANSCRIPT, TOOLS, ModelSettings())
    assert raised.value.retry_after_s == 3.0
    assert "(request id req_fake)" in str(raised.value)


def test_a_prompt_too_long_is_the_context_error() -> None:
    fake = FakeAnthropic(REPLIES, window=50)
    with fake_anthropic_server(fake), pytest.raises(ContextTooLong) as raised:
        _model(fake).generate(TRANSCRIPT, TOOLS, ModelSettings())
    assert "prompt is too long" in str(raised.value)
    assert not raised.value.transient


def test_a_cap_that_passes_the_window_with_a_prompt_that_fits_is_asked_again_within_it(
    chat_server: Any,
) -> None:
    refusal = "input length and `max_tokens` exceed context limit: 190000 + 16000 > 200000"
    chat_server.respond(
        400, {"type": "error", "error": {"type": "invalid_request_error", "message": refusal}}
    )
    chat_server.respond(
        200,
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "Done."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 190000, "output_tokens": 3},
        },
    )
    model = AnthropicMessagesModel("claude-sonnet-4-5", base_url=chat_server.base_url)

    reply = model.generate(TRANSCRIPT, TOOLS, ModelSettings(max_tokens=16000))

    assert reply.content == "Done."
    assert [r.body["max_tokens"] for r in chat_server.requests] == [16000, 10000]
    assert reply.cap_lowered and reply.cap_lowered_to == 10000


def test_a_refused_key_is_permanent_and_says_which_variable(server: FakeAnthropic) -> None:
    model = AnthropicMessagesModel("claude-sonnet-4-5", base_url=server.url, api_key="wrong")
    with pytest.raises(PermanentModelError, match="invalid_request_error: x-api-key"):
        model.generate(TRANSCRIPT, TOOLS, ModelSettings())


def test_anthropic_itself_needs_a_key() -> None:
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        Providers().make("anthropic:claude-sonnet-4-5", env={})


@pytest.mark.parametrize("base", ["http://h:1", "http://h:1/", "http://h:1/v1"])
def test_the_base_url_is_taken_with_or_without_v1(base: str) -> None:
    assert AnthropicMessagesModel("m", base_url=base).url == "http://h:1/v1/messages"


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def test_a_repair_session_completes_through_the_messages_api(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's replies, served in Anthropic's shape: its calls run, the fix is approved,
    the tests pass; each step records the cache reads and writes the server billed, priced."""
    replies = json.loads(DEMO_SCRIPT.read_text())["replies"]
    fake = FakeAnthropic(replies)
    with fake_anthropic_server(fake):
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        workspace = prepare_demo_workspace(ticks.settings.state_dir)
        head = ticks.client.submit(
            "repair", demo_input(workspace), model="anthropic:claude-sonnet-4-5"
        )
        waiting = ticks.run(head.id)
        assert waiting.status is Status.WAITING_APPROVAL, waiting.error_message
        (write,) = waiting.awaiting
        ticks.client.approve(head.id, write, approver="alice")
        done = ticks.run(head.id)

    assert done.status is Status.COMPLETED, done.error_message
    assert done.result["tests"]["passed"] is True
    session = ticks.store.load(head.id)
    names = [[c.name for c in step.calls] for step in session.steps]
    assert names == [["run_tests"], ["read_file"], ["write_file"], ["run_tests"], []]
    assert all(
        c.provider_call_id and c.provider_call_id.startswith("toolu_")
        for c in (c for s in session.steps for c in s.calls)
    )
    billed = [
        Usage(
            prompt_tokens=t,
            completion_tokens=c,
            cached_prompt_tokens=r,
            cache_creation_tokens=w,
        )
        for t, c, r, w in fake.billed
    ]
    assert [s.usage for s in session.steps] == billed
    # from the second call on, the prompt up to the last turn is read from the cache
    assert all(u.cached_prompt_tokens > 0 for u in billed[1:])
    price = price_for("claude-sonnet-4-5")
    assert price is not None
    assert [s.cost_usd for s in session.steps] == pytest.approx([charge(price, u) for u in billed])
    assert done.cost_usd == pytest.approx(sum(charge(price, u) for u in billed))
    # every request carried the cap and breakpoints on the tools, the system, the last turn
    for _, body in fake.requests:
        assert body["max_tokens"] >= 1
        assert "cache_control" in body["tools"][-1] and "cache_control" in body["system"][-1]
        assert "cache_control" in body["messages"][-1]["content"][-1]


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ("prompt is too long: 210000 tokens > 200000 maximum", ContextTooLong),
        (
            "input length and `max_tokens` exceed context limit: 199000 + 8192 > 200000",
            ContextTooLong,
        ),
        ("messages.1: tool_use ids were found without tool_result blocks", PermanentModelError),
    ],
)
def test_which_invalid_requests_are_a_prompt_too_long(
    chat_server: Any, message: str, error: type[Exception]
) -> None:
    refusal = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    # twice: a cap refused for a prompt that fits is asked once more within the window
    chat_server.respond(400, refusal)
    chat_server.respond(400, refusal)
    model = AnthropicMessagesModel("claude-sonnet-4-5", base_url=chat_server.base_url)

    with pytest.raises(error) as raised:
        model.generate(TRANSCRIPT, TOOLS, ModelSettings())
    assert type(raised.value) is error
    assert chat_server.requests[0].path == "/v1/messages"


def test_a_submitted_price_may_give_the_cache_write_rate_and_the_bill_uses_it(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anthropic bills prompt tokens written to its cache at their own rate, which a price
    given at submit could not name: they were billed at the model's discount on the given
    prompt rate (1.25 times it). A fourth number is the cache-write rate, stored with the
    session and billed for the usage's `cache_creation_tokens`."""
    from tickwork import options

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    costs, usages = [], []
    fake = FakeAnthropic([{"content": "Done."}])
    with fake_anthropic_server(fake):
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        for given in ("6,30", "6,30,0.6,9"):
            fake.cached.clear()  # each session's first call writes its prompt to the cache
            head = ticks.client.submit(
                "tests.jobs:TEST",
                {},
                model="anthropic:claude-sonnet-4-5",
                price=options.price(given),
            )
            done = ticks.run(head.id)
            assert done.status is Status.COMPLETED, done.error_message
            costs.append(done.cost_usd)
    for total, completion, read, written in fake.billed:
        assert written > 0, "the first call writes the prompt to the cache"
        usages.append(
            Usage(
                prompt_tokens=total,
                completion_tokens=completion,
                cached_prompt_tokens=read,
                cache_creation_tokens=written,
            )
        )
    listed, given = usages
    assert costs[0] == pytest.approx(charge(Price(6, 30, 0.6, 7.5), listed))
    assert costs[1] == pytest.approx(charge(Price(6, 30, 0.6, 9), given))
    assert ticks.store.get(head.id).config["price"] == {
        "prompt": 6,
        "completion": 30,
        "cached": 0.6,
        "cache_write": 9,
    }
