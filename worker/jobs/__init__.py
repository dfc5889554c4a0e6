"""Job kinds: what a session of a kind is told, which tools it has, and its defaults.

A job kind is an importable object (`module:attr`); workers find kinds by name in the
built-ins and in `TICKWORK_IMPORTS` (which may also name model providers). The built-in
`repair` kind and its toolkit are the package `tickwork.worker.jobs.repair`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tickwork.fsm.errors import ConfigurationError, InvalidInput
from tickwork.worker.config.imports import load_object
from tickwork.worker.models.providers import Provider
from tickwork.worker.tools.registry import ToolRegistry

#: built-in kinds by name
BUILTIN = {"repair": "tickwork.worker.jobs.repair:REPAIR"}


@dataclass(frozen=True)
class JobKind:
    name: str
    system_prompt: str
    #: builds the kind's tools; called once per process
    tools: Callable[[], ToolRegistry]
    #: `prepare(input, state_dir=...)` turns the submitted input into the session's config
    #: (at least `user_prompt`); raises InvalidInput naming what is wrong. It is given those
    #: of these keywords it takes: `state_dir` (where the deployment keeps files),
    #: `artifacts` (the artifact store, e.g. for the repair job's source), `trusted` (False
    #: for a submission over the HTTP API) and `workspace_roots` (the directories such a
    #: submission may name). A kind that reads local paths from its input must take
    #: `trusted` and refuse paths outside `workspace_roots` when it is False.
    prepare: Callable[..., dict[str, Any]]
    #: budget defaults for this kind, over the settings' defaults
    budgets: Mapping[str, Any] = field(default_factory=dict)
    #: what the job produced, computed when the session completes (e.g. the repair's patch);
    #: `finish(head)`, or `finish(head, files=...)` to get the tick's files (`TickFiles`)
    finish: Callable[..., dict[str, Any]] | None = None


class Jobs:
    """Resolves job kinds by name, caching each kind and its tool registry."""

    def __init__(self, imports: list[str] | tuple[str, ...] = ()) -> None:
        self._specs = dict(BUILTIN)
        self._imports = list(imports)
        self._kinds: dict[str, JobKind] = {}
        self._tools: dict[str, ToolRegistry] = {}

    def get(self, name: str) -> JobKind:
        if name in self._kinds:
            return self._kinds[name]
        kind = self._resolve(name)
        self._kinds[name] = kind
        return kind

    def tools(self, name: str) -> ToolRegistry:
        if name not in self._tools:
            self._tools[name] = self.get(name).tools()
        return self._tools[name]

    def _resolve(self, name: str) -> JobKind:
        if name in self._specs:
            return _as_kind(load_object(self._specs[name]), self._specs[name])
        for spec in self._imports:
            found = load_object(spec)
            if isinstance(found, Provider):
                continue  # a model provider (tickwork.worker.models.providers), not a job kind
            kind = _as_kind(found, spec)
            self._specs[kind.name] = spec
            if kind.name == name:
                return kind
        if ":" in name:
            return _as_kind(load_object(name), name)
        known = ", ".join(sorted(self._specs))
        raise InvalidInput(
            f"unknown job kind {name!r}; known: {known}; or give module:attr "
            "(workers must be able to import it: set TICKWORK_IMPORTS)"
        )


def _as_kind(obj: Any, spec: str) -> JobKind:
    if not isinstance(obj, JobKind):
        raise ConfigurationError(
            f"{spec} is a {type(obj).__name__}, not a tickwork.worker.jobs.JobKind"
        )
    return obj
