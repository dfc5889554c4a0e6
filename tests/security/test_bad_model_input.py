"""Bad input from the model, through real ticks: each is a clear error or an observation the
model can act on, the refused call runs nothing, and the session goes on (nothing lost)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from sqlalchemy import inspect
from tickwork.fsm.values import CallState, ErrorCode, EventKind, Status

from tests.security.conftest import (
    Env,
    RawModel,
    completion,
    observations,
    raw_model,
    tool_call,
)

DONE: dict[str, Any] = {"content": "done"}


def one_call(name: str, arguments: Any) -> list[dict[str, Any]]:
    """A reply with one call, then a final answer."""
    return [{"content": "try", "tool_calls": [{"name": name, "arguments": arguments}]}, DONE]


def refused(env: Env, replies: list[dict[str, Any]], *fragments: str) -> str:
    """Run the session; its first call must get an error observation naming `fragments`,
    run nothing, and the session must complete."""
    session_id = env.submit(replies)
    head = env.run(session_id)
    assert head.status is Status.COMPLETED, (head.status, head.error_message)
    text, is_error = observations(env.load(session_id))["s1c0"]
    assert is_error, text
    for fragment in fragments:
        assert fragment in text, (fragment, text)
    assert env.effects(session_id) == []
    return text


# -- the model's reply itself -----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        pytest.param(b"", "not JSON", id="empty-body"),
        pytest.param(b'{"choices": [{"message": {"content": "cut', "not JSON", id="cut-off"),
        pytest.param(b'{"choices": []}', "without choices[0].message", id="no-choices"),
        pytest.param(b'{"error": null}', "without choices[0].message", id="no-message"),
    ],
)
def test_an_empty_or_broken_reply_is_retried_then_fails_with_a_clear_error(
    sqlite_env: Env, monkeypatch: pytest.MonkeyPatch, body: bytes, fragment: str
) -> None:
    model = RawModel([body])
    with raw_model(model, monkeypatch) as spec:
        session_id = sqlite_env.submit(model=spec, budgets={"max_model_retries": 1})
        head = sqlite_env.run(session_id)
    assert len(model.requests) == 2, "one attempt, then one retry"
    assert head.status is Status.FAILED and head.error_code is ErrorCode.MODEL_ERROR
    assert fragment in head.error_message and "a retry may succeed" in head.error_message
    session = sqlite_env.load(session_id)
    retries = [e for e in session.events if e.kind is EventKind.MODEL_RETRY]
    assert len(retries) == 1 and fragment in retries[0].data["error"]
    assert session.steps == ()
    assert sqlite_env.client.dead_letter(session_id).code == "MODEL_ERROR"


@pytest.mark.parametrize(
    "message",
    [
        pytest.param({"role": "assistant", "content": None}, id="null-content"),
        pytest.param({"role": "assistant", "content": "", "tool_calls": []}, id="empty"),
        pytest.param({"role": "assistant", "content": "  \n"}, id="whitespace"),
    ],
)
def test_a_reply_with_neither_content_nor_calls_is_not_taken_as_the_answer(
    sqlite_env: Env, monkeypatch: pytest.MonkeyPatch, message: dict[str, Any]
) -> None:
    model = RawModel([completion(message)])
    with raw_model(model, monkeypatch) as spec:
        session_id = sqlite_env.submit(model=spec, budgets={"max_model_retries": 1})
        head = sqlite_env.run(session_id)
    assert head.status is Status.FAILED, f"completed with final answer {head.final_answer!r}"
    assert head.error_code is ErrorCode.MODEL_ERROR and "empty" in head.error_message


def test_an_empty_scripted_reply_is_not_taken_as_the_answer(sqlite_env: Env) -> None:
    head = sqlite_env.run(sqlite_env.submit([{}], budgets={"max_model_retries": 1}))
    assert head.status is Status.FAILED and "empty" in head.error_message


# -- tool names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["rm_rf", "Echo", "'; DROP TABLE tickwork_sessions; --", "../../bin/sh", ""],
    ids=["unknown", "wrong-case", "sql", "path", "empty"],
)
def test_an_unknown_tool_gets_an_observation_listing_the_tools(env: Env, name: str) -> None:
    refused(env, one_call(name, {"text": "hi"}), "unknown tool", "echo, effect")
    assert "tickwork_sessions" in inspect(env.store.engine).get_table_names()


UNSTORABLE_NAMES = [pytest.param("echo\x00", id="nul"), pytest.param("x" * 500, id="huge")]


@pytest.mark.parametrize("name", UNSTORABLE_NAMES)
def test_a_tool_name_with_nul_or_of_500_characters_on_sqlite(sqlite_env: Env, name: str) -> None:
    refused(sqlite_env, one_call(name, {"text": "hi"}), "unknown tool")


# -- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    ["{not json", '{"value": "a"', "[1, 2]", "42", "null", '"value"', "{'value': 'a'}"],
    ids=["broken", "unclosed", "array", "number", "null", "string", "python-repr"],
)
def test_arguments_that_are_not_a_json_object(env: Env, arguments: str) -> None:
    refused(env, one_call("effect", arguments), "not a valid JSON object", "JSON object")


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"value": 42}, "argument 'value'"),
        ({"value": None}, "argument 'value'"),
        ({"value": ["a"]}, "argument 'value'"),
        ({"value": {"nested": 1}}, "argument 'value'"),
        ({}, "missing required argument 'value'"),
        ({"valu": "a"}, "unexpected argument 'valu'"),
        ({"value": "a", "sudo": True}, "unexpected argument 'sudo'"),
    ],
    ids=["int", "null", "list", "object", "missing", "typo", "extra"],
)
def test_arguments_of_the_wrong_type_or_shape(
    env: Env, arguments: dict[str, Any], fragment: str
) -> None:
    refused(
        env,
        one_call("effect", arguments),
        "invalid arguments for effect",
        fragment,
        "effect(value: string)",
    )


def test_deeply_nested_arguments_are_refused_not_fatal(sqlite_env: Env) -> None:
    refused(sqlite_env, one_call("effect", "[" * 100_000), "not a valid JSON object")


def test_a_huge_argument_is_stored_whole_and_its_output_capped(env: Env) -> None:
    text = "z" * 2_000_000
    session_id = env.submit(one_call("echo", {"text": text}))
    head = env.run(session_id)
    assert head.status is Status.COMPLETED
    session = env.load(session_id)
    call = session.call("s1c0")
    assert call is not None and call.arguments == {"text": text}
    output, is_error = observations(session)["s1c0"]
    assert not is_error and len(output) < env.settings.max_output_chars + 200
    assert "characters cut from the middle" in output


def test_thousands_of_calls_in_one_reply_run_up_to_the_limit(sqlite_env: Env) -> None:
    calls = [{"name": "echo", "arguments": {"text": f"t{i}"}} for i in range(3000)]
    session_id = sqlite_env.submit([{"content": "many", "tool_calls": calls}, DONE])
    head = sqlite_env.run(session_id)
    assert head.status is Status.COMPLETED
    session = sqlite_env.load(session_id)
    limit = head.budgets.max_calls_per_step
    assert len(session.steps[0].calls) == limit
    assert len(session.observations) == limit
    recorded = next(e for e in session.events if e.kind is EventKind.STEP_RECORDED)
    assert recorded.data["dropped_calls"] == 3000 - limit


def test_the_model_is_told_that_calls_past_the_limit_were_dropped(
    sqlite_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = [tool_call(f"c{i}", "echo", json.dumps({"text": f"t{i}"})) for i in range(100)]
    model = RawModel(
        [
            completion({"role": "assistant", "content": "", "tool_calls": calls}),
            completion({"role": "assistant", "content": "done"}),
        ]
    )
    with raw_model(model, monkeypatch) as spec:
        head = sqlite_env.run(sqlite_env.submit(model=spec))
    assert head.status is Status.COMPLETED
    told = [m["content"] for m in model.requests[1]["messages"][2:] if m["role"] == "user"]
    assert any("dropped" in t and "32" in t for t in told), told


def test_duplicate_and_missing_call_ids_get_ids_of_our_own(
    sqlite_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = [
        tool_call("call_1", "echo", '{"text": "a"}'),
        tool_call("call_1", "echo", '{"text": "b"}'),
        tool_call(None, "echo", '{"text": "c"}'),
        tool_call("call_1", "effect", '{"value": "d"}'),
    ]
    model = RawModel(
        [
            completion({"role": "assistant", "content": "", "tool_calls": calls}),
            completion({"role": "assistant", "content": "done"}),
        ]
    )
    with raw_model(model, monkeypatch) as spec:
        session_id = sqlite_env.submit(model=spec)
        head = sqlite_env.run(session_id)
    assert head.status is Status.COMPLETED
    seen = observations(sqlite_env.load(session_id))
    assert [seen[f"s1c{i}"][0] for i in range(4)] == ["a", "b", "c", "did d"]
    assert sqlite_env.effects(session_id) == [f"{session_id}:1:s1c3 d"]
    sent = model.requests[1]["messages"]
    ids = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert ids == answered == ["s1c0", "s1c1", "s1c2", "s1c3"]


def test_a_reply_that_arrives_after_cancel_runs_nothing(sqlite_env: Env) -> None:
    env = sqlite_env
    replies = [
        {
            "content": "slow",
            "delay_s": 1.5,
            "tool_calls": [{"name": "effect", "arguments": {"value": "late"}}],
        },
        DONE,
    ]
    session_id = env.submit(replies)
    ticking = threading.Thread(target=env.tick, args=(session_id,))
    ticking.start()
    try:
        deadline = time.monotonic() + 10
        while not _leased(env, session_id):  # the tick has claimed it and waits on the model
            assert time.monotonic() < deadline, "the tick never claimed the session"
            time.sleep(0.02)
        cancelled = env.client.cancel(session_id, by="ops")
        assert cancelled.status is Status.READY and cancelled.cancel_requested
    finally:
        ticking.join(30)
    head = env.run(session_id)
    assert head.status is Status.CANCELLED
    session = env.load(session_id)
    assert len(session.steps) == 1, "the late reply is recorded, not lost"
    text, is_error = observations(session)["s1c0"]
    assert is_error and "cancelled" in text
    assert session.call("s1c0").state is CallState.DONE  # type: ignore[union-attr]
    assert env.effects(session_id) == []


def _leased(env: Env, session_id: str) -> bool:
    from sqlalchemy import select
    from tickwork.store.schema import sessions

    with env.store.engine.connect() as conn:
        owner = conn.execute(
            select(sessions.c.lease_owner).where(sessions.c.id == session_id)
        ).scalar_one()
    return owner is not None


# -- what Postgres cannot store -----------------------------------------------------------

NUL_ARGUMENTS = '{"text": "a\\u0000b"}'
NON_STANDARD = ['{"value": NaN}', '{"value": Infinity}', '{"value": -Infinity}', '{"value": 1e400}']


def _nul_in_arguments(env: Env) -> None:
    session_id = env.submit(one_call("echo", NUL_ARGUMENTS))
    assert env.run(session_id).status is Status.COMPLETED
    assert env.load(session_id).call("s1c0") is not None


def _nul_in_answer(env: Env) -> None:
    session_id = env.submit([{"content": "the answer\u0000is 42"}])
    head = env.run(session_id)
    assert head.status is Status.COMPLETED and "is 42" in (head.final_answer or "")


def _non_standard_numbers(env: Env, arguments: str) -> None:
    text = refused(env, one_call("effect", arguments), "effect")
    assert "JSON" in text or "valid string" in text


def test_nul_characters_from_the_model_are_stored_on_sqlite(sqlite_env: Env) -> None:
    _nul_in_arguments(sqlite_env)
    _nul_in_answer(sqlite_env)


@pytest.mark.parametrize("arguments", NON_STANDARD)
def test_nan_and_infinity_in_arguments_on_sqlite(sqlite_env: Env, arguments: str) -> None:
    _non_standard_numbers(sqlite_env, arguments)


@pytest.mark.parametrize("name", UNSTORABLE_NAMES)
def test_a_tool_name_with_nul_or_of_500_characters_on_postgres(
    postgres_env: Env, name: str
) -> None:
    refused(postgres_env, one_call(name, {"text": "hi"}), "unknown tool")


def test_nul_in_tool_arguments_on_postgres(postgres_env: Env) -> None:
    _nul_in_arguments(postgres_env)


def test_nul_in_the_answer_on_postgres(postgres_env: Env) -> None:
    _nul_in_answer(postgres_env)


@pytest.mark.parametrize("arguments", NON_STANDARD)
def test_nan_and_infinity_in_arguments_on_postgres(postgres_env: Env, arguments: str) -> None:
    _non_standard_numbers(postgres_env, arguments)
