"""Issue 24: file tools never block on a FIFO, socket or device, and no tool thread
outlives its timeout.

After `mkfifo fifo` in the workspace, `read_file fifo` and `search` blocked a worker
thread for good (opening a FIFO waits for a writer); the tool was abandoned at its
timeout, the thread was not. The limit here is seconds, so on main each call below ends
`timed out` instead of with its own answer, and the thread stays.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tickwork.worker.tools import ToolContext, ToolResult

from tickwork.testing import until

Call = Callable[..., ToolResult]


def _tool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tool-")]


@pytest.fixture
def special(workspace: Path) -> Iterator[Path]:
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("def total():\n    return 1  # TODO\n")
    os.mkfifo(workspace / "fifo")
    os.mkfifo(workspace / "src" / "pipe.py")
    os.symlink("/dev/zero", workspace / "zero")  # a device, outside the workspace anyway
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(workspace / "src" / "sock"))
        yield workspace
    assert not _tool_threads(), "a tool thread outlived its call"


@pytest.fixture
def short(make_ctx: Callable[..., ToolContext]) -> ToolContext:
    return make_ctx(timeout_s=3.0)


@pytest.mark.parametrize("name", ["fifo", "src/pipe.py", "src/sock"])
def test_read_file_refuses_a_special_file_without_waiting(
    special: Path, call: Call, short: ToolContext, name: str
) -> None:
    result = call("read_file", ctx=short, path=name)
    assert result.is_error and "not a regular file" in result.output, result.output
    assert "timed out" not in result.output


def test_search_and_list_skip_special_files(special: Path, call: Call, short: ToolContext) -> None:
    found = call("search", ctx=short, pattern="TODO")
    assert not found.is_error and found.output == "src/app.py:2: return 1  # TODO", found.output
    assert call("search", ctx=short, pattern="x", path="fifo").output.startswith("no matches")
    listed = call("list_files", ctx=short)
    assert listed.output.splitlines() == ["src/app.py"], listed.output


@pytest.mark.parametrize("name", ["fifo", "src/sock"])
def test_write_and_patch_refuse_a_special_file(
    special: Path, call: Call, short: ToolContext, name: str
) -> None:
    written = call("write_file", ctx=short, path=name, content="x\n")
    assert written.is_error and "not a regular file" in written.output, written.output
    patch = f"--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-a\n+b\n"
    patched = call("apply_patch", ctx=short, patch=patch)
    assert patched.is_error and "not a regular file" in patched.output, patched.output
    assert not (special / name).is_file()


def test_a_search_that_times_out_leaves_no_thread(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    for n in range(300):
        folder = workspace / f"d{n:03d}"
        folder.mkdir()
        for m in range(10):
            (folder / f"f{m}.txt").write_text("nothing here\n" * 50)
    result = call("search", ctx=make_ctx(timeout_s=0.001), pattern="never")
    assert result.is_error and "timed out" in result.output, result.output
    until(lambda: not _tool_threads(), timeout=10, what="the timed-out tool's thread to end")
