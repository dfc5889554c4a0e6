"""`adopt_patch`: a parent takes one child's patch into its own files.

A repair child returns its patch against the files it started from (its parent's at the
spawn step, `team.py`). The parent adopts one by the child's id or by its index in the
spawn; the patch is applied to the parent's working copy all or nothing (as `apply_patch`
applies one), after a person approves, like `write_file`. What it changed is recorded as the
file change of the parent's step, like any tool's (docs/DESIGN.md section 10).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from tickwork.fsm.errors import ToolError
from tickwork.worker.tools import patches
from tickwork.worker.tools.confinement import workspace_root
from tickwork.worker.tools.registry import ChildResult, ToolContext, tool

__all__ = ["adopt_patch", "chosen", "proposed"]

#: the name of the tool, as roles list it
ADOPT_PATCH = "adopt_patch"


def _named(child: ChildResult) -> str:
    return f"child {child.index} ({child.id}, {child.role or 'no role'})"


def chosen(children: Sequence[ChildResult], child: str | int) -> ChildResult:
    """The child `child` names: its session id, or its index in the latest spawn (from 0);
    a `ToolError` saying which there are otherwise."""
    if not children:
        raise ToolError(
            "this session has started no children: call spawn_agents first, then adopt the "
            "patch of one of them"
        )
    if isinstance(child, int) or (isinstance(child, str) and child.strip().isdigit()):
        index = int(child)
        latest = children[-1].spawn_call
        found = [c for c in children if c.spawn_call == latest and c.index == index]
        if found:
            return found[0]
        count = sum(1 for c in children if c.spawn_call == latest)
        raise ToolError(
            f"your latest spawn started {count} children, numbered 0 to {count - 1}; there "
            f"is no child {index}. Give its index or its id"
        )
    wanted = str(child).strip()
    for each in children:
        if each.id == wanted:
            return each
    known = ", ".join(f"{c.index}: {c.id}" for c in children[-10:])
    raise ToolError(f"no child {wanted[:80]!r} of this session; its children are {known}")


def _patch_of(child: ChildResult) -> str:
    """The patch the child returned; a `ToolError` saying why there is none to adopt."""
    if child.status != "completed":
        raise ToolError(
            f"{_named(child)} is {child.status}: only a completed child has a patch to adopt"
        )
    result = child.result
    if result.get("patch_error"):
        raise ToolError(f"{_named(child)} has no patch: {result['patch_error']}")
    if result.get("patch_truncated"):
        raise ToolError(f"{_named(child)}'s patch was too long to keep whole; it cannot be adopted")
    patch = result.get("patch")
    if not isinstance(patch, str):
        raise ToolError(f"{_named(child)} returned no patch (its job makes none)")
    if not patch:
        raise ToolError(f"{_named(child)} changed no files: its patch is empty")
    return patch


def proposed(children: Sequence[ChildResult], child: object) -> tuple[str, str]:
    """What `adopt_patch {"child": child}` would take, for the person who decides: a note
    naming the child, its role and outcome, and its patch ("" when it has none, the note
    saying why). The child is found as the call finds it, among `children` only."""
    found = None
    if isinstance(child, str | int) and not isinstance(child, bool):
        with contextlib.suppress(ToolError):
            found = chosen(children, child)
    if found is None:
        return f"(no child {child!r} of this session: the call will say so)", ""
    outcome = found.result.get("outcome")
    try:
        patch = _patch_of(found)
    except ToolError as exc:
        return (f"{exc.message} (outcome {outcome})" if outcome else exc.message), ""
    return f"the patch of {_named(found)}, outcome {outcome or 'none'}", patch


@tool(name=ADOPT_PATCH, requires_approval=True, timeout_s=60.0)
def adopt_patch(ctx: ToolContext, child: str | int) -> str:
    """Take one child's patch into your own files: all of it or nothing.

    A child's patch is made against the files it started from (yours when you spawned it),
    so adopt it before changing those files. Run run_tests afterwards.

    Args:
        child: the child's session id, or its index in your latest spawn_agents call
            (0 for the first child).
    """
    found = chosen(ctx.children() if ctx.children is not None else (), child)
    patch = _patch_of(found)
    if ctx.workspace is None:
        raise ToolError("this session has no files to adopt a patch into")
    try:
        done = patches.apply_patch(workspace_root(ctx.workspace), patch)
    except ToolError as exc:
        raise ToolError(
            f"the patch of {_named(found)} does not apply to your files: {exc} Your files "
            "are unchanged; adopt another child's patch, or make the change yourself"
        ) from None
    outcome = found.result.get("outcome") or "no outcome"
    return f"adopted the patch of {_named(found)}, outcome {outcome}:\n{done}"
