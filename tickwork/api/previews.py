"""What a waiting call would change, for the approver: a diff for file writes.

A call whose arguments hold `path` and `content` writes a file: its preview is a unified
diff from the file as it is now in the session's workspace (read through the tools' own
confinement) to the proposed content. A call with a `patch` argument shows the patch.
"""

from __future__ import annotations

import difflib
from typing import Any

from fsm.errors import ToolError
from fsm.values import ToolCall

#: files larger than this are not diffed
MAX_FILE_BYTES = 512_000


def preview(call: ToolCall, config: dict[str, Any]) -> dict[str, Any] | None:
    args = call.arguments or {}
    path, content, patch = args.get("path"), args.get("content"), args.get("patch")
    if isinstance(path, str) and isinstance(content, str):
        before, note = _current(config.get("workspace"), path)
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


def _current(workspace: Any, path: str) -> tuple[str, str]:
    """The file's text now, and a note on where it came from."""
    if not workspace:
        return "", "the session has no workspace; shown against an empty file"
    from worker.tools.sandbox import resolve, workspace_root

    try:
        file = resolve(workspace_root(workspace), path)
    except ToolError as exc:
        return "", f"cannot read the current file: {exc}"
    if not file.exists():
        return "", "new file"
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            return "", f"the current file is over {MAX_FILE_BYTES // 1000} kB; not diffed"
        return file.read_text(encoding="utf-8"), "against the workspace's current file"
    except (OSError, UnicodeDecodeError) as exc:
        return "", f"cannot read the current file: {exc}"
