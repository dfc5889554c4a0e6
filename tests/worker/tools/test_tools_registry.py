"""The tool decorator, schemas from signatures, validation, the registry and `run_tool`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import pytest
from pydantic import Field
from tickwork.fsm.approvals import ApprovalRule, needs_approval
from tickwork.fsm.errors import ConfigurationError, InvalidToolArguments, ToolError, UnknownTool
from tickwork.worker.tools import Tool, ToolContext, ToolRegistry, ToolResult, run_tool, tool
from tickwork.worker.tools.registry import cap_output, render_output


@tool
def greet(name: str, times: int = 1, loud: bool = False) -> str:
    """Greet someone.

    Args:
        name: who to greet.
        times: how many times,
            at least once.
    """
    text = " ".join(["hello " + name] * times)
    return text.upper() if loud else text


@tool(name="where", idempotent=True, timeout_s=5)
def where_am_i(ctx: ToolContext, suffix: str = "") -> str:
    """Say which call this is."""
    return f"{ctx.idempotency_key}|{ctx.config.get('who')}|{ctx.timeout_s}{suffix}"


def _deny_all(arguments: Mapping[str, Any]) -> bool:
    return "x" in arguments.get("target", "")


@tool(requires_approval=True)
def dangerous(target: str) -> str:
    """Do something that needs a person."""
    return target


@tool(approval_policy=_deny_all)
def sometimes(target: str) -> str:
    """Needs a person when the target has an x."""
    return target


def test_schema_comes_from_the_signature() -> None:
    schema = greet.schema
    assert schema["type"] == "object"
    assert schema["required"] == ["name"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["name"]["type"] == "string"
    assert props["times"] == {
        "type": "integer",
        "default": 1,
        "description": "how many times, at least once.",
    }
    assert props["loud"]["type"] == "boolean"
    assert "title" not in json.dumps(schema)


def test_description_comes_from_the_docstring_without_the_args_section() -> None:
    assert greet.description == "Greet someone."
    assert greet.schema["properties"]["name"]["description"] == "who to greet."


def test_openai_schema_shape() -> None:
    spec = greet.openai_schema()
    assert spec == {
        "type": "function",
        "function": {"name": "greet", "description": "Greet someone.", "parameters": greet.schema},
    }
    spec["function"]["parameters"]["properties"].clear()
    assert greet.schema["properties"], "callers get a copy, not the tool's own schema"


def test_ctx_is_injected_and_not_in_the_schema(make_ctx: Callable[..., ToolContext]) -> None:
    assert where_am_i.name == "where"
    assert where_am_i.context_param == "ctx"
    assert "ctx" not in where_am_i.schema["properties"]
    ctx = make_ctx(config={"who": "me"})
    result = run_tool(where_am_i, {"suffix": "!"}, ctx)
    assert result == ToolResult(output="sess:1:s1c0|me|5.0!", duration_ms=result.duration_ms)


def test_ctx_timeout_is_the_smaller_of_tool_and_context(
    make_ctx: Callable[..., ToolContext],
) -> None:
    assert run_tool(where_am_i, {}, make_ctx(timeout_s=2)).output.endswith("|2")
    assert run_tool(where_am_i, {}, make_ctx(timeout_s=50)).output.endswith("|5.0")


def test_ctx_cannot_be_passed_by_the_model(make_ctx: Callable[..., ToolContext]) -> None:
    result = run_tool(where_am_i, {"ctx": "forged"}, make_ctx())
    assert result.is_error
    assert "unexpected argument 'ctx'" in result.output


def test_context_idempotency_key_defaults_to_the_design_format() -> None:
    ctx = ToolContext(session_id="abc", call_id="s3c1", step=3)
    assert ctx.idempotency_key == "abc:3:s3c1"
    assert ToolContext("abc", "s3c1", 3, idempotency_key="given").idempotency_key == "given"


def test_flags_and_rules() -> None:
    assert greet.rule == ApprovalRule(always=False, policy=None)
    assert dangerous.rule.always
    assert needs_approval(dangerous.rule, {"target": "a"})
    assert needs_approval(sometimes.rule, {"target": "x"})
    assert not needs_approval(sometimes.rule, {"target": "a"})
    assert where_am_i.idempotent and not greet.idempotent
    assert greet.timeout_s == 60.0


def test_validate_returns_keyword_arguments_with_defaults() -> None:
    assert greet.validate({"name": "ann"}) == {"name": "ann", "times": 1, "loud": False}
    assert greet.validate({"name": "ann", "times": "2"})["times"] == 2


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "missing required argument 'name'"),
        ({"name": "a", "times": "lots"}, "argument 'times': Input should be a valid integer"),
        ({"name": 5}, "argument 'name': Input should be a valid string"),
        ({"name": "a", "colour": "red"}, "unexpected argument 'colour'"),
        (["a"], "must be a JSON object, got list"),
    ],
)
def test_validation_errors_name_the_field_and_the_expected_schema(
    arguments: Any, expected: str
) -> None:
    with pytest.raises(InvalidToolArguments) as caught:
        greet.validate(arguments)
    assert expected in caught.value.message
    assert "greet(name: string, times: integer = 1, loud: boolean = false)" in caught.value.message


def test_invalid_arguments_run_nothing(make_ctx: Callable[..., ToolContext]) -> None:
    ran = []

    @tool
    def record(value: int) -> str:
        """Record a value."""
        ran.append(value)
        return "ok"

    result = run_tool(record, {"value": "nope"}, make_ctx())
    assert result.is_error
    assert "argument 'value'" in result.output
    assert ran == []


def test_field_constraints_and_awkward_parameter_names() -> None:
    @tool
    def odd(schema: str, model_name: str = "m", count: Annotated[int, Field(ge=1)] = 1) -> str:
        """Names that would clash with pydantic's own attributes."""
        return f"{schema}/{model_name}/{count}"

    assert set(odd.schema["properties"]) == {"schema", "model_name", "count"}
    assert odd.schema["properties"]["count"]["minimum"] == 1
    assert odd(**odd.validate({"schema": "s"})) == "s/m/1"
    with pytest.raises(InvalidToolArguments, match="greater than or equal to 1"):
        odd.validate({"schema": "s", "count": 0})


