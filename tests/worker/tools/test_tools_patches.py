"""The pure-Python unified diff applier, on real files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from tickwork.fsm.errors import PathOutsideWorkspace, ToolError
from tickwork.worker.files.workspaces import written_paths
from tickwork.worker.tools.patches import (
    apply_hunks,
    apply_patch,
    parse_patch,
    quote_path,
    unquote_path,
)

APP = "".join(f"line {n}\n" for n in range(1, 21))


@pytest.fixture
def repo(workspace: Path) -> Path:
    (workspace / "app.py").write_text(APP)
    (workspace / "lib.py").write_text("a = 1\nb = 2\n")
    return workspace


def test_modify(repo: Path) -> None:
    patch = """\
--- a/app.py
+++ b/app.py
@@ -2,3 +2,3 @@
 line 2
-line 3
+LINE THREE
 line 4
"""
    assert apply_patch(repo, patch) == "patched app.py (1 hunk(s))"
    assert (repo / "app.py").read_text() == APP.replace("line 3\n", "LINE THREE\n")


def test_several_hunks_and_a_shifted_one(repo: Path) -> None:
    patch = """\
--- app.py
+++ app.py
@@ -1,2 +1,3 @@
 line 1
+inserted
 line 2
@@ -10,3 +11,2 @@
 line 14
-line 15
 line 16
"""
    apply_patch(repo, patch)  # the second hunk says line 10 but its text is at line 14
    text = (repo / "app.py").read_text()
    assert text.startswith("line 1\ninserted\nline 2\n")
    assert "line 15\n" not in text and "line 14\nline 16\n" in text


def test_create(repo: Path) -> None:
    patch = """\
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1,2 @@
+def hello():
+    return 1
"""
    assert apply_patch(repo, patch) == "created pkg/new.py (1 hunk(s))"
    assert (repo / "pkg" / "new.py").read_text() == "def hello():\n    return 1\n"


def test_delete_lines(repo: Path) -> None:
    patch = "--- a/lib.py\n+++ b/lib.py\n@@ -1,2 +1 @@\n a = 1\n-b = 2\n"
    apply_patch(repo, patch)
    assert (repo / "lib.py").read_text() == "a = 1\n"


def test_delete_file(repo: Path) -> None:
    patch = "--- a/lib.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a = 1\n-b = 2\n"
    assert apply_patch(repo, patch) == "deleted lib.py"
    assert not (repo / "lib.py").exists()


def test_delete_file_must_remove_every_line(repo: Path) -> None:
    patch = "--- a/lib.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a = 1\n"
    with pytest.raises(ToolError, match="does not remove all"):
        apply_patch(repo, patch)
    assert (repo / "lib.py").read_text() == "a = 1\nb = 2\n"


def test_bad_context_is_an_error_naming_file_and_hunk(repo: Path) -> None:
    patch = "--- a/lib.py\n+++ b/lib.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 3\n+b = 4\n"
    with pytest.raises(ToolError) as caught:
        apply_patch(repo, patch)
    message = caught.value.message
    assert "hunk 1 (@@ -1,2 +1,2 @@) of lib.py does not apply" in message
    assert "|b = 3" in message and "|b = 2" in message
    assert "Nothing was changed" in message


def test_all_or_nothing_across_files(repo: Path) -> None:
    patch = """\
