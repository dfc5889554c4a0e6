"""Paths are confined to the workspace, symlinks included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tickwork.fsm.errors import PathOutsideWorkspace, ToolError
from tickwork.worker.tools.confinement import relative, resolve, workspace_root, write_text


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "secret.txt").write_text("do not read")
    return secret


def test_plain_relative_paths_resolve_inside(workspace: Path) -> None:
    (workspace / "src").mkdir()
    assert resolve(workspace, "src/app.py") == workspace.resolve() / "src" / "app.py"
    assert resolve(workspace, ".") == workspace.resolve()
    assert resolve(workspace, "src/../README") == workspace.resolve() / "README"


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("..", "climbs out"),
        ("../outside/secret.txt", "climbs out"),
        ("src/../../x", "climbs out"),
        ("/etc/passwd", "absolute"),
        ("~/x", "absolute"),
        ("a\x00b", "NUL"),
        ("", "empty path"),
        ("   ", "empty path"),
    ],
)
def test_refusals(workspace: Path, path: str, why: str) -> None:
    with pytest.raises(PathOutsideWorkspace, match=why):
        resolve(workspace, path)


def test_symlinked_file_pointing_out_is_refused(workspace: Path, outside: Path) -> None:
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(PathOutsideWorkspace, match="symlink"):
        resolve(workspace, "link.txt")


def test_symlinked_directory_pointing_out_is_refused(workspace: Path, outside: Path) -> None:
    (workspace / "data").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathOutsideWorkspace, match="symlink"):
        resolve(workspace, "data/secret.txt")
    with pytest.raises(PathOutsideWorkspace):
        resolve(workspace, "data")
    with pytest.raises(PathOutsideWorkspace):
        resolve(workspace, "data/new-file.txt")


def test_dangling_symlink_pointing_out_is_refused(workspace: Path, outside: Path) -> None:
    (workspace / "later").symlink_to(outside / "not-yet")
    with pytest.raises(PathOutsideWorkspace):
        resolve(workspace, "later")


def test_symlink_staying_inside_is_allowed(workspace: Path) -> None:
    (workspace / "real").mkdir()
    (workspace / "real" / "f.txt").write_text("hi")
    (workspace / "alias").symlink_to(workspace / "real", target_is_directory=True)
    (workspace / "relative-link.txt").symlink_to("real/f.txt")
    assert resolve(workspace, "alias/f.txt") == workspace.resolve() / "real" / "f.txt"
    assert resolve(workspace, "relative-link.txt") == workspace.resolve() / "real" / "f.txt"


def test_symlink_loop_is_refused_not_crashing(workspace: Path) -> None:
    (workspace / "a").symlink_to(workspace / "b")
    (workspace / "b").symlink_to(workspace / "a")
    with pytest.raises(ToolError):
        resolve(workspace, "a")


def test_no_workspace_or_missing_workspace(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="no workspace"):
        workspace_root(None)
    with pytest.raises(ToolError, match="not accessible"):
        workspace_root(tmp_path / "missing")


def test_relative_for_display(workspace: Path) -> None:
    assert relative(workspace, workspace.resolve() / "a" / "b.py") == "a/b.py"
    assert relative(workspace, workspace.resolve()) == "."


def test_write_text_replaces_atomically_and_keeps_mode(workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("old")
    script.chmod(0o755)
    write_text(script, "new\r\nline")
    assert script.read_bytes() == b"new\r\nline"
    assert os.stat(script).st_mode & 0o777 == 0o755
    write_text(workspace / "deep" / "er" / "new.txt", "x")
    assert (workspace / "deep" / "er" / "new.txt").read_text() == "x"
    assert sorted(p.name for p in workspace.iterdir()) == ["deep", "run.sh"]
