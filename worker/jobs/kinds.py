"""The typed interface of a job kind (`Kind`), the context values it is called with
(`Submission`, `Ending`, `SessionFiles`, `Spawning`) and `JobKind`, a kind made of plain
functions. A kind whose sessions start children of their own kind with a config of its
making (the repair kind: on its parent's files) is also a `Parent`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.values import Head, Session
from tickwork.store.artifacts import Artifacts
from tickwork.worker.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from tickwork.worker.files.workspaces import Workspaces
    from tickwork.worker.jobs.roles import Role

__all__ = ["Ending", "JobKind", "Kind", "Parent", "SessionFiles", "Spawning", "Submission"]


@dataclass(frozen=True)
class Submission:
    """What a kind is told about a submission besides its input."""

    #: where the deployment keeps its files
    state_dir: Path
    #: False for a submission from outside (the HTTP API): a kind that reads local paths
    #: from its input must then refuse those outside `workspace_roots`
    trusted: bool = True
    #: the directories an untrusted submission may name
    workspace_roots: tuple[Path, ...] = ()
    #: the artifact store (e.g. for the repair job's source); None where there is none
    artifacts: Artifacts | None = None
    #: the roles a session of the kind may take, as configured (the kind's own with
    #: TICKWORK_ROLES_FILE's over them: `Jobs.roles`); None: the kind's own
    roles: Mapping[str, Role] | None = None


class SessionFiles(Protocol):
    """The session's files during the tick that completes it: its working copy, and what
    the kind's `completed` changes in it (saved with the tick)."""

    def open(self, *, changes: bool) -> Path | None:
        """The working copy's directory (checked out now), marked dirty if `changes`; None
        if the session has no files."""
        ...

    def environment(self, head: Head | None = None) -> Path | None:
        """This host's copy of the session's environment (for /env), if it has one."""
        ...

    def record(self, *, step: int, call_id: str, paths: list[str] | None = None) -> None:
        """Record what changed in the working copy, to save with the tick."""
        ...

    @property
    def workspaces(self) -> Workspaces:
        """The stored files behind every working copy (a session's base, manifest, blobs)."""
        ...


@dataclass(frozen=True)
class Ending:
    """What a kind is given when one of its sessions completes."""

    #: the session's files in this tick
    files: SessionFiles
    #: the session as stored before this tick (its steps and their observations), read
    #: when called: a kind that looks back at what its tools gave (the repair's first test
    #: run); None where there is no store to read
    history: Callable[[], Session] | None = None

    @property
    def workspaces(self) -> Workspaces:
        return self.files.workspaces


@dataclass(frozen=True)
class Spawning:
    """What a kind is told when one of its sessions starts a child (`spawn_agents`)."""

    #: the spawning session, as claimed by the tick that runs the spawn
    parent: Head
    #: the child's role (`tickwork.worker.jobs.roles`)
    role: Role
    #: the stored files behind every working copy (the parent's manifest, blobs)
    workspaces: Workspaces


@runtime_checkable
class Parent(Protocol):
    """A job kind that makes its children's config itself (besides the members of `Kind`)."""

    def child(self, data: Mapping[str, Any], spawning: Spawning) -> dict[str, Any]:
        """The child's config (at least `user_prompt`) from the input the spawn gives it;
        raises InvalidInput naming what is wrong (the parent's model is told)."""
        ...


@runtime_checkable
class Kind(Protocol):
    """A job kind as the engine sees it: every member is called with a fixed signature."""

    @property
    def name(self) -> str:
        """The name sessions of the kind are submitted as."""
        ...

    @property
    def system_prompt(self) -> str: ...

    @property
    def budgets(self) -> Mapping[str, Any]:
        """Budget defaults for the kind, over the settings' defaults."""
        ...

    def tools(self) -> ToolRegistry:
        """The kind's tools; called once per process."""
        ...

    def configure(self, data: Mapping[str, Any], submission: Submission) -> dict[str, Any]:
        """The session's config (at least `user_prompt`) from the submitted input; raises
        InvalidInput naming what is wrong and what to give instead."""
        ...

    def completed(self, head: Head, ending: Ending) -> dict[str, Any]:
        """What the session produced (e.g. the repair's patch), added to its result when it
        completes; `{}` for nothing. An `outcome` key is told in the `completed` event."""
        ...


@dataclass(frozen=True)
class JobKind:
    """A `Kind` made of plain functions: `prepare(input) -> config` and, optionally,
    `finish(head) -> result`. A kind that needs the submission's context (`trusted`,
    `workspace_roots`, `artifacts`) or the session's files implements `configure` or
    `completed` itself (a subclass, or any class with `Kind`'s members)."""

    name: str
    system_prompt: str
    #: builds the kind's tools; called once per process
    tools: Callable[[], ToolRegistry]
    #: the submitted input -> the session's config (at least `user_prompt`); raises
    #: InvalidInput naming what is wrong
    prepare: Callable[[Mapping[str, Any]], dict[str, Any]]
    #: budget defaults for this kind, over the settings' defaults
    budgets: Mapping[str, Any] = field(default_factory=dict)
    #: what the job produced, computed when the session completes: `finish(head) -> result`
    finish: Callable[[Head], dict[str, Any]] | None = None
    #: the roles its sessions' children may take (`tickwork.worker.jobs.roles`)
    roles: Mapping[str, Role] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # before the typed interface `prepare` could ask for the submission by keyword; it
        # is now called with the input only, so such a kind would silently lose `trusted`
        # (and accept local paths from outside): refuse it when it is defined
        asked = _submission_keywords(self.prepare)
        if asked:
            raise ConfigurationError(
                f"job kind {self.name!r}: its prepare takes {', '.join(asked)}, but a "
                "JobKind's prepare is given the submitted input only. Implement "
                "configure(data, submission) instead (tickwork.worker.jobs.Kind; "
                "submission.trusted, .workspace_roots, .state_dir, .artifacts); see "
                "docs/JOB_KINDS.md (`tickwork docs job-kinds`)"
            )

    def configure(self, data: Mapping[str, Any], submission: Submission) -> dict[str, Any]:
        return self.prepare(data)

    def completed(self, head: Head, ending: Ending) -> dict[str, Any]:
        return {} if self.finish is None else self.finish(head)


#: what a prepare could ask for by keyword before `Submission` carried it
_LEGACY_KEYWORDS = ("state_dir", "artifacts", "trusted", "workspace_roots")


def _submission_keywords(prepare: Callable[..., Any]) -> list[str]:
    """The keywords of the submission `prepare` names (an old-style prepare's)."""
    try:
        names = inspect.signature(prepare).parameters
    except (TypeError, ValueError):
        return []
    return [name for name in _LEGACY_KEYWORDS if name in names]
