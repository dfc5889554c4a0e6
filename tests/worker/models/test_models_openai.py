from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from tickwork.fsm.errors import PermanentModelError, TransientModelError
from tickwork.fsm.values import ProposedCall, Usage
from tickwork.worker.config.settings import Settings
from tickwork.worker.config.stores import build_store
from tickwork.worker.jobs import Jobs
from tickwork.worker.models import ModelSettings, OpenAIChatModel
from tickwork.worker.models.transport import retry_after_s
from tickwork.worker.tick.runtime import Runtime

MESSAGES = [
    {"role": "system", "content": "You repair code."},
    {"role": "user", "content": "Fix the failing test."},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file in the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
SETTINGS = ModelSettings()


@pytest.fixture
def model(chat_server):
    return OpenAIChatModel("gpt-4o", base_url=chat_server.base_url, api_key="sk-test")


def test_plain_answer(chat_server, model):
    chat_server.answer("All tests pass now.")

    reply = model.generate(MESSAGES, TOOLS, SETTINGS)

    assert reply.content == "All tests pass now."
    assert reply.calls == ()
    assert reply.model == "gpt-4o-2024-08-06"
    assert reply.latency_ms > 0


def test_null_content_is_empty_text(chat_server, model):
    chat_server.answer(None, calls=[("read_file", '{"path": "a.py"}')])

    assert model.generate(MESSAGES, TOOLS, SETTINGS).content == ""


def test_one_tool_call(chat_server, model):
    chat_server.answer("Let me look.", calls=[("read_file", '{"path": "a.py"}')])

    reply = model.generate(MESSAGES, TOOLS, SETTINGS)

    assert reply.content == "Let me look."
    assert reply.calls == (
        ProposedCall(name="read_file", arguments='{"path": "a.py"}', id="call_0"),
    )


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        pytest.param("9aZ8bY7cX", "9aZ8bY7cX", id="mistral"),
        pytest.param("toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9", id="long"),
        pytest.param(7, None, id="not_text"),
        pytest.param("", None, id="empty"),
        pytest.param("x" * 129, None, id="too_long"),
    ],
)
def test_the_providers_call_id_is_kept_when_usable(chat_server, model, given, kept):
    chat_server.answer(None, calls=[("read_file", '{"path": "a.py"}')], ids=[given])

    (call,) = model.generate(MESSAGES, TOOLS, SETTINGS).calls

    assert call.id == kept


def test_several_tool_calls_in_one_reply(chat_server, model):
    chat_server.answer(
        None,
        calls=[
            ("read_file", '{"path": "a.py"}'),
            ("read_file", '{"path": "b.py"}'),
            ("run_tests", "{}"),
        ],
    )

    reply = model.generate(MESSAGES, TOOLS, SETTINGS)

    assert [(c.name, c.arguments) for c in reply.calls] == [
        ("read_file", '{"path": "a.py"}'),
        ("read_file", '{"path": "b.py"}'),
        ("run_tests", "{}"),
    ]


def test_malformed_arguments_pass_through_as_text(chat_server, model):
    chat_server.answer(None, calls=[("read_file", '{"path": "a.py"'), ("run_tests", "not json")])

    reply = model.generate(MESSAGES, TOOLS, SETTINGS)

    assert [c.arguments for c in reply.calls] == ['{"path": "a.py"', "not json"]


def test_arguments_sent_as_an_object_become_text(chat_server, model):
    chat_server.answer(None, calls=[("read_file", {"path": "a.py"})])

    (call,) = model.generate(MESSAGES, TOOLS, SETTINGS).calls

    assert isinstance(call.arguments, str)
    assert json.loads(call.arguments) == {"path": "a.py"}


def test_usage_is_read_from_the_response(chat_server, model):
    chat_server.answer("done", usage=(1234, 56))

    assert model.generate(MESSAGES, TOOLS, SETTINGS).usage == Usage(
        prompt_tokens=1234, completion_tokens=56
    )


@pytest.mark.parametrize(
    ("reported", "cached"),
    [
        pytest.param({"prompt_tokens_details": {"cached_tokens": 1024}}, 1024, id="openai"),
        pytest.param({"prompt_cache_hit_tokens": 512}, 512, id="deepseek"),
        pytest.param({"prompt_tokens_details": {"cached_tokens": None}}, 0, id="null"),
        pytest.param({"prompt_tokens_details": {"cached_tokens": -3}}, 0, id="negative"),
        pytest.param({"prompt_tokens_details": {"cached_tokens": 10**9}}, 1234, id="beyond"),
    ],
)
def test_cached_prompt_tokens_are_read_from_the_usage(chat_server, model, reported, cached):
    usage = {"prompt_tokens": 1234, "completion_tokens": 56, **reported}
    chat_server.respond(
        200,
        {
            "model": "gpt-4o",
            "choices": [{"message": {"role": "assistant", "content": "ok"}}],
            "usage": usage,
        },
    )

    assert model.generate(MESSAGES, TOOLS, SETTINGS).usage == Usage(
        prompt_tokens=1234, completion_tokens=56, cached_prompt_tokens=cached
    )


