"""Roles: what a child session is told, which tools it has, its model and default budgets.

A job kind declares its roles (`Staffed`: a `roles` mapping, e.g. the repair kind's planner,
explorer and reviewer); an operator adds or changes roles in a JSON file named by
TICKWORK_ROLES_FILE (`RoleSettings` in `worker/config/settings.py`)::

    {"repair": {"explorer": {"model": "openai:gpt-4o-mini", "budgets": {"max_steps": 20}},
                "tester": {"system_prompt": "...", "tools": ["run_tests", "read_file"]}}}

A role of the file that the kind also declares changes only the fields it gives; a new one
needs its `system_prompt`. `spawn_agents` names a child's role; `Jobs.roles` resolves them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tickwork.fsm.errors import ConfigurationError, InvalidInput
from tickwork.fsm.values import Budgets, over_bound

__all__ = ["Role", "Staffed", "check_roles", "configured_roles", "role_for"]

#: what a role may say, in a kind's declaration or the roles file
ROLE_KEYS = ("system_prompt", "tools", "model", "budgets", "description")
#: a role's name: what the model writes in `spawn_agents`
MAX_NAME = 40


@dataclass(frozen=True)
class Role:
    """One role children of a kind can be spawned in."""

    name: str
    #: the child's system prompt
    system_prompt: str
    #: the kind's tools it may call, in the order the model sees them; None: all of them
    tools: tuple[str, ...] | None = None
    #: the child's model spec; None: the parent's (or the one the spawn names)
    model: str | None = None
    #: budget defaults for the child, before the parent's remaining budgets cap them
    budgets: Mapping[str, Any] = field(default_factory=dict)
    #: one line for the spawning model: what the role is for
    description: str = ""

    def config(self) -> dict[str, Any]:
        """What a child session's config takes from its role."""
        config: dict[str, Any] = {"role": self.name, "system_prompt": self.system_prompt}
        if self.tools is not None:
            config["tools"] = list(self.tools)
        return config


@runtime_checkable
class Staffed(Protocol):
    """A job kind that declares roles for its children (besides the members of `Kind`)."""

    @property
    def roles(self) -> Mapping[str, Role]: ...


def _fail(where: str, message: str) -> ConfigurationError:
    return ConfigurationError(f"{where}: {message}")


def _role(name: Any, data: Any, *, where: str, known: Role | None) -> Role:
    """A role from its mapping in a declaration or the file, over `known` (the kind's own)."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not name.isidentifier():
        raise _fail(where, f"a role's name must be a word of letters, digits or _, got {name!r}")
    at = f"{where}, role {name!r}"
    if not isinstance(data, Mapping):
        raise _fail(at, f"must be an object with {', '.join(ROLE_KEYS)}, got {data!r}")
    unknown = sorted(set(data) - set(ROLE_KEYS))
    if unknown:
        raise _fail(
            at,
            f"unknown key(s) {', '.join(map(str, unknown))}; a role takes {', '.join(ROLE_KEYS)}",
        )
    changes: dict[str, Any] = {}
    if "system_prompt" in data:
        prompt = data["system_prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise _fail(at, "`system_prompt` must be non-empty text")
        changes["system_prompt"] = prompt
    elif known is None:
        raise _fail(at, "a new role needs its `system_prompt`")
    if "tools" in data:
        tools = data["tools"]
        if tools is not None and (
            not isinstance(tools, list | tuple)
            or not tools
            or not all(isinstance(t, str) and t for t in tools)
        ):
            raise _fail(at, "`tools` must be a non-empty list of tool names (or null for all)")
        changes["tools"] = None if tools is None else tuple(dict.fromkeys(tools))
    if "model" in data:
        model = data["model"]
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise _fail(at, "`model` must be a model spec such as openai:MODEL (or null)")
        changes["model"] = model
    if "budgets" in data:
        budgets = data["budgets"]
        if not isinstance(budgets, Mapping):
            raise _fail(at, f"`budgets` must be an object of budget fields, got {budgets!r}")
        wrong = sorted(set(budgets) - set(Budgets.model_fields))
        if wrong:
            raise _fail(
                at,
                f"unknown budget(s) {', '.join(map(str, wrong))}; the budgets are "
                f"{', '.join(Budgets.model_fields)}",
            )
        try:
            Budgets(**budgets)
        except ValueError as exc:
            raise _fail(at, f"invalid budgets: {exc}") from None
        if (why := over_bound(budgets)) is not None:
            raise _fail(at, f"invalid budgets: {why}")
        changes["budgets"] = dict(budgets)
    if "description" in data:
        if not isinstance(data["description"], str):
            raise _fail(at, "`description` must be text")
        changes["description"] = data["description"]
    if known is not None:
        return replace(known, **changes)
    return Role(name=name, **changes)


def check_roles(
    roles: Mapping[str, Role], tools: Iterable[str], *, kind: str, file: Path | None = None
) -> None:
    """ConfigurationError if a role of `kind` names a tool the kind does not have."""
    have = set(tools)
    where = f"roles file {file} (TICKWORK_ROLES_FILE), " if file is not None else ""
    for role in roles.values():
        missing = [t for t in role.tools or () if t not in have]
        if missing:
            raise ConfigurationError(
                f"{where}job kind {kind!r}, role {role.name!r}: no tool(s) "
                f"{', '.join(missing)}; the kind's tools are {', '.join(sorted(have)) or 'none'}"
            )


def configured_roles(declared: Mapping[str, Role], kind: str, file: Path | None) -> dict[str, Role]:
    """The roles of `kind`: those it declares, with the roles file's for it over them."""
    roles = dict(declared)
    if file is None:
        return roles
    where = f"roles file {file} (TICKWORK_ROLES_FILE)"
    try:
        data = json.loads(Path(file).read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(where, f"cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise _fail(where, f"is not JSON: {exc}") from None
    if not isinstance(data, Mapping) or not all(isinstance(v, Mapping) for v in data.values()):
        raise _fail(where, "must be an object: job kind -> role name -> role")
    for name, spec in (data.get(kind) or {}).items():
        roles[name] = _role(name, spec, where=f"{where}, kind {kind!r}", known=roles.get(name))
    return roles


def declare(kind: str, roles: Mapping[str, Mapping[str, Any]]) -> dict[str, Role]:
    """Roles from plain mappings (a kind's declaration); ConfigurationError naming the bad one."""
    return {
        name: _role(name, spec, where=f"job kind {kind!r}", known=None)
        for name, spec in roles.items()
    }


def role_for(roles: Mapping[str, Role], name: Any, *, kind: str) -> Role:
    """The role `name` (what a model wrote in a spawn); InvalidInput naming the known ones."""
    found = roles.get(name) if isinstance(name, str) else None
    if found is None:
        known = ", ".join(sorted(roles)) or "none (spawn children without a role)"
        if not isinstance(name, str):  # 5 read as the role '5'
            raise InvalidInput(
                f"a role is named by a string, not {type(name).__name__} {str(name)[:40]}; "
                f"the roles of job kind {kind!r} are: {known}"
            )
        raise InvalidInput(
            f"unknown role {name[:40]!r} for job kind {kind!r}; the roles are: {known}"
        )
    return found
