"""Graph job kinds (docs/DESIGN.md section 12): a `GraphKind` runs a compiled graph, one
node a tick.

    from tickwork.fsm.graph import END, START, Graph

    graph = Graph("refund", version="1", state=Refund)
    graph.add_node("draft", draft)
    ...
    KIND = graph_kind(graph.compile())   # name it in TICKWORK_IMPORTS: module:KIND

The tick that runs a node is `tickwork.worker.tick.graphs`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tickwork.fsm import graph_machine
from tickwork.fsm.errors import InvalidInput, InvalidStateUpdate
from tickwork.fsm.graph import CompiledGraph, Graph
from tickwork.fsm.kinds import graph_config
from tickwork.fsm.values import Head
from tickwork.worker.jobs.kinds import JobKind
from tickwork.worker.tools.registry import ToolRegistry

__all__ = ["GraphKind", "given_update", "graph_kind"]


@dataclass(frozen=True)
class GraphKind(JobKind):
    """A job kind whose sessions run a graph; made by `graph_kind`."""

    graph: CompiledGraph = field(kw_only=True)

    def validate_patch(self, head: Head, patch: Mapping[str, Any], *, by: str) -> dict[str, Any]:
        """A person's patch of the session's state (an edit before a node, a fork's), checked
        against the schema; InvalidInput naming `by` and what is wrong."""
        try:
            self.graph.update(graph_machine.state_of(head), patch, by=by)
        except InvalidStateUpdate as exc:
            raise InvalidInput(exc.message) from None
        return dict(patch)

    def validate_output(self, head: Head, node: str, text: str) -> None:
        """The update a person gives by hand for a node run in doubt: a JSON object of state
        fields, checked against the schema; InvalidInput otherwise."""
        try:
            delta = given_update(text, node)
        except InvalidStateUpdate as exc:
            raise InvalidInput(exc.message) from None
        self.validate_patch(head, delta, by=f"the output given for node {node!r}")


def given_update(text: str, node: str) -> dict[str, Any]:
    """The state update a person typed for `node` (JSON); InvalidStateUpdate if it is none."""
    try:
        delta = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError):  # RecursionError: nested deeper than it parses
        raise InvalidStateUpdate(
            f"the output given for node {node!r} is not JSON; give the node's state update "
            "as a JSON object"
        ) from None
    if not isinstance(delta, dict):
        raise InvalidStateUpdate(f"the output given for node {node!r} is not a JSON object")
    return delta


def graph_kind(
    graph: Graph | CompiledGraph,
    *,
    tools: Callable[[], ToolRegistry] | Iterable[Any] = (),
    default_model: str | None = None,
    budgets: Mapping[str, Any] | None = None,
    system_prompt: str = "",
) -> GraphKind:
    """A job kind running `graph`; `tools` (a registry factory or `@tool`s) are what its
    nodes may run with `ctx.run_tool`; `default_model` is the model `ctx.generate` calls
    when the submission names none."""
    compiled = graph.compile() if isinstance(graph, Graph) else graph
    if callable(tools):
        make_tools = tools
    else:
        listed = tuple(tools)

        def make_tools() -> ToolRegistry:
            return ToolRegistry(listed)

    def prepare(data: Mapping[str, Any]) -> dict[str, Any]:
        given = data.get("state", data) if isinstance(data, Mapping) else data
        if not isinstance(given, Mapping):
            raise InvalidInput(
                f"the input of graph {compiled.name!r} is its first state: a JSON object"
            )
        try:
            initial = compiled.initial(given)
        except InvalidStateUpdate as exc:
            raise InvalidInput(exc.message) from None
        config: dict[str, Any] = {
            "user_prompt": f"graph {compiled.name} v{compiled.version}",
            **graph_config(compiled.name, compiled.version),
            "initial_state": initial,
        }
        if default_model:
            config["default_model"] = default_model
        return config

    return GraphKind(
        name=compiled.name,
        system_prompt=system_prompt,
        tools=make_tools,
        prepare=prepare,
        budgets=dict(budgets or {}),
        graph=compiled,
    )