def test_bad_tool_definitions_are_refused() -> None:
    def star(*args: int) -> None:
        """Variadic."""

    with pytest.raises(ConfigurationError, match="no \\*args"):
        tool(star)
    with pytest.raises(ConfigurationError, match="tool name"):
        tool(name="has space")(greet.fn)
    with pytest.raises(ConfigurationError, match="timeout_s"):
        tool(timeout_s=0)(greet.fn)


def test_timeout_of_a_hung_tool(make_ctx: Callable[..., ToolContext]) -> None:
    release = threading.Event()

    @tool(timeout_s=0.2)
    def hang() -> str:
        """Never answers on its own."""
        release.wait(60)
        return "late"

    started = time.perf_counter()
    result = run_tool(hang, {}, make_ctx())
    release.set()
    # the tool would answer after 60 s: well under that, with room for a loaded machine's
    # pauses, the run did not wait for it
    assert time.perf_counter() - started < 30
    assert result.is_error
    assert "timed out after 0.2s" in result.output


def test_an_exception_becomes_an_error_observation(
    make_ctx: Callable[..., ToolContext], caplog: pytest.LogCaptureFixture
) -> None:
    @tool
    def boom(n: int) -> str:
        """Fails."""
        raise ValueError(f"bad n {n}")

    @tool
    def tool_error() -> str:
        """Fails the tickwork way."""
        raise ToolError("no such thing")

    caplog.set_level("INFO", logger="tickwork")
    result = run_tool(boom, {"n": 3}, make_ctx())
    assert (result.output, result.is_error) == ("ValueError: bad n 3", True)
    result = run_tool(tool_error, {}, make_ctx())
    assert (result.output, result.is_error) == ("ToolError: no such thing", True)
    # the log keeps a bug's traceback, and gives a tool's own error as its one line
    traced = {r.getMessage().split(" raised ")[-1]: r.exc_info is not None for r in caplog.records}
    assert traced == {"ValueError: bad n 3": True, "ToolError: no such thing": False}


