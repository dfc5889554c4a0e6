"""What kind of session a session is (docs/DESIGN.md section 12), said in one place.

A session is an agent loop (the model thinks, tools run) or a graph (one node a tick). The
kind is read from what the session stores, once, by `kind_of`; nothing else asks the
config which keys it holds. A graph session stores its graph's name and version under
`config["graph"]` (so do the sessions already in the database), read by `graph_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from tickwork.fsm.values import Head, Value

#: the config key a graph session keeps its graph's name and version under
GRAPH_KEY = "graph"


class SessionKind(StrEnum):
    AGENT = "agent"  #: the model thinks, the tools it calls run (docs/DESIGN.md section 2)
    GRAPH = "graph"  #: one node of a graph a tick (`tickwork.fsm.graph_machine`)


class GraphRef(Value):
    """The graph a graph session runs: its name and version, as the session recorded them."""

    name: str
    version: str


def _config(source: Head | Mapping[str, Any]) -> Mapping[str, Any]:
    return source.config if isinstance(source, Head) else source


def kind_of(source: Head | Mapping[str, Any]) -> SessionKind:
    """The kind of the session whose head (or config) is `source`."""
    return (
        SessionKind.GRAPH
        if isinstance(_config(source).get(GRAPH_KEY), Mapping)
        else (SessionKind.AGENT)
    )


def graph_of(source: Head | Mapping[str, Any]) -> GraphRef | None:
    """The graph a graph session runs (None for an agent session)."""
    stored = _config(source).get(GRAPH_KEY)
    if not isinstance(stored, Mapping):
        return None
    return GraphRef(name=str(stored.get("name", "")), version=str(stored.get("version", "")))


def graph_config(name: str, version: str) -> dict[str, Any]:
    """The config entries that make a session a graph session of graph `name` at `version`."""
    return {GRAPH_KEY: {"name": name, "version": version}}
