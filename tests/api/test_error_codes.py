"""Every error code a client may branch on is in docs/API.md's table of error codes: those
the API's modules answer by name, and those of the errors a decision, a fork or an input
check raises (the class's name, as the API answers it)."""

from __future__ import annotations

import ast
from pathlib import Path

from tickwork.fsm import errors

import tickwork.api
from tickwork.api.errors import snake

API = Path(tickwork.api.__file__).parent
DOC = Path(__file__).parents[2] / "docs" / "API.md"


def answered_by_name() -> set[str]:
    """The codes of `ApiError(status, "code", ...)` and `answer(status, "code", ...)`."""
    found = set()
    for module in API.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("ApiError", "answer")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                found.add(node.args[1].value)
    return found


def raised_by_class() -> set[str]:
    """The refusals of what a request asks (not now, or not so), answered by class name."""
    found = set()
    todo = [errors.IllegalTransition, errors.InvalidInput]
    while todo:
        kind = todo.pop()
        todo.extend(kind.__subclasses__())
        # a tool's is answered inside a session, except the arguments a person's edit gives,
        # which the tool's schema checks at the decision (`invalid_tool_arguments`); only
        # fsm.errors' classes, not those other modules this process happened to import (the
        # eval runner's TaskSetError)
        told_a_client = (
            not issubclass(kind, errors.ToolError) or kind is errors.InvalidToolArguments
        )
        if told_a_client and kind.__module__ == errors.__name__:
            found.add(snake(kind.__name__))
    return found


def test_every_code_a_client_may_get_is_in_the_table() -> None:
    table = {
        line.split("`")[1]
        for line in DOC.read_text().split("## Error codes", 1)[1].splitlines()
        if line.startswith("| 4") or line.startswith("| 5")
    }
    wanted = answered_by_name() | raised_by_class()
    assert {"already_decided", "stale_decision", "session_exists", "quota_exceeded"} <= wanted
    assert "invalid_tool_arguments" in wanted
    assert not wanted - table, f"add to docs/API.md's error codes: {sorted(wanted - table)}"