def test_a_tool_error_s_long_output_is_not_logged(
    make_ctx: Callable[..., ToolContext], caplog: pytest.LogCaptureFixture
) -> None:
    # a command killed at its output cap says so with the output it made: up to 10 MB the
    # model wrote for, which went whole into the worker's log at every such call
    flood = "y\n" * 1_000_000

    @tool
    def killed() -> str:
        """Killed at its output cap."""
        raise ToolError(f"the command was killed: its output passed 10 bytes\n{flood}")

    caplog.set_level("INFO", logger="tickwork")
    result = run_tool(killed, {}, make_ctx(), max_output_chars=1_000)
    assert result.output.startswith("ToolError: the command was killed") and result.is_error
    (record,) = caplog.records
    logged = record.getMessage()
    assert logged.endswith("raised ToolError: the command was killed: its output passed 10 bytes")
    assert len(logged) < 500


def test_non_string_results_are_json(make_ctx: Callable[..., ToolContext]) -> None:
    @dataclass
    class Point:
        x: int

    @tool
    def data() -> dict[str, Any]:
        """Returns structured data."""
        return {"b": [1, 2], "p": Point(3), "s": "é"}

    result = run_tool(data, {}, make_ctx())
    assert not result.is_error
    assert json.loads(result.output) == {"b": [1, 2], "p": {"x": 3}, "s": "é"}
    assert render_output(None) == "null"
    assert render_output(b"raw") == "raw"


def test_output_is_capped_keeping_head_and_tail(make_ctx: Callable[..., ToolContext]) -> None:
    @tool
    def loud() -> str:
        """Says a lot."""
        return "H" * 50 + "x" * 1000 + "T" * 50

    result = run_tool(loud, {}, make_ctx(), max_output_chars=100)
    assert result.output.startswith("H" * 50)
    assert result.output.endswith("T" * 50)
    assert "1000 characters cut" in result.output
    assert cap_output("short", 100) == "short"


def test_registry_lookup_and_unknown_tool() -> None:
    registry = ToolRegistry([greet, where_am_i])
    assert registry.names() == ("greet", "where")
    assert "greet" in registry and "nope" not in registry
    assert registry.get("greet") is greet
    with pytest.raises(UnknownTool) as caught:
        registry.get("gret")
    assert "'gret'" in caught.value.message
    assert "greet, where" in caught.value.message


def test_registry_schemas_rules_and_select() -> None:
    registry = ToolRegistry()
    assert registry.register(greet) is greet
    registry.register(dangerous)
    registry.register(greet)  # the same tool twice is harmless
    assert [s["function"]["name"] for s in registry.schemas()] == ["greet", "dangerous"]
    assert [s["function"]["name"] for s in registry.schemas(["dangerous"])] == ["dangerous"]
    assert registry.rules() == {"greet": greet.rule, "dangerous": dangerous.rule}
    assert registry.select(["dangerous"]).names() == ("dangerous",)
    with pytest.raises(UnknownTool):
        registry.schemas(["missing"])


def test_registry_refuses_clashes_and_non_tools() -> None:
    registry = ToolRegistry([greet])
    other = tool(name="greet")(dangerous.fn)
    with pytest.raises(ConfigurationError, match="already registered"):
        registry.register(other)
    with pytest.raises(ConfigurationError, match="decorate the function"):
        registry.register(greet.fn)  # type: ignore[arg-type]


def test_tool_is_still_callable_directly() -> None:
    assert isinstance(greet, Tool)
    assert greet("bo", times=2) == "hello bo hello bo"


def test_a_return_annotation_that_does_not_resolve_is_fine() -> None:
    class Local:
        pass

    def make() -> Local:
        """Returns a local type."""
        return Local()

    assert tool(make).schema["properties"] == {}


def test_an_unresolvable_parameter_annotation_is_a_configuration_error() -> None:
    def broken(x: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
        """Broken."""
        return ""

    with pytest.raises(ConfigurationError, match="cannot read its annotations"):
        tool(broken)


def test_registry_schemas_are_built_once_and_the_list_is_the_callers() -> None:
    """A registry builds its schemas once per list of names; the list it gives is the
    caller's to extend (a THINK adds `recall`), and a tool registered later is in it."""
    registry = ToolRegistry([greet])
    first = registry.schemas()
    first.append({"type": "function", "function": {"name": "recall"}})
    again = registry.schemas()
    assert [s["function"]["name"] for s in again] == ["greet"]
    assert again[0] is first[0] and again == [greet.openai_schema()]
    assert registry.schemas(["greet"])[0] is registry.schemas(("greet",))[0]
    registry.register(dangerous)
    assert [s["function"]["name"] for s in registry.schemas()] == ["greet", "dangerous"]