@pytest.mark.parametrize(("finish", "truncated"), [("length", True), ("stop", False)])
def test_an_answer_stopped_at_the_cap_is_marked_truncated(chat_server, model, finish, truncated):
    chat_server.respond(
        200,
        {
            "choices": [
                {"message": {"role": "assistant", "content": "par"}, "finish_reason": finish}
            ]
        },
    )

    assert model.generate(MESSAGES, TOOLS, SETTINGS).truncated is truncated


def test_usage_is_estimated_when_the_server_reports_none(chat_server, model):
    chat_server.answer("x" * 40, usage=None)

    usage = model.generate(MESSAGES, TOOLS, SETTINGS).usage

    assert usage.completion_tokens == 10
    assert usage.prompt_tokens > 0


def test_request_carries_model_messages_tools_and_settings(chat_server, model):
    chat_server.answer("ok")
    settings = ModelSettings(temperature=0.2, max_tokens=300, extra={"seed": 7, "model": "no"})

    model.generate(MESSAGES, TOOLS, settings)

    (request,) = chat_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.body == {
        "model": "gpt-4o",
        "messages": MESSAGES,
        "tools": TOOLS,
        "temperature": 0.2,
        "max_tokens": 300,
        "seed": 7,
    }


def test_no_tools_omits_the_tools_key(chat_server, model):
    chat_server.answer("ok")

    model.generate(MESSAGES, [], SETTINGS)

    assert "tools" not in chat_server.requests[0].body
    assert "temperature" not in chat_server.requests[0].body


def test_openai_itself_gets_max_completion_tokens():
    model = OpenAIChatModel("o3-mini", base_url="https://api.openai.com/v1/", api_key="k")

    body = model.request_body(MESSAGES, [], ModelSettings(max_tokens=10))

    assert body["max_completion_tokens"] == 10
    assert "max_tokens" not in body
    assert model.url == "https://api.openai.com/v1/chat/completions"


def test_a_shared_client_is_used_and_left_open(chat_server):
    chat_server.answer("ok")
    with httpx.Client() as client:
        model = OpenAIChatModel("gpt-4o", base_url=chat_server.base_url, client=client)
        assert model.generate(MESSAGES, [], SETTINGS).content == "ok"
        assert not client.is_closed
    assert "Authorization" not in chat_server.requests[0].headers


def test_a_runtimes_models_share_kept_alive_connections(
    keep_alive_chat_server, tmp_path, monkeypatch
):
    """A worker's model calls reuse connections (no TCP or TLS handshake per call)."""
    server = keep_alive_chat_server
    for answer in ("one", "two", "three"):
        server.answer(answer)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    settings = Settings(state_dir=tmp_path)
    rt = Runtime(
        settings=settings,
        store=build_store(settings),
        jobs=Jobs(),
        publish_tick=lambda *_: None,
    )
    try:
        first, second = rt.model("openai:gpt-4o"), rt.model("openai:gpt-4o-mini")
        replies = [m.generate(MESSAGES, [], SETTINGS).content for m in (first, second, first)]
    finally:
        rt.close()
        rt.store.engine.dispose()

    assert replies == ["one", "two", "three"]
    assert len({r.peer for r in server.requests}) == 1


def test_calls_at_once_each_have_a_connection_kept_for_the_next(
    keep_alive_chat_server, tmp_path, monkeypatch
):
    """A threads-pool worker's model calls: calls at once each get a kept-alive connection
    of their own (httpx's pool looks at every connection it holds at each call, so one
    pool shared by hundreds of calls costs more per call the more are in flight); later
    calls, from any thread, reuse them; closing the runtime closes them."""
    server = keep_alive_chat_server
    at_once = 4
    # each of the first calls answered only once all of them are in flight: they overlap
    # (a delay of the answers left a call started late on a loaded machine to reuse the
    # connection of one already answered)
    together = threading.Barrier(at_once)
    for _ in range(at_once):
        server.answer("ok", together=together)
    for _ in range(2 * at_once + 1):
        server.answer("ok")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    settings = Settings(state_dir=tmp_path)
    rt = Runtime(settings=settings, store=build_store(settings), jobs=Jobs(), publish_tick=print)
    start = threading.Barrier(at_once)
    replies: list[str | None] = []

    def calling(calls: int, barrier: threading.Barrier | None = None) -> None:
        if barrier is not None:
            barrier.wait(10)
        for _ in range(calls):
            replies.append(rt.model("openai:gpt-4o").generate(MESSAGES, [], SETTINGS).content)

    def run(*threads: threading.Thread) -> None:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)

    try:
        run(*(threading.Thread(target=calling, args=(1, start)) for _ in range(at_once)))
        overlapping = {r.peer for r in server.requests}
        for _ in range(2):  # new threads, one after another, and then a few at once
            run(threading.Thread(target=calling, args=(1,)))
        run(*(threading.Thread(target=calling, args=(1,)) for _ in range(at_once - 2)))
        reused = {r.peer for r in server.requests[at_once:]}
        pool = rt._http
        assert pool is not None and pool.size == at_once
        rt.close()
        assert rt.model("openai:gpt-4o").generate(MESSAGES, [], SETTINGS).content == "ok"
    finally:
        rt.close()
        rt.store.engine.dispose()

    assert replies == ["ok"] * (2 * at_once)
    assert len(overlapping) == at_once  # one connection per call in flight
    assert reused <= overlapping  # kept alive and lent again, whatever the thread
    assert server.requests[-1].peer not in overlapping  # closed with the runtime


