"""Fixtures for the tool tests: a real workspace directory and a context to call tools in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tickwork.worker.jobs.repair import default_registry
from tickwork.worker.tools import ToolContext, ToolResult, run_tool


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def make_ctx(workspace: Path) -> Callable[..., ToolContext]:
    def make(**overrides: Any) -> ToolContext:
        fields: dict[str, Any] = {
            "session_id": "sess",
            "call_id": "s1c0",
            "step": 1,
            "workspace": workspace,
        }
        return ToolContext(**{**fields, **overrides})

    return make


@pytest.fixture
def call(make_ctx: Callable[..., ToolContext]) -> Callable[..., ToolResult]:
    """Run a repair tool by name through `run_tool`, as the worker does."""
    registry = default_registry()

    def run(name: str, /, ctx: ToolContext | None = None, **arguments: Any) -> ToolResult:
        return run_tool(registry.get(name), arguments, ctx or make_ctx())

    return run
