"""Job kinds: what a session of a kind is told, which tools it has, and its defaults.

A job kind is an importable object (`module:attr`) that implements `Kind`: the typed
interface the engine calls, with fixed signatures that take small context values
(`Submission` when a session is submitted, `Ending` when it completes; all in `kinds.py`).
`JobKind` builds one from plain functions (the input in, the config out). Workers find
kinds by name in the built-ins and in `TICKWORK_IMPORTS` (which may also name model
providers). The built-in `repair` kind and its toolkit are the package
`tickwork.worker.jobs.repair`; graph kinds (`graph_kind`) are `tickwork.worker.jobs.graphs`.
`tickwork.testing.check_job_kind` checks a kind of your own against all of this.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tickwork.fsm.errors import (
    ConfigurationError,
    InvalidInput,
    NotImportable,
    TickworkError,
    UnknownKind,
)
from tickwork.fsm.trees import SPAWN_AGENTS
from tickwork.worker.config.imports import load_object
from tickwork.worker.jobs.graphs import GraphKind
from tickwork.worker.jobs.kinds import Ending, JobKind, Kind, SessionFiles, Submission
from tickwork.worker.jobs.roles import Role, Staffed, check_roles, configured_roles, role_for
from tickwork.worker.models.providers import Provider
from tickwork.worker.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from tickwork.store.port import Store

__all__ = [
    "BUILTIN",
    "Ending",
    "GraphKind",
    "JobKind",
    "Jobs",
    "Kind",
    "Role",
    "SessionFiles",
    "Staffed",
    "Submission",
    "as_kind",
    "role_for",
    "session_config",
]

#: built-in kinds by name
BUILTIN = {"repair": "tickwork.worker.jobs.repair:REPAIR"}


class Jobs:
    """Resolves job kinds by name, caching each kind and its tool registry."""

    def __init__(
        self, imports: list[str] | tuple[str, ...] = (), *, roles_file: Path | None = None
    ) -> None:
        self._specs = dict(BUILTIN)
        self._imports = list(imports)
        self._roles_file = roles_file
        self._kinds: dict[str, Kind] = {}
        self._tools: dict[str, ToolRegistry] = {}
        self._roles: dict[str, Mapping[str, Role]] = {}
        self._idempotent: dict[str, frozenset[str]] = {}

    def get(self, name: str) -> Kind:
        if name in self._kinds:
            return self._kinds[name]
        kind = self._resolve(name)
        self._kinds[name] = kind
        return kind

    def missing(self, name: str) -> str | None:
        """Why this process cannot have the job kind `name`, or None if it can: the name is
        not among its kinds (its TICKWORK_IMPORTS lack it: a worker started before the
        deploy that added it) or a module is not importable here. A tick then refuses the
        session for a worker that has the kind. A kind found but broken raises."""
        try:
            self.get(name)
        except UnknownKind:
            # not the submitter's message (its "or give module:attr" is no worker's to do)
            return (
                f"TICKWORK_IMPORTS here names no kind {name!r}; this worker's kinds: "
                f"{', '.join(sorted(self._specs))}"
            )
        except NotImportable as exc:
            return exc.message
        return None

    def names(self) -> tuple[str, ...]:
        """The names of the kinds this process has, sorted: the built-in ones and those
        TICKWORK_IMPORTS names (each imported; one that does not import raises)."""
        for spec in self._imports:
            found = load_object(spec)
            if not isinstance(found, Provider):
                self._specs.setdefault(as_kind(found, spec).name, spec)
        return tuple(sorted(self._specs))

    def graph(self, name: str) -> GraphKind:
        """The graph kind `name`; InvalidInput if the kind runs no graph."""
        kind = self.get(name)
        if not isinstance(kind, GraphKind):
            raise InvalidInput(
                f"job kind {name!r} runs no graph here, but a graph session or a state patch "
                f"names it; check that TICKWORK_IMPORTS loads the graph kind {name!r}"
            )
        return kind

    def tools(self, name: str) -> ToolRegistry:
        if name not in self._tools:
            kind = self.get(name)
            try:
                registry = kind.tools()
            except TickworkError:
                raise
            except Exception as exc:  # the kind's bug: named, where a worker starts too
                raise ConfigurationError(
                    f"job kind {name!r}: its tools() raised {type(exc).__name__}: {exc}"
                ) from exc
            self._tools[name] = registry
            if not isinstance(kind, GraphKind):
                # replaced, not changed in place: a claim in another thread may be reading it
                self._idempotent = {**self._idempotent, name: idempotent_tools(registry)}
        return self._tools[name]

    @property
    def idempotent(self) -> Mapping[str, frozenset[str]]:
        """The idempotent tools of each agent kind whose tools this process has built: an
        EXECUTE claim marks such a call started in its own transaction (`Store.claim`), and
        a kind not built yet keeps the separate start until its first THINK builds it."""
        return self._idempotent

    def roles(self, name: str) -> Mapping[str, Role]:
        """The roles children of kind `name` may take: the kind's own (`Staffed`) with those
        of the roles file over them; ConfigurationError if one names a tool the kind lacks."""
        if name not in self._roles:
            kind = self.get(name)
            declared = kind.roles if isinstance(kind, Staffed) else {}
            roles = configured_roles(declared, kind.name, self._roles_file)
            check_roles(roles, self.tools(name).names(), kind=kind.name, file=self._roles_file)
            self._roles[name] = roles
        return self._roles[name]

    def _resolve(self, name: str) -> Kind:
        if name in self._specs:
            return as_kind(load_object(self._specs[name]), self._specs[name])
        for spec in self._imports:
            found = load_object(spec)
            if isinstance(found, Provider):
                continue  # a model provider (tickwork.worker.models.providers), not a job kind
            kind = as_kind(found, spec)
            self._specs[kind.name] = spec
            if kind.name == name:
                return kind
        if ":" in name:
            return as_kind(load_object(name), name)
        known = ", ".join(sorted(self._specs))
        raise UnknownKind(
            f"unknown job kind {name!r}; known: {known}; or give module:attr "
            "(workers must be able to import it: set TICKWORK_IMPORTS)"
        )


def unknown_kind(
    imports: tuple[str, ...] | list[str],
    kind: str,
    store: Store,
    *,
    tenant: str | None,
    submitted_by: str | None = None,
    trusted: bool = True,
) -> str | None:
    """Why `kind` is no job kind, or None if it may be one: one this process has (built in,
    or in `imports`), a `module:attr` that imports here as a job kind (asked by a `trusted`
    caller only: an HTTP client's name is never imported), or the kind of a session of
    `tenant` (None: of any) stored live or archived in `store` (a kind other hosts run, or
    ran once); with `submitted_by` (an own-only token's name), of its own sessions only
    (archived ones from before the index kept submitters say nothing). For a listing
    filtered by a kind that found nothing: a typo then says so, not "no sessions match"."""
    jobs = Jobs(imports)
    try:
        known = jobs.names()
    except TickworkError:
        return None  # a kind of TICKWORK_IMPORTS does not import here: it may be that one
    if kind in known or (trusted and ":" in kind and _imports_as_kind(jobs, kind)):
        return None
    mine = {"kind": kind, "tenant": tenant, "submitted_by": submitted_by, "limit": 1}
    if store.list_sessions(**mine) or store.retention.listing(**mine):
        return None
    return (
        f"unknown job kind {kind!r}: no session has it, and this process has no kind of that "
        f"name; known: {', '.join(known)} (TICKWORK_IMPORTS adds kinds of your own)"
    )


def _imports_as_kind(jobs: Jobs, spec: str) -> bool:
    """Whether `module:attr` imports here as a job kind."""
    try:
        return jobs.missing(spec) is None
    except TickworkError:  # it imports, but is no job kind
        return False


def session_config(kind: Kind, data: Mapping[str, Any], submission: Submission) -> dict[str, Any]:
    """`kind.configure(data, submission)`, where an error the kind raised that is not
    tickwork's (a KeyError on a missing field) becomes InvalidInput naming the kind and the
    error: the input is untrusted, so its refusal goes back to whoever wrote it (the
    submitter, or the model that spawned a child), never a traceback or a failed parent."""
    try:
        config = kind.configure(data, submission)
    except TickworkError:
        raise
    except Exception as exc:
        raise InvalidInput(
            f"job kind {kind.name!r} cannot take this input: its configure raised "
            f"{type(exc).__name__}: {exc}; check the input against what the kind takes "
            "(a kind refuses input with InvalidInput naming what is wrong)"
        ) from exc
    wrong = None
    if not isinstance(config, dict):
        wrong = f"a {type(config).__name__}, not a dict"
    else:
        try:
            json.dumps(config)
        except (TypeError, ValueError) as exc:
            wrong = f"a dict that is not JSON ({exc})"
    if wrong is not None:
        raise ConfigurationError(
            f"job kind {kind.name!r}: its configure returned {wrong}; it returns the "
            "session's config, a dict of JSON values (`user_prompt`, ...), stored with it"
        )
    return config


def idempotent_tools(registry: ToolRegistry) -> frozenset[str]:
    """The names of the tools of `registry` that may run twice, but `spawn_agents`: the
    tick spawns its children itself, with no start of a call (`worker/tick/trees.py`)."""
    return frozenset(t.name for t in registry if t.idempotent and t.name != SPAWN_AGENTS)


def as_kind(obj: Any, spec: str) -> Kind:
    """`obj` if it implements `Kind`; ConfigurationError naming `spec` otherwise."""
    if not isinstance(obj, Kind):
        raise ConfigurationError(
            f"{spec} is a {type(obj).__name__}, not a job kind: build it with "
            "tickwork.worker.jobs.JobKind, or give it the members of tickwork.worker.jobs.Kind "
            "(name, system_prompt, budgets, tools(), configure(data, submission), "
            "completed(head, ending)); tickwork.testing.check_job_kind says what is missing"
        )
    return obj