--- a/app.py
+++ b/app.py
@@ -1,1 +1,1 @@
-line 1
+LINE ONE
--- /dev/null
+++ b/created.py
@@ -0,0 +1 @@
+x = 1
--- a/lib.py
+++ b/lib.py
@@ -1,1 +1,1 @@
-not in the file
+whatever
"""
    with pytest.raises(ToolError, match=r"of lib\.py does not apply"):
        apply_patch(repo, patch)
    assert (repo / "app.py").read_text() == APP
    assert not (repo / "created.py").exists()
    assert (repo / "lib.py").read_text() == "a = 1\nb = 2\n"


def test_creating_an_existing_file_is_refused(repo: Path) -> None:
    with pytest.raises(ToolError, match="already exists"):
        apply_patch(repo, "--- /dev/null\n+++ b/lib.py\n@@ -0,0 +1 @@\n+x\n")


def test_patching_a_missing_file_is_refused(repo: Path) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        apply_patch(repo, "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n")


def test_paths_outside_are_refused(repo: Path) -> None:
    with pytest.raises(PathOutsideWorkspace):
        apply_patch(repo, "--- a/../x.py\n+++ b/../x.py\n@@ -1 +1 @@\n-a\n+b\n")


def test_rename(repo: Path) -> None:
    patch = "--- a/lib.py\n+++ b/lib2.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n"
    assert apply_patch(repo, patch) == "renamed lib.py to lib2.py"
    assert not (repo / "lib.py").exists()
    assert (repo / "lib2.py").read_text() == "a = 1\nb = 3\n"


@pytest.mark.parametrize(("old", "new"), [("b/app.py", "a/app.py"), ("old/app.py", "new/app.py")])
def test_other_prefixes_before_the_same_path_are_dropped_as_git_apply_drops_them(
    repo: Path, old: str, new: str
) -> None:
    patch = f"--- {old}\n+++ {new}\n@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE THREE\n line 4\n"
    assert apply_patch(repo, patch) == "patched app.py (1 hunk(s))"
    assert (repo / "app.py").read_text() == APP.replace("line 3\n", "LINE THREE\n")


def test_a_move_between_two_folders_of_the_workspace_keeps_its_folders(repo: Path) -> None:
    """`old/x` to `new/x` where the workspace holds `old/x` (and no `x`) is a move, as it
    was before the folders were dropped: not a patch of a missing `x`."""
    (repo / "old").mkdir()
    (repo / "old" / "mod.py").write_text("a = 1\nb = 2\n")
    patch = "--- old/mod.py\n+++ new/mod.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n"
    assert written_paths("apply_patch", {"patch": patch}) == [
        "mod.py",
        "mod.py",
        "old/mod.py",
        "new/mod.py",
    ]
    assert apply_patch(repo, patch) == "renamed old/mod.py to new/mod.py"
    assert not (repo / "old" / "mod.py").exists()
    assert (repo / "new" / "mod.py").read_text() == "a = 1\nb = 3\n"


def test_two_diffs_of_the_same_file_apply_in_turn(repo: Path) -> None:
    patch = (
        "--- a/lib.py\n+++ b/lib.py\n@@ -1 +1 @@\n-a = 1\n+a = 10\n"
        "--- a/lib.py\n+++ b/lib.py\n@@ -1,2 +1,2 @@\n a = 10\n-b = 2\n+b = 20\n"
    )
    apply_patch(repo, patch)
    assert (repo / "lib.py").read_text() == "a = 10\nb = 20\n"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("just some text", "no file diffs found"),
        ("@@ -1 +1 @@\n-a\n+b\n", "before any"),
        ("--- a/x\n+++ b/x\n", "has no hunks"),
        ("--- a/x\n+++ b/x\n@@ nonsense @@\n", "malformed hunk header"),
        ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+x\n", "both sides"),
    ],
)
def test_malformed_patches(patch: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        parse_patch(patch)


def test_no_newline_at_end_of_file() -> None:
    patch = parse_patch(
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
        "\\ No newline at end of file\n"
    )
    assert apply_hunks("a\nb", patch[0].hunks, path="f") == "a\nc"
    adds_newline = parse_patch(
        "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-b\n\\ No newline at end of file\n+b\n"
    )
    assert apply_hunks("b", adds_newline[0].hunks, path="f") == "b\n"


def test_crlf_files_keep_their_line_endings() -> None:
    patch = parse_patch("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n")
    assert apply_hunks("a\r\nb\r\n", patch[0].hunks, path="f") == "a\r\nc\r\n"


def test_wrong_counts_and_trailing_whitespace_are_tolerated() -> None:
    # models often miscount hunk lines and lose trailing spaces; the context still decides
    patch = parse_patch("--- a/f\n+++ b/f\n@@ -1,7 +1,9 @@\n a\n-b\n+c\n d\n\n")
    assert apply_hunks("a  \nb\nd\ne\n", patch[0].hunks, path="f") == "a  \nc\nd\ne\n"


def test_a_blank_context_line_inside_a_hunk_is_kept() -> None:
    patch = parse_patch("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n")
    assert apply_hunks("a\n\nb\n", patch[0].hunks, path="f") == "a\n\nc\n"


def _git_refuses(workspace: Path, patch: str) -> bool | None:
    """Whether `git apply --check` refuses `patch` in `workspace` (None: git is absent)."""
    if shutil.which("git") is None:
        return None
    done = subprocess.run(
        ["git", "apply", "--check", "-"],
        cwd=workspace,
        input=patch.encode(),
        capture_output=True,
        timeout=30,
    )
    return done.returncode != 0


def _new_file(path: str, text: str = "x") -> str:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{text}\n"


ESCAPING = {
    "a .git config": "--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-[core]\n+[core] x\n",
    "a .git file below": _new_file("sub/.git", "gitdir: /tmp/evil"),
    "a .GIT folder": _new_file(".GIT/hooks/pre-commit"),
    "a .Git folder below": _new_file("sub/.Git/config"),
    "an absolute path": "--- /etc/hostname\n+++ /etc/hostname\n@@ -1 +1 @@\n-a\n+b\n",
    "a climb": _new_file("sub/../../outside.txt"),
    "through a link out": _new_file("out/escaped.txt"),
    "through a link in": _new_file("inside/x.txt"),
}
#: git apply takes these (it writes links); the built-in applier writes regular files only
LINKS = {
    "a symlink made": (
        "diff --git a/ln b/ln\nnew file mode 120000\n--- /dev/null\n+++ b/ln\n"
        "@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
    ),
    "a file made a symlink": (
        "diff --git a/lib.py b/lib.py\nold mode 100644\nnew mode 120000\n--- a/lib.py\n"
        "+++ b/lib.py\n@@ -1,2 +1 @@\n-a = 1\n-b = 2\n+/etc/passwd\n"
        "\\ No newline at end of file\n"
    ),
}


@pytest.mark.parametrize("case", sorted(ESCAPING) + sorted(LINKS))
def test_the_applier_refuses_what_git_apply_refuses(repo: Path, tmp_path: Path, case: str) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (repo / "sub").mkdir()
    (repo / "out").symlink_to(outside)
    (repo / "inside").symlink_to(repo / "sub")
    subprocess.run(["git", "init", "-q", str(repo)], check=False, capture_output=True)
    before = sorted(str(p) for p in repo.rglob("*") if ".git/" not in str(p))
    patch = ESCAPING.get(case) or LINKS[case]

    with pytest.raises((ToolError, PathOutsideWorkspace)):
        apply_patch(repo, patch)

    assert sorted(str(p) for p in repo.rglob("*") if ".git/" not in str(p)) == before
    assert not list(outside.iterdir())
    if case in ESCAPING:
        assert _git_refuses(repo, patch) in (True, None), f"git apply takes {case}"


def test_quoted_names_round_trip_and_apply(repo: Path) -> None:
    names = ["a\n+++ b/evil", "café.txt", 'q"uote', "back\\slash", "tab\there"]
    for name in names:
        quoted = quote_path(f"b/{name}")
        assert "\n" not in quoted and unquote_path(quoted) == f"b/{name}"
        patch = f"--- /dev/null\n+++ {quoted}\n@@ -0,0 +1 @@\n+made\n"
        assert apply_patch(repo, patch).startswith("created")
        assert (repo / name).read_text() == "made\n"
    assert not (repo / "evil").exists()