def test_429_with_retry_after_seconds_is_transient(chat_server, model):
    chat_server.respond(
        429,
        {"error": {"message": "Rate limit reached", "code": "rate_limit"}},
        headers={"Retry-After": "7", "x-request-id": "req_42"},
    )

    with pytest.raises(TransientModelError) as caught:
        model.generate(MESSAGES, TOOLS, SETTINGS)

    assert caught.value.retry_after_s == 7
    message = str(caught.value)
    assert chat_server.base_url in message
    assert "gpt-4o" in message and "429" in message
    assert "Rate limit reached" in message and "req_42" in message


def test_503_with_retry_after_as_http_date(chat_server, model):
    later = datetime.now(UTC) + timedelta(seconds=30)
    chat_server.respond(
        503, b"upstream busy", headers={"Retry-After": format_datetime(later, usegmt=True)}
    )

    with pytest.raises(TransientModelError) as caught:
        model.generate(MESSAGES, TOOLS, SETTINGS)

    assert 25 <= caught.value.retry_after_s <= 31
    assert "upstream busy" in str(caught.value)


def test_500_is_transient(chat_server, model):
    chat_server.respond(500, {"error": {"message": "The server had an error"}})

    with pytest.raises(TransientModelError) as caught:
        model.generate(MESSAGES, TOOLS, SETTINGS)

    assert caught.value.retry_after_s is None
    assert "500" in str(caught.value)


def test_insufficient_quota_is_permanent(chat_server, model):
    chat_server.respond(
        429, {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}
    )

    with pytest.raises(PermanentModelError, match="billing"):
        model.generate(MESSAGES, TOOLS, SETTINGS)


@pytest.mark.parametrize(
    ("status", "advice"),
    [
        (400, "tool schemas"),
        (401, "OPENAI_API_KEY"),
        (403, "access"),
        (404, "model name"),
        (422, "retrying it will not help"),
    ],
)
def test_client_errors_are_permanent(chat_server, model, status, advice):
    chat_server.respond(status, {"error": {"message": "nope"}})

    with pytest.raises(PermanentModelError) as caught:
        model.generate(MESSAGES, TOOLS, SETTINGS)

    message = str(caught.value)
    assert f"returned {status}" in message
    assert advice in message and "nope" in message and chat_server.base_url in message


def test_ollama_style_string_error_is_shown(chat_server, model):
    chat_server.respond(404, {"error": 'model "llama9" not found, try pulling it first'})

    with pytest.raises(PermanentModelError, match="try pulling it first"):
        model.generate(MESSAGES, TOOLS, SETTINGS)


def test_timeout_is_transient(chat_server):
    model = OpenAIChatModel("gpt-4o", base_url=chat_server.base_url, timeout_s=0.2)
    # answered (if ever) long after the bound below, so a loaded machine's pauses fit
    # under it: only a call that waited for the answer passes it (the server's close ends
    # the wait)
    chat_server.answer("too late", delay_s=60)

    started = time.perf_counter()
    with pytest.raises(TransientModelError, match=r"timed out after 0\.2s"):
        model.generate(MESSAGES, TOOLS, SETTINGS)

    assert time.perf_counter() - started < 30


def test_the_tighter_timeout_wins(chat_server, model):
    chat_server.answer("too late", delay_s=2)

    with pytest.raises(TransientModelError, match=r"timed out after 0\.2s"):
        model.generate(MESSAGES, TOOLS, ModelSettings(timeout_s=0.2))


def test_body_cut_short_is_transient(chat_server, model):
    chat_server.respond(200, b'{"choices": [{"message": {"content": "par', length=4096)

    with pytest.raises(TransientModelError) as caught:
        model.generate(MESSAGES, TOOLS, SETTINGS)

    assert chat_server.base_url in str(caught.value)


