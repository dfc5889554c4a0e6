"""Job kinds for the tests: tools that record every run in a sink folder."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tickwork.worker.jobs import JobKind, repair
from tickwork.worker.jobs.repair import default_registry
from tickwork.worker.tools.confinement import resolve, workspace_root
from tickwork.worker.tools.registry import ToolContext, ToolRegistry, tool
from tickwork.worker.tools.spawn import SPAWN_TOOL, WAIT_TOOL


def _record(ctx: ToolContext, log: str, value: str) -> None:
    sink = ctx.config.get("sink")
    if sink:
        with open(Path(sink) / log, "a") as f:
            f.write(f"{ctx.idempotency_key} {value}\n")
            f.flush()


@tool(idempotent=True)
def echo(text: str) -> str:
    """Return the text."""
    return text


@tool(idempotent=True)
def idem_effect(value: str, ctx: ToolContext, sleep_s: float = 0.0) -> str:
    """An effect keyed by the idempotency key: running it twice with one key is harmless."""
    _record(ctx, "idem.log", value)
    time.sleep(sleep_s)
    return f"stored {value}"


@tool
def effect(value: str, ctx: ToolContext, sleep_s: float = 0.0) -> str:
    """An effect that must never happen twice for one call."""
    _record(ctx, "effect.log", value)
    time.sleep(sleep_s)
    return f"did {value}"


#: an edit of `danger` to this value trips a bug in its check (not a ToolError)
BUGGY_CHECK_VALUE = "trip-the-check"


def _check_danger(arguments: Mapping[str, Any]) -> None:
    if arguments.get("value") == BUGGY_CHECK_VALUE:
        _ = {}["target"]  # a check with a bug: KeyError, not the ToolError it should raise


@tool(requires_approval=True, check=_check_danger)
def danger(value: str, ctx: ToolContext) -> str:
    """A destructive effect: a person approves it first."""
    _record(ctx, "danger.log", value)
    return f"destroyed {value}"


def _tools() -> ToolRegistry:
    registry = ToolRegistry()
    for t in (echo, idem_effect, effect, danger):
        registry.register(t)
    return registry


def _prepare(data: Mapping[str, Any]) -> dict[str, Any]:
    return {"user_prompt": str(data.get("task", "run the test script")), "sink": data.get("sink")}


TEST = JobKind(name="test", system_prompt="You are a test agent.", tools=_tools, prepare=_prepare)


def _tree_tools() -> ToolRegistry:
    registry = _tools()
    registry.register(SPAWN_TOOL)
    registry.register(WAIT_TOOL)
    return registry


#: the test kind whose sessions may start children (`spawn_agents`, `wait_children`)
TREE = JobKind(
    name="tree", system_prompt="You are a test agent.", tools=_tree_tools, prepare=_prepare
)


@tool(idempotent=True, timeout_s=120.0)
def slow_write(ctx: ToolContext, path: str, content: str, sleep_s: float = 0.0) -> str:
    """Write a file in two halves, sleeping between them in a worker started with
    TICKWORK_TEST_SLOW=1: a write a kill can land in."""
    target = resolve(workspace_root(ctx.workspace), path)
    target.write_text(content[: len(content) // 2])
    if os.environ.get("TICKWORK_TEST_SLOW") == "1":
        time.sleep(sleep_s)
    target.write_text(content)
    return f"wrote {path}"


def _file_tools() -> ToolRegistry:
    registry = default_registry()
    registry.register(slow_write)
    return registry


#: the repair kind with one more tool, `slow_write`
FILES = repair.RepairKind(name="files", system_prompt="You repair code.", tools=_file_tools)


#: the size of a `read_chunk` observation
CHUNK_BYTES = 8192


def chunk(n: int) -> str:
    """Chunk `n`: 8 KB of text that differs from every other chunk."""
    import hashlib

    seed = hashlib.sha256(str(n).encode()).hexdigest()
    head = f"chunk {n}: "
    body = (seed * (CHUNK_BYTES // len(seed) + 1))[: CHUNK_BYTES - len(head)]
    return head + body


@tool(idempotent=True)
def read_chunk(n: int) -> str:
    """Read chunk n of a long document (8 KB)."""
    return chunk(n)


def _long_tools() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(read_chunk)
    return registry


#: a long session: the model reads chunk after chunk (tests/context_server.py plays it)
LONG = JobKind(
    name="long", system_prompt="You read a long document.", tools=_long_tools, prepare=_prepare
)


def _wide_tools() -> ToolRegistry:
    registry = default_registry()
    registry.register(read_chunk)
    return registry


#: the long session offered the repair tools beside `read_chunk`: schemas of about 1,900
#: tokens that every call sends
WIDE = JobKind(
    name="wide", system_prompt="You read a long document.", tools=_wide_tools, prepare=_prepare
)
