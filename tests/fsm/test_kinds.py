"""A session's kind is said in one place (`tickwork.fsm.kinds`), and the machines share
their transitions through public names only."""

from __future__ import annotations

import ast
from pathlib import Path

from tickwork.fsm.kinds import GraphRef, SessionKind, graph_config, graph_of, kind_of

from tests.fsm.conftest import Build

ROOT = Path(__file__).resolve().parents[2]
#: the session machines and the tick that runs them
PACKAGES = ("fsm", "worker/tick", "worker/jobs")


def test_a_session_stored_with_a_graph_is_a_graph_session(build: Build) -> None:
    # the shape of the sessions already in the database: config["graph"] = {name, version}
    head = build.head(config={"user_prompt": "x", "graph": {"name": "refund", "version": "1"}})
    assert kind_of(head) is SessionKind.GRAPH
    assert kind_of(head.config) is SessionKind.GRAPH
    assert graph_of(head) == GraphRef(name="refund", version="1")


def test_any_other_session_is_an_agent_session(build: Build) -> None:
    assert kind_of(build.head(config={"user_prompt": "x"})) is SessionKind.AGENT
    # a key named "graph" that holds no graph's name and version is an agent's own setting
    assert kind_of({"graph": "a picture"}) is SessionKind.AGENT
    assert graph_of({"user_prompt": "x"}) is None


def test_graph_config_makes_what_kind_of_reads() -> None:
    config = graph_config("refund", "2")
    assert kind_of(config) is SessionKind.GRAPH
    assert graph_of(config) == GraphRef(name="refund", version="2")


def private_imports(path: Path) -> list[str]:
    """`from tickwork... import _name` in `path`: a module reaching into another's privates."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tickwork"):
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}.{alias.name}"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    found = [
        hit for p in PACKAGES for path in (ROOT / p).rglob("*.py") for hit in private_imports(path)
    ]
    assert not found, "imports of private names (make them public in a shared module):\n" + (
        "\n".join(found)
    )
