"""Confinement of the repair tools to one workspace directory.

Every path a tool touches goes through `resolve`, which refuses anything that would
land outside the workspace: absolute paths, `..` that climbs out, and symlinks (at any
point of the path) whose target is outside. What is checked is the real path, so a
symlink that stays inside the workspace is fine.

The check and the later open are two system calls; a process that swaps a directory for
a symlink in between could escape. Tools run one at a time per session, so only a
command the session itself started in the background could do that.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path, PurePosixPath

from tickwork.fsm.errors import PathOutsideWorkspace, ToolError


def workspace_root(workspace: Path | str | None) -> Path:
    """The workspace's real path; a `ToolError` if there is none."""
    if workspace is None:
        raise ToolError("this session has no workspace, so file and command tools cannot run")
    root = Path(workspace)
    try:
        root = root.resolve(strict=True)
    except OSError as exc:
        raise ToolError(f"the workspace {str(workspace)!r} is not accessible: {exc}") from exc
    if not root.is_dir():
        raise ToolError(f"the workspace {str(workspace)!r} is not a directory")
    return root


def resolve(workspace: Path, path: str) -> Path:
    """The real path of `path` (relative to `workspace`), or `PathOutsideWorkspace`."""
    lexical(path)
    root = workspace_root(workspace)
    try:
        real = (root / path).resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop before 3.13
        raise PathOutsideWorkspace(f"the path {path!r} cannot be resolved: {exc}") from exc
    if not is_inside(root, real):
        raise PathOutsideWorkspace(
            f"the path {path!r} leads outside the workspace through a symlink; "
            "tools only touch files inside it"
        )
    return real


def lexical(path: str) -> None:
    """`PathOutsideWorkspace` if `path`'s text alone leaves a workspace: empty, a NUL,
    absolute or home-relative, or climbing out with `..` (symlinks need the workspace:
    `resolve`)."""
    if not isinstance(path, str) or not path.strip():
        raise PathOutsideWorkspace(
            f"empty path {path!r}: give a path relative to the workspace, or '.' for its root"
        )
    if "\x00" in path:
        raise PathOutsideWorkspace(f"the path {path!r} contains a NUL byte")
    if os.path.isabs(path) or path.startswith("~"):
        raise PathOutsideWorkspace(
            f"the path {path!r} is absolute (or home-relative); tools only accept paths "
            "relative to the workspace, e.g. 'src/app.py'"
        )
    depth = 0
    for part in PurePosixPath(path).parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            raise PathOutsideWorkspace(
                f"the path {path!r} climbs out of the workspace with '..'; use a path inside it"
            )


def is_inside(root: Path, real: Path) -> bool:
    """Whether the real path `real` is the real workspace path `root` or below it."""
    return real == root or root in real.parents


def relative(workspace: Path, path: Path) -> str:
    """How to show `path` to the model: relative to the workspace, with '/' separators."""
    root = workspace_root(workspace)
    try:
        shown = path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()
    return shown or "."


def write_text(path: Path, text: str) -> None:
    """Replace `path`'s content at once (temp file and rename), keeping its permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode if path.exists() else None
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(temp, mode if mode is not None else 0o644)  # mkstemp makes it 0600
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def kind_of(mode: int) -> str | None:
    """What a file that is not a regular file is ("a FIFO", ...); None for a regular one."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def read_regular(path: Path, shown: str, *, limit: int = -1) -> bytes:
    """The first `limit` bytes (-1: all) of the regular file `path` (a real path, from `resolve`).

    A FIFO, socket or device is refused without being opened for reading (opening a FIFO
    waits for a writer, reading a device may never end); the open is non-blocking and
    does not follow a link, and what was opened is checked again, so a file swapped in
    between is refused too."""
    try:
        wrong = kind_of(os.stat(path).st_mode)
    except FileNotFoundError:
        raise ToolError(f"{shown} does not exist; use list_files to see what does") from None
    if wrong:
        raise ToolError(f"{shown} is {wrong}, not a regular file; it is not read")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ToolError(f"cannot open {shown}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as handle:
        wrong = kind_of(os.fstat(fd).st_mode)
        if wrong:
            raise ToolError(f"{shown} is {wrong}, not a regular file; it is not read")
        return handle.read(limit)
