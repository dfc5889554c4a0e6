"""The repair job's roles (planner, explorer, reviewer) and how its children start.

A repair child starts from its parent's files as they are at the spawn step (a manifest of
them becomes the child's base: no blob is copied, `Workspaces.start_from`), inherits the
parent's test command, source, network rules and environment, and is told its task by its
role's prompt and its input. When it completes, the kind's `finish` makes its patch against
that base and runs the tests: its result carries `patch` and `outcome`, which the join
brings back to the parent, and `adopt_patch` (`adoption.py`) takes into the parent's files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Head
from tickwork.worker.jobs.roles import Role, declare

__all__ = ["CHILD_INPUT_KEYS", "INHERITED", "ROLES", "child_config"]

#: what a repair child's input takes (what the spawning model writes)
CHILD_INPUT_KEYS = ("goal", "notes")
#: the most characters of a child's goal and notes
MAX_INPUT_CHARS = 100_000
#: the parent's config a child keeps: how its tests run, where its files came from, its
#: network rules and environment (built once per key, shared)
INHERITED = (
    *("source", "test_command", "test_timeout_s", "network", "egress_allow"),
    *("environment", "env", "demo_unconfined"),
)

_WORKSPACE = """\
You work inside one workspace directory through tools; every path you give is relative to \
the workspace root. Your workspace is a private copy of your parent's files as they were \
when you were started: what you change there is not seen by anyone until your parent adopts \
your patch. Commands run in a sandbox with no network unless the job allows it."""

PLANNER_PROMPT = f"""\
You are the planner of a repair team. You split a failing project's repair into attempts, \
start explorers to try them in parallel, and take the best one.

{_WORKSPACE}

Tools: list_files, read_file, search and run_tests look at the project; spawn_agents starts \
children (each with a role and an input such as {{"goal": "...", "notes": "..."}}) and waits \
until they have ended (with "join": "each", only until the first has: wait_children then \
gives the next ones' results); its result lists each child's outcome, answer and patch \
(`result.patch`, `result.outcome`: repaired when its tests passed); adopt_patch takes one \
child's patch (by its id or its index in the spawn) into your own files, after a person \
approves it.

How to work:
1. Reproduce the failure with run_tests and read enough code to name a few likely causes.
2. Spawn explorers (role "explorer"), each with a different hypothesis or strategy in its \
notes.
3. Read their outcomes. Adopt the patch of one whose outcome is "repaired"; prefer the \
smallest. If none repaired it, try again with what you learned, or say so.
4. Run the tests on your own files after adopting, then answer without a tool call: what was \
wrong, which child's patch you took and why, and the last test result."""

EXPLORER_PROMPT = f"""\
You are an explorer of a repair team: you try one way of making a project's tests pass, \
the way your task's notes describe.

{_WORKSPACE}

Tools: list_files, read_file, search (look), write_file and apply_patch (change files), \
run_command and run_tests (run in the sandbox).

How to work:
1. Reproduce the failure with run_tests.
2. Follow your strategy: find the cause it points at and make the smallest change that \
fixes it. Do not weaken, skip or delete tests.
3. Run the tests again. When you are done, answer without a tool call: what you changed and \
the last test result. Your patch and the final test run are returned to your parent with \
your answer; a patch whose tests fail is still worth reporting, say what you learned."""

REVIEWER_PROMPT = f"""\
You are the reviewer of a repair team: you read a patch before it is returned and say \
whether it should be.

{_WORKSPACE}

Tools: list_files, read_file and search (look), run_tests (run the project's tests). You \
change no files.

Your task's notes hold the patch to review (your workspace has it applied when your parent \
adopted it before starting you). Check that it fixes the cause rather than the symptom, \
that it does not weaken or skip tests, and that it is small and clear. Answer without a tool \
call, starting with APPROVE or CHANGES, then your reasons."""

ROLES: dict[str, Role] = declare(
    "repair",
    {
        "planner": {
            "system_prompt": PLANNER_PROMPT,
            "tools": [
                "list_files",
                "read_file",
                "search",
                "run_tests",
                "spawn_agents",
                "wait_children",
                "adopt_patch",
            ],
            "description": "splits the repair into attempts, spawns explorers, adopts a patch",
        },
        "explorer": {
            "system_prompt": EXPLORER_PROMPT,
            "tools": [
                "list_files",
                "read_file",
                "search",
                "write_file",
                "apply_patch",
                "run_command",
                "run_tests",
            ],
            "budgets": {"max_steps": 30},
            "description": "tries one fix on a private copy of the files and runs the tests",
        },
        "reviewer": {
            "system_prompt": REVIEWER_PROMPT,
            "tools": ["list_files", "read_file", "search", "run_tests"],
            "budgets": {"max_steps": 15},
            "description": "reads a patch before it is returned: APPROVE or CHANGES",
        },
    },
)


def _fail(message: str) -> InvalidInput:
    return InvalidInput(f"repair child input: {message}")


def _text(data: Mapping[str, Any], key: str, *, required: bool) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise _fail(f"`{key}` must be {'non-empty ' if required else ''}text, got {value!r}")
    if len(value) > MAX_INPUT_CHARS:
        raise _fail(f"`{key}` holds {len(value)} characters; at most {MAX_INPUT_CHARS}")
    return value.strip()


def child_prompt(role: Role, goal: str, notes: str, test_command: str) -> str:
    """The task as a repair child first reads it."""
    parts = [
        f"Your role: {role.name}. Your task:\n\n{goal}",
        f"Test command: {test_command} (run_tests runs it)" if test_command else "",
        f"Notes from your parent:\n\n{notes}" if notes else "",
        "When you are done, answer without tool calls.",
    ]
    return "\n\n".join(p for p in parts if p)


def child_config(
    parent: Head, role: Role, data: Mapping[str, Any], files: Mapping[str, str] | None
) -> dict[str, Any]:
    """A repair child's config: its role's prompt and tools, the parent's test command,
    source and environment, and `files` (from `Workspaces.start_from`: the parent's files
    at the spawn step) as its base. InvalidInput names what is wrong with `data`."""
    if not isinstance(data, Mapping):
        raise _fail(f"must be an object with {', '.join(CHILD_INPUT_KEYS)}, got {data!r}")
    unknown = sorted(set(data) - set(CHILD_INPUT_KEYS))
    if unknown:
        raise _fail(
            f"unknown key(s) {', '.join(map(str, unknown))}; it takes "
            f"{', '.join(CHILD_INPUT_KEYS)} (goal: the task, notes: how to go about it)"
        )
    goal, notes = _text(data, "goal", required=True), _text(data, "notes", required=False)
    config = {k: parent.config[k] for k in INHERITED if k in parent.config}
    config.update(role.config())
    command = str(parent.config.get("test_command") or "")
    config["goal"] = goal
    config["user_prompt"] = child_prompt(role, goal, notes, command)
    if files is not None:
        config["files"] = dict(files)
    return config
