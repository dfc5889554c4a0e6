"""Conformance checks for a job kind: run them against your own kind before you ship it.

    from tickwork.testing import check_job_kind, reply

    def test_my_kind_conforms(tmp_path):
        check_job_kind(
            "mypackage.support:KIND",
            good={"message": "where is order A-1?"},
            bad=[{}, {"message": 42}],
            replies=[reply("It ships tomorrow.")],
            folder=tmp_path,
        )

What is checked, each naming what is wrong and what to do:

- **the interface**: the object implements `tickwork.worker.jobs.Kind` (`name`,
  `system_prompt`, `budgets`, `tools()`, `configure(data, submission)`,
  `completed(head, ending)`), its name is usable and its budgets are budgets;
- **the tools**: `tools()` gives a `ToolRegistry`, and every tool has a description (the
  docstring the model reads) and an object schema for its arguments;
- **the validation**: `configure` turns the good input into a config with a `user_prompt`
  that the database can store (JSON), and refuses every bad input with `InvalidInput`
  and a message (not another exception, and not silently);
- **a session**: one submitted with the good input runs to its end (default: completed)
  through a real worker in this process, on an embedded deployment (SQLite and the
  filesystem broker) in `folder`, its model playing `replies`; the calls that wait for a
  person are approved (or decided by `decide`).

`JobKindNonconformant` (an AssertionError, so any test runner reports it) lists every
problem found; `check_job_kind` returns the checks that passed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Budgets, Status
from tickwork.testing.sessions import (
    Decide,
    SessionDriver,
    approve_all,
    embedded_settings,
    running_worker,
)
from tickwork.worker.config.imports import load_object
from tickwork.worker.jobs import Kind, Submission
from tickwork.worker.tools.registry import ToolRegistry

__all__ = ["KIND_MEMBERS", "Conformance", "JobKindNonconformant", "check_job_kind"]

#: what a job kind must have (`tickwork.worker.jobs.Kind`), and what each is for
KIND_MEMBERS = {
    "name": "the name its sessions are submitted as",
    "system_prompt": "what its sessions' model is told first (text)",
    "budgets": "its budget defaults (a mapping of budget names to values)",
    "tools": "tools() -> ToolRegistry",
    "configure": "configure(data, submission) -> config, raising InvalidInput for bad input",
    "completed": "completed(head, ending) -> result ({} for nothing)",
}


class JobKindNonconformant(AssertionError):
    """A job kind failed its conformance checks; the message lists every problem."""


@dataclass
class Conformance:
    """What `check_job_kind` found: the checks passed and the problems (none if it passed)."""

    spec: str
    passed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        self.problems.append(problem)

    def verdict(self) -> Conformance:
        if self.problems:
            raise JobKindNonconformant(
                f"job kind {self.spec} does not conform ({len(self.problems)} problem"
                f"{'s' if len(self.problems) > 1 else ''}):\n"
                + "\n".join(f"- {p}" for p in self.problems)
            )
        return self


def check_job_kind(
    spec: str,
    *,
    good: Mapping[str, Any],
    bad: Sequence[Any],
    replies: Sequence[Mapping[str, Any]],
    folder: Path,
    expect: Status | str = Status.COMPLETED,
    decide: Decide = approve_all,
    timeout: float = 60.0,
) -> Conformance:
    """Check the job kind `spec` (`module:attr`, importable as workers import it) against
    the interface, with `good` an input it accepts and `bad` inputs it must refuse; a
    session of it runs with a model playing `replies` until `expect`. JobKindNonconformant
    lists every problem; the passed checks otherwise."""
    found = Conformance(spec)
    if not bad:
        raise ValueError("give at least one bad input: the checks see that it is refused")
    try:
        kind = load_object(spec)
    except Exception as exc:
        found.fail(f"cannot import it ({type(exc).__name__}: {exc}); give it as module:attr")
        return found.verdict()
    if not _interface(kind, found):
        return found.verdict()
    assert isinstance(kind, Kind)
    _tools(kind, found)
    submission = Submission(state_dir=Path(folder) / "prepare", trusted=True)
    accepted = _validation(kind, good, bad, submission, found)
    if found.problems or not accepted:
        return found.verdict()
    _session(spec, good, replies, Path(folder), Status(expect), decide, timeout, found)
    return found.verdict()


def _interface(kind: object, found: Conformance) -> bool:
    members = set(dir(kind))
    missing = [name for name in KIND_MEMBERS if name not in members]
    for name in missing:
        found.fail(f"it has no `{name}`: {KIND_MEMBERS[name]} (tickwork.worker.jobs.Kind)")
    if missing:
        return False
    if not isinstance(kind, Kind):
        found.fail("it does not implement tickwork.worker.jobs.Kind")
        return False
    methods = {"tools": kind.tools, "configure": kind.configure, "completed": kind.completed}
    for member, method in methods.items():
        if not callable(method):
            found.fail(f"`{member}` is not callable: {KIND_MEMBERS[member]}")
    name = kind.name
    if not isinstance(name, str) or not name.strip() or name != name.strip() or ":" in name:
        found.fail(
            f"its name {name!r} is not usable: give it a non-empty name without spaces around "
            "it or ':' (sessions are submitted as it)"
        )
    if not isinstance(kind.system_prompt, str):
        found.fail(f"its system_prompt is a {type(kind.system_prompt).__name__}, not text")
    if not isinstance(kind.budgets, Mapping):
        found.fail(f"its budgets are a {type(kind.budgets).__name__}, not a mapping")
    else:
        try:
            Budgets(**dict(kind.budgets))
        except (TypeError, ValueError) as exc:
            found.fail(f"its budgets are not budgets: {exc}")
    if not found.problems:
        found.passed.append("interface")
    return not found.problems


def _tools(kind: Kind, found: Conformance) -> None:
    before = len(found.problems)
    try:
        registry = kind.tools()
    except Exception as exc:
        found.fail(f"tools() raised {type(exc).__name__}: {exc}")
        return
    if not isinstance(registry, ToolRegistry):
        found.fail(
            f"tools() gave a {type(registry).__name__}, not a "
            "tickwork.worker.tools.registry.ToolRegistry"
        )
        return
    for tool in registry:
        if not tool.description.strip():
            found.fail(
                f"tool {tool.name!r} has no description: give its function a docstring (the "
                "model reads it to choose the tool)"
            )
        schema = tool.openai_schema()["function"]["parameters"]
        if not isinstance(schema, Mapping) or schema.get("type") != "object":
            found.fail(f"tool {tool.name!r}: its arguments' schema is not a JSON object schema")
        try:
            json.dumps(tool.openai_schema())
        except (TypeError, ValueError) as exc:
            found.fail(f"tool {tool.name!r}: its schema is not JSON ({exc})")
    if len(found.problems) == before:
        found.passed.append(f"tools ({len(registry)})")


def _validation(
    kind: Kind,
    good: Mapping[str, Any],
    bad: Sequence[Any],
    submission: Submission,
    found: Conformance,
) -> bool:
    before = len(found.problems)
    accepted = False
    try:
        config = kind.configure(dict(good), submission)
    except Exception as exc:
        found.fail(f"configure refused the good input {_shown(good)}: {type(exc).__name__}: {exc}")
    else:
        accepted = True
        if not isinstance(config, dict):
            found.fail(f"configure gave a {type(config).__name__}, not a dict (the config)")
        else:
            prompt = config.get("user_prompt")
            if not isinstance(prompt, str) or not prompt.strip():
                found.fail(
                    "configure's config has no `user_prompt`: the text its session's model "
                    "reads first"
                )
            try:
                json.dumps(config)
            except (TypeError, ValueError) as exc:
                found.fail(f"configure's config is not JSON, so it cannot be stored: {exc}")
    for data in bad:
        try:
            kind.configure(data, submission)
        except InvalidInput as exc:
            if not str(exc).strip():
                found.fail(
                    f"bad input {_shown(data)} was refused without a message: say what is "
                    "wrong and what to give instead"
                )
        except Exception as exc:
            found.fail(
                f"bad input {_shown(data)} raised {type(exc).__name__}: {exc}, not InvalidInput "
                "(tickwork.fsm.errors): check the input and raise InvalidInput naming what is "
                "wrong"
            )
        else:
            found.fail(
                f"bad input {_shown(data)} was accepted: configure must refuse it with "
                "InvalidInput naming what is wrong"
            )
    if len(found.problems) == before:
        found.passed.append(f"validation (1 good input, {len(bad)} bad)")
    return accepted


def _session(
    spec: str,
    good: Mapping[str, Any],
    replies: Sequence[Mapping[str, Any]],
    folder: Path,
    expect: Status,
    decide: Decide,
    timeout: float,
    found: Conformance,
) -> None:
    settings = embedded_settings(folder / "deployment", imports=[spec])
    with running_worker(settings), SessionDriver(settings, timeout=timeout) as driver:
        try:
            session_id = driver.submit(spec, good, replies=replies)
        except Exception as exc:
            found.fail(f"a session of it could not be submitted: {type(exc).__name__}: {exc}")
            return
        try:
            session = driver.run(session_id, until=expect, decide=decide)
        except AssertionError as exc:
            found.fail(f"its session did not end as {expect.value}: {exc}")
            return
    head = session.head
    if head.status is not expect:
        found.fail(f"its session ended {head.status.value}, expected {expect.value}")
        return
    found.passed.append(f"session ({head.status.value} after {len(session.steps)} steps)")


def _shown(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 80 else text[:77] + "..."
