"""What a waiting call would change, for the approver: a diff for file writes.

A call whose arguments hold `path` and `content` writes a file: its preview is a unified
diff from the file as the store holds it now in the session's files (never a file of the
host) to the proposed content. A call with a `patch` argument shows the patch. An
`adopt_patch` call shows the patch of the child it names, found as the tool finds it
(`adoption.proposed`) among the session's own children only.
"""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Callable, Sequence
from typing import Any

from tickwork.fsm.approvals import edited_by
from tickwork.fsm.errors import PathOutsideWorkspace, TickworkError
from tickwork.fsm.machine import arguments_to_run
from tickwork.fsm.values import Decision, ToolCall
from tickwork.worker.jobs.repair.adoption import ADOPT_PATCH, proposed
from tickwork.worker.tools.confinement import lexical
from tickwork.worker.tools.registry import ChildResult

#: reads one file of the session as stored (None: no such file); None: the session has none
Reader = Callable[[str], bytes | None] | None
#: reads the session's children, as its tools see them (`Reads.children`); None: none
Children = Callable[[], Sequence[ChildResult]] | None

#: files larger than this are not diffed
MAX_FILE_BYTES = 512_000


def preview(
    call: ToolCall,
    read: Reader = None,
    children: Children = None,
    decision: Decision | None = None,
) -> dict[str, Any] | None:
    """What the call would change when it runs: with the arguments of `decision` (its
    latest) where a person edited them, as an in-doubt call that ran edited runs again."""
    found = _preview(call, arguments_to_run(call, decision), read, children)
    if found is not None and decision is not None and decision.arguments is not None:
        found["note"] = f"{edited_by(decision)}, {found['note']}"
    return found


def _preview(
    call: ToolCall, args: dict[str, Any], read: Reader, children: Children
) -> dict[str, Any] | None:
    if call.name == ADOPT_PATCH:
        note, diff = proposed(children() if children is not None else (), args.get("child"))
        return {"type": "diff", "path": None, "note": note, "diff": diff}
    path, content, patch = args.get("path"), args.get("content"), args.get("patch")
    if isinstance(path, str) and isinstance(content, str):
        before, note = _current(read, path)
        lines = difflib.unified_diff(
            before.splitlines(keepends=True),
            content.splitlines(keepends=True),
            fromfile="/dev/null" if note == "new file" else f"a/{path}",
            tofile=f"b/{path}",
        )
        return {"type": "diff", "path": path, "note": note, "diff": "".join(_terminated(lines))}
    if isinstance(patch, str):
        return {"type": "diff", "path": None, "note": "the proposed patch", "diff": patch}
    return None


def _terminated(lines: Any) -> Any:
    for line in lines:
        yield line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"


def _current(read: Reader, path: str) -> tuple[str, str]:
    """The file's text now, and a note on where it came from."""
    if read is None:
        return "", "the session has no stored files; shown against an empty file"
    try:
        lexical(path)
    except PathOutsideWorkspace as exc:
        # the card said "outside the session's files; shown against an empty file", as if
        # approving it wrote /etc/x: the tool refuses it, approved or not
        return "", (
            f"the tool refuses this path when the call runs, approved or not, and writes "
            f"nothing: {exc.message}; shown against an empty file"
        )
    name = posixpath.normpath(path)
    if name == ".":
        return "", "the path is the session's root folder, not a file"
    try:
        found = read(name)
    except TickworkError as exc:  # e.g. a legacy session's folder is not on this host
        return "", f"cannot read the current file: {exc.message}; shown against an empty file"
    except Exception as exc:  # the artifact store is away: the card still shows the call
        return "", f"cannot read the current file: {type(exc).__name__}"
    if found is None:
        return "", "new file"
    if len(found) > MAX_FILE_BYTES:
        return "", f"the current file is over {MAX_FILE_BYTES // 1000} kB; not diffed"
    try:
        return found.decode("utf-8"), "against the session's current file"
    except UnicodeDecodeError:
        return "", "the current file is not UTF-8 text; not diffed"
