from __future__ import annotations

import pytest
from tickwork.fsm.errors import ConfigurationError
from tickwork.worker.models import (
    DEFAULT_BASE_URL,
    ModelSettings,
    OpenAIChatModel,
    ReActModel,
    ScriptedModel,
    make_model,
)


def test_scripted(write_script):
    path = write_script([{"content": "hi"}])

    model = make_model(f"scripted:{path}")

    assert isinstance(model, ScriptedModel) and model.path == path


def test_openai_from_the_environment():
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-env"}

    model = make_model("openai:gpt-4.1-mini", env=env, timeout_s=5)

    assert isinstance(model, OpenAIChatModel)
    assert (model.model, model.url, model.timeout_s) == (
        "gpt-4.1-mini",
        "http://127.0.0.1:9/v1/chat/completions",
        5,
    )


def test_arguments_beat_the_environment():
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "sk-env"}

    model = make_model("openai:m", base_url="http://127.0.0.1:8/v1", api_key="k", env=env)

    assert model.base_url == "http://127.0.0.1:8/v1"


def test_openai_itself_needs_a_key():
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        make_model("openai:gpt-4o", env={})

    assert make_model("openai:gpt-4o", env={"OPENAI_API_KEY": "k"}).base_url == DEFAULT_BASE_URL


def test_a_local_server_needs_no_key():
    model = make_model("openai:llama3", base_url="http://127.0.0.1:11434/v1", env={})

    assert isinstance(model, OpenAIChatModel)


def test_react_wraps_the_inner_spec(write_script, chat_server):
    model = make_model("react:openai:llama3", base_url=chat_server.base_url, env={})
    assert isinstance(model, ReActModel) and isinstance(model.inner, OpenAIChatModel)

    chat_server.answer("Thought: done\nFinal Answer: 42")
    reply = model.generate([{"role": "user", "content": "?"}], [], ModelSettings())

    assert reply.content == "42"
    assert "tools" not in chat_server.requests[0].body
    assert chat_server.requests[0].body["stop"] == ["\nObservation:"]

    scripted = make_model(f"react:scripted:{write_script([{'content': 'Final Answer: ok'}])}")
    assert isinstance(scripted, ReActModel) and isinstance(scripted.inner, ScriptedModel)


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "gpt-4o",
        "openai:",
        "scripted:",
        "gemini:pro",
        "react:gpt-4o",
        "react:react:openai:m",
    ],
)
def test_unknown_specs_name_the_accepted_forms(spec):
    with pytest.raises(ConfigurationError) as caught:
        make_model(spec, env={})

    assert f"unknown model spec {spec!r}" in str(caught.value)
    assert "scripted:PATH" in str(caught.value) and "react:openai:MODEL" in str(caught.value)


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "gpt-4o",
        "openai:",
        "scripted:",
        "gemini:pro",
        "react:gpt-4o",
        "react:react:openai:m",
    ],
)
def test_check_spec_refuses_what_make_model_cannot_make(spec):
    from tickwork.fsm.errors import InvalidModelSpec
    from tickwork.worker.models import check_spec

    with pytest.raises(InvalidModelSpec) as caught:
        check_spec(spec)

    for form in ("openai:MODEL", "react:openai:MODEL", "scripted:PATH"):
        assert form in str(caught.value)


@pytest.mark.parametrize(
    "spec",
    ["openai:gpt-4o", "openai:meta-llama/Llama-3.1-8B", "react:openai:llama3", "scripted:/a.json"],
)
def test_check_spec_takes_the_forms_make_model_makes(spec):
    from tickwork.worker.models import check_spec

    assert check_spec(spec) == spec