def test_body_that_is_not_json_is_transient(chat_server, model):
    chat_server.respond(200, b'{"choices": [{"message": {"content": "par')

    with pytest.raises(TransientModelError, match="not JSON"):
        model.generate(MESSAGES, TOOLS, SETTINGS)


def test_json_without_choices_is_transient(chat_server, model):
    chat_server.respond(200, {"object": "chat.completion", "choices": []})

    with pytest.raises(TransientModelError, match="without choices"):
        model.generate(MESSAGES, TOOLS, SETTINGS)


def test_connection_refused_is_transient(closed_port):
    model = OpenAIChatModel("gpt-4o", base_url=f"http://127.0.0.1:{closed_port}/v1")

    with pytest.raises(TransientModelError) as caught:
        model.generate(MESSAGES, TOOLS, SETTINGS)

    assert f"127.0.0.1:{closed_port}" in str(caught.value)
    assert "server is up" in str(caught.value)


def test_a_base_url_without_scheme_is_permanent():
    model = OpenAIChatModel("gpt-4o", base_url="localhost:8000/v1")

    with pytest.raises(PermanentModelError, match="base URL"):
        model.generate(MESSAGES, TOOLS, SETTINGS)


def test_repr_hides_the_key():
    assert "sk-secret" not in repr(OpenAIChatModel("gpt-4o", api_key="sk-secret"))


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "-4"}, 0.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:27:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
    ],
)
def test_retry_after(headers, expected):
    now = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC)

    assert retry_after_s(httpx.Headers(headers), now=now) == expected


#: a server's refusal of a call whose prompt fits its window but whose cap does not: vLLM's
#: and OpenAI's words, and newer vLLM's
CAP_REFUSALS = [
    "This model's maximum context length is 16384 tokens. However, you requested 18432 tokens"
    " (10240 in the messages, 8192 in the completion). Please reduce the length of the messages"
    " or completion.",
    "'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum context"
    " length is 16384 tokens and your request has 10240 input tokens (8192 > 16384 - 10240).",
]


@pytest.mark.parametrize("refusal", CAP_REFUSALS)
def test_a_cap_that_passes_the_window_with_a_prompt_that_fits_is_asked_again_within_it(
    chat_server, model, refusal
):
    chat_server.respond(400, {"object": "error", "message": refusal, "code": 400})
    chat_server.answer("Let me look.", calls=[("read_file", '{"path": "a.py"}')])

    reply = model.generate(MESSAGES, TOOLS, ModelSettings(max_tokens=8192))

    assert reply.content == "Let me look."
    assert [r.body["max_tokens"] for r in chat_server.requests] == [8192, 16384 - 10240]
    assert reply.cap_lowered, "a cut at the lowered cap is the window's, not a budget's"
    assert reply.cap_lowered_to == 16384 - 10240


def test_a_prompt_that_leaves_too_little_room_for_an_answer_is_not_asked_again(chat_server, model):
    """A cap of the few tokens a prompt leaves would cut the answer (and a cut answer with no
    tool call ends the session): the prompt is too long, and the session compacts."""
    from tickwork.fsm.errors import ContextTooLong

    refusal = (
        "This model's maximum context length is 16384 tokens. However, you requested 24476"
        " tokens (16284 in the messages, 8192 in the completion)."
    )
    chat_server.respond(400, {"object": "error", "message": refusal, "code": 400})

    with pytest.raises(ContextTooLong):
        model.generate(MESSAGES, TOOLS, ModelSettings(max_tokens=8192))
    assert len(chat_server.requests) == 1


def test_a_prompt_past_the_window_is_not_asked_again(chat_server, model):
    from tickwork.fsm.errors import ContextTooLong

    chat_server.respond(
        400,
        {
            "error": {
                "message": "This model's maximum context length is 16384 tokens. However, you "
                "requested 25000 tokens (16808 in the messages, 8192 in the completion).",
                "code": "context_length_exceeded",
            }
        },
    )

    with pytest.raises(ContextTooLong):
        model.generate(MESSAGES, TOOLS, ModelSettings(max_tokens=8192))
    assert len(chat_server.requests) == 1


def test_vllms_flat_error_body_is_read_for_its_message(chat_server, model):
    """Older vLLM answers `{"object": "error", "message": ...}`: the error (and so the dead
    letter and its signature) says the server's message, not its JSON."""
    chat_server.respond(
        400,
        {
            "object": "error",
            "message": "tools.0.function.parameters is not a valid JSON schema",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    )

    with pytest.raises(PermanentModelError) as raised:
        model.generate(MESSAGES, TOOLS, SETTINGS)
    assert "400 Bad Request: tools.0.function.parameters is not a valid JSON schema;" in str(
        raised.value
    )
    assert '"object"' not in str(raised.value)
