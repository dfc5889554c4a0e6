"""The repair job kind: its input checks, the source stored at submit, the patch from the
stored files and the final test run; the demo's example and script."""

from __future__ import annotations

import errno
import functools
import json
import re
import shlex
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tickwork.fsm.errors import InvalidInput, PatchDoesNotApply
from tickwork.fsm.outcomes import Outcome, repair_outcome
from tickwork.fsm.values import Head, Status
from tickwork.store.artifacts import DirectoryArtifacts
from tickwork.worker.config.secrets import Masker
from tickwork.worker.files import sources, versions
from tickwork.worker.files.environments import NO_NETWORK
from tickwork.worker.jobs import Jobs, Kind
from tickwork.worker.jobs.kinds import Ending
from tickwork.worker.jobs.repair import job as repair
from tickwork.worker.jobs.repair import toolkit
from tickwork.worker.jobs.repair.job import REPAIR, diff_manifests, prepare, run_final_tests
from tickwork.worker.models.scripted import load_script
from tickwork.worker.observers.webhooks import finished_card
from tickwork.worker.sandbox.shell import run_shell
from tickwork.worker.tools.patches import apply_patch

from tickwork import render, testing, views
from tickwork.cli_demo import DEMO_EXAMPLE, DEMO_SCRIPT, demo_input, prepare_demo_workspace
from tickwork.patches import apply_patch as apply_session_patch

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PASS = "python3 -c 'import sys; sys.exit(0)'"
FAIL = "python3 -c 'import sys; print(\"2 failed\"); sys.exit(3)'"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (root / "pkg" / "gone.py").write_text("OLD = True\n")
    (root / "README.md").write_text("no newline at the end")
    (root / "logo.png").write_bytes(b"\x89PNG\x00\x01\x02")
    for skipped in (".git", "__pycache__", ".pytest_cache"):
        (root / skipped).mkdir()
        (root / skipped / "x.txt").write_text("ignored")
    return root


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def artifacts(tmp_path: Path) -> DirectoryArtifacts:
    return DirectoryArtifacts(tmp_path / "artifacts")


def head_for(config: dict[str, Any]) -> Head:
    return Head(
        id="sess-1", kind="repair", created_at=T0, updated_at=T0, model="scripted", config=config
    )


def start(
    project: Path, state: Path, artifacts: DirectoryArtifacts, command: str = PASS, **extra: Any
) -> dict[str, Any]:
    data = {"workspace": str(project), "test_command": command, **extra}
    return prepare(data, state_dir=state, artifacts=artifacts)


def manifest(artifacts: DirectoryArtifacts, root: Path) -> dict[str, str]:
    return sources.read_manifest(artifacts, sources.pack(root, artifacts)[0])


def diff(artifacts: DirectoryArtifacts, before: Path, after: Path) -> tuple[str, list[str]]:
    """The patch from the files of `before` to those of `after`, through the store."""
    return diff_manifests(manifest(artifacts, before), manifest(artifacts, after), artifacts.get)


def test_the_builtin_kind_is_this_one() -> None:
    kind = Jobs().get("repair")
    assert kind is REPAIR and isinstance(kind, Kind)
    assert set(kind.tools().names()) >= {"run_tests", "read_file", "write_file", "apply_patch"}
    assert "approv" in kind.system_prompt and "without any tool call" in kind.system_prompt


#: stands for the project's path in the cases below
WS = "<project>"


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"test_command": PASS}, "a source is required"),
        ({"workspace": "", "test_command": PASS}, "a source is required"),
        ({"workspace": 3, "test_command": PASS}, "a source is required"),
        ({"workspace": "/no/such/dir", "test_command": PASS}, "not an existing directory"),
        ({"workspace": WS, "repo": WS, "test_command": PASS}, "not both"),
        ({"workspace": WS, "ref": "main", "test_command": PASS}, "`ref` goes with `repo`"),
        ({"repo": "", "test_command": PASS}, "`repo` must be a git URL"),
        ({"repo": "/no/such/repo", "test_command": PASS}, "does not exist"),
        ({"repo": "--upload-pack=x", "test_command": PASS}, "not a git URL"),
        ({"repo": WS, "ref": "-x", "test_command": PASS}, "not a branch, tag or commit"),
        ({"workspace": WS}, "`test_command` is required"),
        ({"workspace": WS, "test_command": "  "}, "`test_command` is required"),
        ({"workspace": WS, "test_command": ["pytest", 3]}, "`test_command` is required"),
        ({"workspace": WS, "test_command": PASS, "goal": 7}, "`goal` must be text"),
        ({"workspace": WS, "test_command": PASS, "test_timeout_s": 0}, "test_timeout_s"),
        ({"workspace": WS, "test_command": PASS, "test_timeout_s": True}, "test_timeout_s"),
        (
            {"workspace": WS, "test_command": PASS, "test_timeout_s": 1900},
            "at most 1500 seconds .* delivery timeout",
        ),
        (
            {"workspace": WS, "test_command": PASS, "test_cmd": "x"},
            r"give `test_command` or `test_cmd` \(the same thing\), not both",
        ),
        ({"workspace": WS, "test_command": PASS, "network": "yes"}, '`network` must be "setup"'),
        ({"workspace": WS, "test_command": PASS, "egress_allow": "x.org"}, "must be a list"),
        ({"workspace": WS, "test_command": PASS, "egress_allow": ["a b"]}, "not a host name"),
        (
            {"workspace": WS, "test_command": PASS, "egress_allow": ["evil.test"]},
            r"may only narrow this server's allow-list \(empty: TICKWORK_EGRESS_ALLOW is not "
            r"set\), and evil.test is not",
        ),
    ],
)
def test_invalid_input_says_what_to_do(
    project: Path, state: Path, artifacts: DirectoryArtifacts, data: dict[str, Any], match: str
) -> None:
    data = {k: str(project) if v == WS else v for k, v in data.items()}
    with pytest.raises(InvalidInput, match=match):
        prepare(data, state_dir=state, artifacts=artifacts)


def test_a_workspace_must_be_a_directory(
    project: Path, state: Path, artifacts: DirectoryArtifacts
) -> None:
    with pytest.raises(InvalidInput, match="is not an existing directory; give the project's"):
        start(project / "README.md", state, artifacts)


def test_a_workspace_that_is_the_state_dir_is_refused(
    project: Path, artifacts: DirectoryArtifacts
) -> None:
    with pytest.raises(InvalidInput, match="is tickwork's state dir"):
        start(project, project, artifacts)


@pytest.mark.parametrize("inside", ["workspaces", "workspaces/objects", "broker"])
def test_a_workspace_inside_the_state_dir_is_refused(
    tmp_path: Path, artifacts: DirectoryArtifacts, inside: str
) -> None:
    # the roots hold the state dir: its working copies of every session, its blobs and its
    # broker's messages are still never a submitter's source
    state = tmp_path / "state"
    folder = state / inside
    folder.mkdir(parents=True)
    (folder / "other_tenant.py").write_text("secret = 1\n")
    data = {"workspace": str(folder), "test_command": PASS}
    with pytest.raises(InvalidInput, match="is inside tickwork's state dir"):
        prepare(
            data, state_dir=state, artifacts=artifacts, trusted=False, workspace_roots=(tmp_path,)
        )


@pytest.mark.parametrize(("limit", "value"), [("MAX_SOURCE_BYTES", 20), ("MAX_SOURCE_FILES", 1)])
def test_a_workspace_too_large_is_refused(
    project: Path,
    state: Path,
    artifacts: DirectoryArtifacts,
    monkeypatch: pytest.MonkeyPatch,
    limit: str,
    value: int,
) -> None:
    monkeypatch.setattr(sources, limit, value)
    with pytest.raises(InvalidInput, match=r"holds more than .* at the project itself"):
        start(project, state, artifacts)


def test_prepare_stores_the_source_and_never_changes_the_workspace(
    project: Path, state: Path, artifacts: DirectoryArtifacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    monkeypatch.chdir(project.parent)
    config = start(Path("project"), state, artifacts, " python -m pytest -q ", goal="fix f")
    assert config["source"] == {"kind": "workspace", "path": str(project.resolve()), "files": 4}
    assert "workspace" not in config and config["test_command"] == "python -m pytest -q"
    for text in ("fix f", str(project.resolve()), "python -m pytest -q", "run_tests", "summary"):
        assert text in config["user_prompt"]
    stored = sources.read_manifest(artifacts, config["files"]["base"])
    # no caches, no .git; binary files are part of the source too
    assert sorted(stored) == ["README.md", "logo.png", "pkg/gone.py", "pkg/mod.py"]
    key = stored["pkg/mod.py"].split()[1]
    assert artifacts.get([key])[key] == b"def f():\n    return 1\n"
    assert {p: p.read_bytes() for p in project.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    ("given", "mode"),
    [
        ({}, "setup"),
        ({"network": "setup"}, "setup"),
        ({"network": "all"}, "all"),
        ({"network": "none"}, "none"),
        ({"network": True}, "all"),  # the booleans of before the modes
        ({"network": False}, "none"),
    ],
)
def test_the_network_mode_is_setup_unless_the_input_says(
    project: Path, state: Path, artifacts: DirectoryArtifacts, given: dict[str, Any], mode: str
) -> None:
    assert start(project, state, artifacts, **given)["network"] == mode


def test_a_submitters_allow_list_narrows_the_operators_never_widens_it(
    project: Path, state: Path, artifacts: DirectoryArtifacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", "pypi.org,*.pythonhosted.org,10.1.2.3:3141")
    narrowed = ["files.pythonhosted.org", "PyPI.org:443", "10.1.2.3:3141"]
    config = start(project, state, artifacts, egress_allow=narrowed)
    assert config["egress_allow"] == ["files.pythonhosted.org", "pypi.org:443", "10.1.2.3:3141"]
    for wider in (["evil.test"], ["pythonhosted.org"], ["10.1.2.3"], ["*"], ["pypi.org", "x.io"]):
        with pytest.raises(InvalidInput, match=r"may only narrow .* is not within it"):
            start(project, state, artifacts, egress_allow=wider)


def test_a_git_source_is_resolved_to_a_commit_at_submit(
    project: Path, state: Path, artifacts: DirectoryArtifacts
) -> None:
    git = functools.partial(testing.git, project)
    shutil.rmtree(project / ".git")
    git("init", "-q", "-b", "main")
    git("add", "pkg", "README.md")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    (project / "pkg" / "mod.py").write_text("changed later\n")
    git("commit", "-qam", "two")
    git("tag", "v1", first)

    for ref in ("v1", first[:10], f"file://{project}"):
        data = {"repo": str(project), "ref": ref, "test_command": PASS}
        if ref.startswith("file://"):
            data = {"repo": ref, "ref": "v1", "test_command": PASS}
        config = prepare(data, state_dir=state, artifacts=artifacts)
        assert config["source"]["commit"] == first, ref
        stored = sources.read_manifest(artifacts, config["files"]["base"])
        assert sorted(stored) == ["README.md", "pkg/gone.py", "pkg/mod.py"]
        key = stored["pkg/mod.py"].split()[1]
        assert artifacts.get([key])[key] == b"def f():\n    return 1\n"
    main = prepare(
        {"repo": str(project), "ref": "main", "test_command": PASS},
        state_dir=state,
        artifacts=artifacts,
    )
    assert main["source"]["commit"] == git("rev-parse", "HEAD") != first
    with pytest.raises(InvalidInput, match="has no branch, tag or commit 'nope'"):
        prepare(
            {"repo": str(project), "ref": "nope", "test_command": PASS},
            state_dir=state,
            artifacts=artifacts,
        )


def test_an_untrusted_repository_is_cloned_again_by_the_same_rules(
    project: Path, state: Path, artifacts: DirectoryArtifacts
) -> None:
    # `tickwork patch --bundle` clones the source again: an https URL an API client gave
    # was cloned with the host's git defaults, to wherever its name resolved by then (a
    # name checked public at submit may point at the metadata service now) and following
    # redirects; it is checked and pinned again, as at submit
    git = functools.partial(testing.git, project)
    shutil.rmtree(project / ".git")
    git("init", "-q", "-b", "main")
    git("add", "pkg", "README.md")
    git("commit", "-qm", "one")
    data = {"repo": str(project), "test_command": PASS}
    untrusted = prepare(
        data,
        state_dir=state,
        artifacts=artifacts,
        trusted=False,
        workspace_roots=(project.parent,),
    )
    assert untrusted["source"]["untrusted"] is True
    assert "untrusted" not in prepare(data, state_dir=state, artifacts=artifacts)["source"]
    with sources.clone_at(str(project), untrusted["source"]["commit"], untrusted=True) as clone:
        assert (clone / "README.md").is_file()
    refused = pytest.raises(InvalidInput, match=r"resolves to 127\.0\.0\.1, which is not a public")
    with refused, sources.clone_at("https://127.0.0.1/x.git", "0" * 40, untrusted=True):
        pass


def test_a_project_directory_given_as_a_repository_is_told_to_use_workspace(
    tmp_path: Path, state: Path, artifacts: DirectoryArtifacts
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "calc.py").write_text("X = 1\n")
    data = {"repo": str(plain), "test_command": PASS}
    with pytest.raises(
        InvalidInput, match="no git repository: give a project directory as `workspace`"
    ):
        prepare(data, state_dir=state, artifacts=artifacts)


def test_an_untrusted_submission_names_local_paths_under_the_roots_only(
    project: Path, state: Path, artifacts: DirectoryArtifacts
) -> None:
    data = {"workspace": str(project), "test_command": PASS}
    with pytest.raises(InvalidInput, match="does not accept local paths"):
        prepare(data, state_dir=state, artifacts=artifacts, trusted=False)
    with pytest.raises(InvalidInput, match="outside the directories this server accepts"):
        prepare(data, state_dir=state, artifacts=artifacts, trusted=False, workspace_roots=[state])
    with pytest.raises(InvalidInput, match="https:// URLs only"):
        prepare(
            {"repo": "git://example.com/x", "test_command": PASS},
            state_dir=state,
            artifacts=artifacts,
            trusted=False,
        )
    # git's scp-like address is no local path under the roots: the message says what to write
    with pytest.raises(InvalidInput, match="https:// URLs only; write it as https://HOST/PATH"):
        prepare(
            {"repo": "git@github.com:a/b.git", "test_command": PASS},
            state_dir=state,
            artifacts=artifacts,
            trusted=False,
            workspace_roots=[project.parent],
        )
    config = prepare(
        data, state_dir=state, artifacts=artifacts, trusted=False, workspace_roots=[project.parent]
    )
    assert config["source"]["kind"] == "workspace"


def test_a_test_command_may_be_a_list_of_words(
    project: Path, state: Path, artifacts: DirectoryArtifacts
) -> None:
    config = start(project, state, artifacts, ["python", "-m", "pytest", "-k", "a b"])  # type: ignore[arg-type]
    assert config["test_command"] == "python -m pytest -k 'a b'"


def test_a_state_dir_inside_the_workspace_is_not_packed(
    project: Path, artifacts: DirectoryArtifacts
) -> None:
    inner = project / "var" / "tw"
    (inner / "broker").mkdir(parents=True)
    (inner / "broker" / "msg.json").write_text("{}")
    (project / "var" / "keep.txt").write_text("kept")
    config = start(project, inner, artifacts)
    stored = sources.read_manifest(artifacts, config["files"]["base"])
    assert "var/keep.txt" in stored and not any(p.startswith("var/tw") for p in stored)


def test_an_unchanged_tree_has_an_empty_patch(project: Path, artifacts: DirectoryArtifacts) -> None:
    before = manifest(artifacts, project)
    (project / "__pycache__" / "mod.cpython.pyc").write_bytes(b"\x00compiled")
    assert diff_manifests(before, manifest(artifacts, project), artifacts.get) == ("", [])


def test_the_patch_shows_modified_new_and_deleted_files(
    project: Path, artifacts: DirectoryArtifacts
) -> None:
    original = project.parent / "original"
    shutil.copytree(project, original)
    (project / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    (project / "pkg" / "gone.py").unlink()
    (project / "pkg" / "new.py").write_text("NEW = 1\n")
    (project / "README.md").write_text("no newline at the end, still\n")

    patch, changed = diff(artifacts, original, project)

    assert changed == ["README.md", "pkg/gone.py", "pkg/mod.py", "pkg/new.py"]
    assert "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n" in patch
    assert "-    return 1\n+    return 2\n" in patch
    assert "deleted file mode 100644\n--- a/pkg/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n" in patch
    assert "new file mode 100644\n--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+NEW = 1\n" in (
        patch
    )
    assert "-no newline at the end\n\\ No newline at end of file\n" in patch
    # the patch turns the starting tree into the final one
    apply_patch(original, patch)
    for rel in ("pkg/mod.py", "pkg/new.py", "README.md"):
        assert (original / rel).read_bytes() == (project / rel).read_bytes()
    assert not (original / "pkg" / "gone.py").exists()


def test_an_executable_bit_shows_as_a_mode_change(
    project: Path, artifacts: DirectoryArtifacts
) -> None:
    original = project.parent / "original"
    shutil.copytree(project, original)
    (project / "pkg" / "mod.py").chmod(0o755)
    patch, changed = diff(artifacts, original, project)
    assert changed == ["pkg/mod.py"]
    assert patch == "diff --git a/pkg/mod.py b/pkg/mod.py\nold mode 100644\nnew mode 100755\n"


def test_crlf_line_endings_survive_the_patch(project: Path, artifacts: DirectoryArtifacts) -> None:
    (project / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    original = project.parent / "original"
    shutil.copytree(project, original)
    (project / "win.txt").write_bytes(b"one\r\n2\r\n")
    patch, changed = diff(artifacts, original, project)
    assert changed == ["win.txt"] and "-two\r\n+2\r\n" in patch
    apply_patch(original, patch)
    assert (original / "win.txt").read_bytes() == b"one\r\n2\r\n"


def test_lines_split_at_newlines_only(project: Path, artifacts: DirectoryArtifacts) -> None:
    (project / "odd.py").write_text("a = '\x0c'\nb = '\u2028'\nc = 1\n")
    before = manifest(artifacts, project)
    (project / "odd.py").write_text("a = '\x0c'\nb = '\u2028'\nc = 2")
    patch, _ = diff_manifests(before, manifest(artifacts, project), artifacts.get)
    assert patch.endswith(
        "@@ -1,3 +1,3 @@\n a = '\x0c'\n b = '\u2028'\n-c = 1\n+c = 2\n"
        "\\ No newline at end of file\n"
    )


def test_a_file_the_toolkit_reads_as_text_is_diffed_as_text(
    project: Path, artifacts: DirectoryArtifacts
) -> None:
    # a change the model made with read_file and edit_file must reach the patch
    text = "".join(f"line {i}\n" for i in range(200_000))
    assert 1_000_000 < len(text) <= toolkit.MAX_FILE_BYTES
    (project / "big.txt").write_text(text)
    before = manifest(artifacts, project)
    (project / "big.txt").write_text(text.replace("line 100000\n", "changed\n"))
    patch, changed = diff_manifests(before, manifest(artifacts, project), artifacts.get)
    assert changed == ["big.txt"] and "-line 100000\n+changed\n" in patch


def test_binary_large_and_empty_files_get_headers_only(
    project: Path, artifacts: DirectoryArtifacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = manifest(artifacts, project)
    (project / "logo.png").write_bytes(b"\x89PNG\x00changed, longer")
    (project / "data.bin").write_bytes(b"\x00\x01")
    (project / "empty.txt").write_text("")
    (project / "pkg" / "mod.py").write_bytes(b"\x00now binary")
    (project / "big.txt").write_text("x" * 40)
    monkeypatch.setattr(repair, "MAX_FILE_BYTES", 30)
    patch, changed = diff_manifests(before, manifest(artifacts, project), artifacts.get)
    assert changed == ["big.txt", "data.bin", "empty.txt", "logo.png", "pkg/mod.py"]
    assert "Binary files /dev/null and b/big.txt differ\n" in patch
    assert "Binary files /dev/null and b/data.bin differ\n" in patch
    assert "Binary files a/logo.png and b/logo.png differ\n" in patch
    assert "Binary files a/pkg/mod.py and b/pkg/mod.py differ\n" in patch
    assert "diff --git a/empty.txt b/empty.txt\nnew file mode 100644\n" in patch


@pytest.mark.parametrize("with_git", [True, False], ids=["git-apply", "built-in"])
def test_a_patch_applies_but_for_its_binary_files_which_it_names(
    project: Path,
    artifacts: DirectoryArtifacts,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    with_git: bool,
) -> None:
    """`tickwork patch --apply`: git apply refuses a `Binary files ... differ` diff, and the
    built-in applier too, so a binary file a test run wrote kept all of a patch from applying."""
    pristine = tmp_path / "pristine"
    shutil.copytree(project, pristine)
    before = manifest(artifacts, project)
    (project / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    (project / "dump.bin").write_bytes(b"SQLite format 3\x00")
    (project / "logo.png").write_bytes(b"\x89PNG\x00changed")
    patch, _ = diff_manifests(before, manifest(artifacts, project), artifacts.get)
    if not with_git:
        monkeypatch.setattr(shutil, "which", lambda name: None)
    done = apply_session_patch(pristine, patch)
    assert "left out" in done and "dump.bin, logo.png" in done, done
    assert (pristine / "pkg" / "mod.py").read_text() == "def f():\n    return 2\n"
    assert not (pristine / "dump.bin").exists()
    assert (pristine / "logo.png").read_bytes() == b"\x89PNG\x00\x01\x02"
    only = "diff --git a/.coverage b/.coverage\nnew file mode 100644\n"
    only += "Binary files /dev/null and b/.coverage differ\n"
    with pytest.raises(PatchDoesNotApply, match="only binary files, nothing was applied"):
        apply_session_patch(pristine, only)


@pytest.mark.parametrize("with_git", [True, False], ids=["git-apply", "built-in"])
def test_a_patch_that_does_not_apply_is_refused_not_a_usage_error(
    project: Path,
    artifacts: DirectoryArtifacts,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    with_git: bool,
) -> None:
    """`tickwork patch ID --apply DIR` on a folder changed since (or holding the patch
    already) exited 2, the code of a wrong command line, with git (1 with the built-in
    applier): the command is right, what it asks cannot be done to that folder (exit 1)."""
    pristine = tmp_path / "pristine"
    shutil.copytree(project, pristine)
    before = manifest(artifacts, project)
    (project / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    patch, _ = diff_manifests(before, manifest(artifacts, project), artifacts.get)
    if not with_git:
        monkeypatch.setattr(shutil, "which", lambda name: None)
    (pristine / "pkg" / "mod.py").write_text("def f():\n    return 3\n")  # changed since
    with pytest.raises(PatchDoesNotApply, match=f"the patch does not apply to {pristine}: ") as e:
        apply_session_patch(pristine, patch)
    assert not isinstance(e.value, InvalidInput)
    assert (pristine / "pkg" / "mod.py").read_text() == "def f():\n    return 3\n"


def test_the_final_test_run_is_recorded(project: Path) -> None:
    passing = run_final_tests(head_for({"test_command": PASS}), project)
    assert passing["command"] == PASS
    assert (passing["exit_code"], passing["passed"], passing["timed_out"]) == (0, True, False)
    failing = run_final_tests(head_for({"test_command": FAIL}), project)
    assert (failing["exit_code"], failing["passed"]) == (3, False)
    assert "2 failed" in failing["output"]


def test_a_change_to_c_code_whose_extension_the_tests_did_not_rebuild_says_so(
    project: Path, tmp_path: Path
) -> None:
    """markupsafe's extension module is built at setup, from the source as submitted: a
    session that mended `_speedups.c` ended `tests_failing`, "17 of the 17 failing tests
    failed before any change too", though its patch was right: its tests ran the old module.
    The final run now says so, and how to rebuild it; one that rebuilt it says nothing."""
    so = "pkg/_speedups.cpython-311-x86_64-linux-gnu.so"
    env = tmp_path / "env"
    (env / versions.GENERATED / "pkg").mkdir(parents=True)
    (env / versions.GENERATED / so).write_bytes(b"\x7fELF as setup built it")
    (project / so).write_bytes(b"\x7fELF as setup built it")  # what `restore` put there
    changed = ["pkg/_speedups.c", "pkg/mod.py"]
    head = head_for({"test_command": FAIL})
    tests = run_final_tests(head, project, env, changed)
    assert "pkg/_speedups.c" in tests["stale_build"] and so in tests["stale_build"]
    assert "build_ext --inplace" in tests["stale_build"]
    shown = "\n".join(str(p) for p in render._tests(tests))
    assert "did not rebuild" in shown
    assert render._stale_build({"result": {"tests": tests}}).startswith(
        "the session changed pkg/_speedups.c"
    )
    ended = Head(
        id="sess-1",
        kind="repair",
        created_at=T0,
        updated_at=T0,
        model="scripted",
        config=head.config,
        result={"tests": tests},
    )
    card = finished_card(ended, status="completed", data={}, public_url="", at=T0, masker=Masker())
    assert card["session"]["stale_build"] == tests["stale_build"]  # the card says it too
    assert "stale_build" not in run_final_tests(head, project, env, ["pkg/mod.py"])
    rebuild = f"printf 'new' > {so}; {FAIL}"
    assert "stale_build" not in run_final_tests(
        head_for({"test_command": rebuild}), project, env, changed
    )


def test_run_tests_tells_the_model_its_c_change_was_not_rebuilt(
    project: Path, tmp_path: Path
) -> None:
    """The model's own runs said nothing either: markupsafe's `run_tests` after the right
    change to `_speedups.c` failed as before, and a model would mend it again and again."""
    from tickwork.worker.tools.registry import ToolContext, run_tool

    so = "pkg/_speedups.cpython-311-x86_64-linux-gnu.so"
    env = tmp_path / "env"
    (env / versions.GENERATED / "pkg").mkdir(parents=True)
    (env / versions.GENERATED / so).write_bytes(b"\x7fELF as setup built it")
    (project / so).write_bytes(b"\x7fELF as setup built it")

    def run(changed: list[str]) -> str:
        ctx = ToolContext(
            session_id="s",
            call_id="c",
            step=1,
            workspace=project,
            config={"test_command": FAIL},
            environment=env,
            changed=lambda: changed,
        )
        return run_tool(toolkit.run_tests, {}, ctx).output

    said = run(["pkg/_speedups.c"])
    assert "--- extension modules not rebuilt ---" in said
    assert "the session changed pkg/_speedups.c, but the test command did not rebuild" in said
    assert "not rebuilt" not in run(["pkg/mod.py"])


def test_the_final_run_s_output_is_kept_from_a_line_s_start(project: Path) -> None:
    """pyparsing's final run printed more than is kept: `show` began its output with
    `llaneousExceptionBits`, a test id cut at its start, and did not say what was left out.
    What is kept fits what `show` prints, which would otherwise cut it again."""
    lines = 'print(*(f"FAILED tests/test_{i}.py::test_x" for i in range(400)), sep=chr(10))'
    long_run = f"python3 -c '{lines}'"
    output = run_final_tests(head_for({"test_command": long_run}), project)["output"]
    said, first, *_ = output.split("\n")
    assert said.startswith("(its first ") and said.endswith(" chars are not kept) …")
    assert first.startswith("FAILED tests/test_") and first.endswith(".py::test_x")
    assert output.endswith("FAILED tests/test_399.py::test_x")
    assert len(output) <= repair.MAX_TEST_OUTPUT_CHARS  # `show` prints it whole
    assert "chars before" not in "\n".join(str(p) for p in render._tests({"output": output}))


def test_failing_tests_behind_a_pipe_are_not_a_pass(project: Path) -> None:
    """`pytest -q | tail -3` exits as `tail`, 0: a repair whose tests still failed ended
    `repaired`. The runner's own summary says they failed; the run did not pass."""
    piped = (
        "printf 'F.\\nFAILED tests/test_a.py::test_a\\n1 failed, 1 passed in 0.05s\\n' | tail -2"
    )
    tests = run_final_tests(head_for({"test_command": piped}), project)
    assert tests["exit_code"] == 0 and tests["passed"] is False
    assert "`1 failed, 1 passed in 0.05s`" in tests["failed"] and "pipe" in tests["failed"]
    assert repair_outcome(patch="a patch", tests=tests) is Outcome.TESTS_FAILING
    assert tests["failing"] == ["tests/test_a.py::test_a"]


def test_a_passing_run_names_no_failing_test_whatever_its_output_prints(project: Path) -> None:
    """A passing test may print a summary line (an inner run's, pytester's): the final run
    passed, so no test of it is failing, nor said to have failed before any change."""
    printed = "printf 'FAILED tests/test_inner.py::test_x\\n1 passed in 0.01s\\n'"
    tests = run_final_tests(head_for({"test_command": printed}), project)
    assert tests["passed"] is True and "failing" not in tests


def test_a_runner_that_setup_without_network_could_not_install_is_not_the_projects_fault(
    project: Path,
) -> None:
    """Setup without egress installs only the project: its card said `pytest` was not
    installed and why, but the final tests said "declare it in the project's test
    dependencies", which it does. They now say setup had no network, and what to set."""
    command = "python3 -m tickwork_no_such_runner -q"
    head = head_for({"test_command": command})
    key = "7f631e2d1a04" + "0" * 52
    offline = {"key": key, "status": "ready", "missing": ["tickwork-no-such-runner"]}

    def not_run(environment: dict[str, Any]) -> str:
        setup = head.model_copy(update={"result": {"environment": environment}})
        return str(run_final_tests(setup, project)["not_run"])

    said = not_run({**offline, "note": NO_NETWORK})
    assert said.startswith("the test runner tickwork_no_such_runner is not installed"), said
    assert "the project declares it, but setup had no network" in said
    assert "TICKWORK_EGRESS_ALLOW=pypi.org,files.pythonhosted.org on the workers" in said
    assert "declare it in the project's test dependencies" not in said
    # online, setup failed to install it: its log says why
    said = not_run(offline)
    assert "the project declares it, but setup did not install it" in said
    assert "`tickwork env show 7f631e2d1a04`" in said
    # the runner's own command (`pytest -q`): the shell does not find it (exit 127)
    said = str(
        run_final_tests(
            head_for({"test_command": "tickwork-no-such-runner -q"}).model_copy(
                update={"result": {"environment": {**offline, "note": NO_NETWORK}}}
            ),
            project,
        )["not_run"]
    )
    assert said.startswith("the shell could not find or execute the test command (exit 127)")
    assert "tickwork-no-such-runner is not installed in the session's environment: the " in said
    assert "project declares it, but setup had no network" in said, said
    # a runner the project does not declare: declare it (it still needs the network)
    said = not_run({**offline, "missing": ["other"], "note": NO_NETWORK})
    assert "declare it in the project's test dependencies" in said and "no network" in said


def test_a_runner_missing_from_a_session_without_environment_says_to_build_one(
    project: Path,
) -> None:
    """cachetools submitted with `--setup none`: `python3 -m pytest` found no pytest, and the
    reason asked to declare it in the project's test dependencies, which tox.ini does. A
    session without an environment (`--setup none`) is told how to get one."""
    head = head_for({"test_command": "python3 -m tickwork_no_such_runner -q"})
    said = str(run_final_tests(head, project)["not_run"])
    assert said.startswith("the test runner tickwork_no_such_runner is not installed"), said
    assert (
        "the session has no environment (`--setup none`): submit it with `--setup auto` (the "
        "default), which installs the project and its test dependencies, or give setup "
        "commands that install it"
    ) in said
    assert "declare it in the project's test dependencies" not in said
    # with an environment that lacks it, the project is asked to declare it, as before
    built = head.model_copy(
        update={"config": {**head.config, "environment": {"setup": "auto"}}},
    )
    said = str(run_final_tests(built, project)["not_run"])
    assert "declare it in the project's test dependencies" in said, said


def test_the_final_test_run_has_a_timeout(project: Path) -> None:
    slow = "python3 -c 'import time; time.sleep(30)'"
    tests = run_final_tests(head_for({"test_command": slow, "test_timeout_s": 0.5}), project)
    assert tests["timed_out"] is True and tests["passed"] is False and tests["exit_code"] is None


def test_a_final_test_run_lacking_a_plugin_s_fixture_says_which_plugin(project: Path) -> None:
    """A hatch project's pytest-mock named where `auto` did not look: its `mocker` tests
    error "fixture 'mocker' not found" whatever the patch, and show said only "failed"."""
    said = "E       fixture 'mocker' not found\nE       fixture 'own_thing' not found"
    lacking = f"python3 -c {shlex.quote(f'print({said!r}); raise SystemExit(1)')}"
    tests = run_final_tests(head_for({"test_command": lacking}), project)
    assert tests["passed"] is False
    assert tests["lacking_plugins"] == (
        "pytest found no fixture 'mocker' (of pytest-mock): the environment lacks the plugin, "
        "so the tests that use it fail whatever the patch; add it to the test requirements or "
        "`--setup`"
    )
    shown = Console(width=300, record=True)
    done = head_for({"test_command": lacking}).model_copy(update={"result": {"tests": tests}})
    for part in render.outcome(done.model_dump(mode="json"), []):
        shown.print(part)
    assert "fixture 'mocker' (of pytest-mock)" in shown.export_text()
    # `ls`'s note and the webhook card say it too, not only `show`
    ended = done.model_copy(update={"status": Status.COMPLETED})
    listed = Console(width=400, record=True)
    listed.print(render.sessions_table([views.head(ended)]))
    assert "pytest found no fixture 'mocker' (of pytest-mock)" in listed.export_text()
    card = finished_card(ended, status="completed", data={}, public_url="", at=T0, masker=Masker())
    assert card["session"]["lacking_plugins"] == tests["lacking_plugins"]
    passing = run_final_tests(head_for({"test_command": "python3 -c 'print(1)'"}), project)
    assert "lacking_plugins" not in passing
    # the model's run_tests says it too, so that it does not mend the code for it
    from tickwork.worker.tools.registry import ToolContext, run_tool

    ctx = ToolContext(
        session_id="s", call_id="c", step=1, workspace=project, config={"test_command": lacking}
    )
    said = run_tool(toolkit.run_tests, {}, ctx).output
    assert (
        "--- pytest plugins missing ---\npytest found no fixture 'mocker' (of pytest-mock)" in said
    )


def test_a_final_test_run_its_own_timeout_stopped_says_so(project: Path) -> None:
    # `timeout 1 pytest` exits 124 with what the runner printed so far: a failure, and
    # show said only "exit 124, failed"
    slow = "timeout 1 python3 -c 'import time; time.sleep(30)'"
    tests = run_final_tests(head_for({"test_command": slow}), project)
    assert (tests["exit_code"], tests["passed"], tests["timed_out"]) == (124, False, False)
    assert tests["cut_short"] == (
        "the command's own `timeout` stopped it (exit 124) before the runner's end"
    )
    assert repair_outcome(patch="x", tests=tests) is Outcome.TESTS_FAILING
    shown = Console(width=300, record=True)
    done = head_for({"test_command": slow}).model_copy(update={"result": {"tests": tests}})
    for part in render.outcome(done.model_dump(mode="json"), []):
        shown.print(part)
    assert (
        f"final tests: `{slow}` exit 124, failed: the command's own `timeout` stopped it"
    ) in shown.export_text()


def test_the_final_test_run_ends_before_the_brokers_delivery_timeout(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = "python3 -c 'import time; time.sleep(30)'"
    # a broker that gives a delivery 301 s leaves a tick's calls 1 s
    monkeypatch.setenv("TICKWORK_DELIVERY_TIMEOUT_S", "301")
    monkeypatch.setenv("TICKWORK_MODEL_TIMEOUT_S", "1")

    tests = run_final_tests(head_for({"test_command": slow, "test_timeout_s": 60}), project)

    assert tests["timed_out"] is True and tests["passed"] is False


def test_the_demo_workspace_is_a_fresh_copy(state: Path) -> None:
    shipped = {p: p.read_bytes() for p in DEMO_EXAMPLE.rglob("*") if p.is_file()}
    first, second = prepare_demo_workspace(state), prepare_demo_workspace(state)
    assert first != second and state.resolve() in first.parents
    assert sorted(p.name for p in first.iterdir()) == ["calc.py", "test_calc.py"]
    data = demo_input(first)
    failing = run_shell(data["test_command"], cwd=first, timeout_s=60)
    assert failing.exit_code == 1 and "FAILED (failures=2)" in failing.stderr
    assert {p: p.read_bytes() for p in DEMO_EXAMPLE.rglob("*") if p.is_file()} == shipped


def test_the_demo_script_fits_the_shipped_example() -> None:
    replies, _ = load_script(DEMO_SCRIPT)
    calls = [[(c.name, c.arguments) for c in r.tool_calls] for r in replies]
    assert [[name for name, _ in step] for step in calls] == [
        ["run_tests"],
        ["read_file"],
        ["write_file"],
        ["run_tests"],
        [],
    ]
    written = calls[2][0][1]
    assert isinstance(written, dict) and written["path"] == calls[1][0][1]["path"] == "calc.py"  # type: ignore[index]
    shipped = (DEMO_EXAMPLE / "calc.py").read_text()
    assert written["content"] == shipped.replace(
        "sum(numbers) / (len(numbers) + 1)", "sum(numbers) / len(numbers)"
    )
    assert written["content"] != shipped
    assert json.loads(DEMO_SCRIPT.read_text())["replies"][-1]["content"].startswith("Summary")


def test_a_password_in_a_repository_url_is_not_shown() -> None:
    source = {"kind": "repo", "url": "https://bob:s3cret@git.example/x.git", "ref": "main"}
    shown = sources.describe({**source, "commit": "a" * 40})
    assert "s3cret" not in shown and "https://bob:****@git.example/x.git at main" in shown


@pytest.mark.skipif(shutil.which("git") is None, reason="compares with git's own diff")
def test_file_names_in_the_patch_are_quoted_as_git_quotes_them(
    project: Path, artifacts: DirectoryArtifacts
) -> None:
    names = ["a\n+++ b/evil", "café.txt", 'q"uote', "back\\slash", "tab\there", "plain name"]
    for name in names:
        (project / name).parent.mkdir(exist_ok=True)
        (project / name).write_text("old\n")
    original = project.parent / "original"
    shutil.copytree(project, original)
    for name in names:
        (project / name).write_text("new\n")

    patch, changed = diff(artifacts, original, project)

    assert sorted(changed) == sorted(names)
    assert "+++ b/evil" not in patch.splitlines() and "\n+++ b/evil\n" not in patch
    git = ["git", "-c", "core.quotePath=true", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(original)], check=True)
    subprocess.run([*git, "-C", str(original), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(original), "commit", "-qm", "o"], check=True)
    theirs = subprocess.run(
        ["git", "-C", str(project), "--git-dir", str(original / ".git"), "diff"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    headers = ("diff --git ", "--- ", "+++ ")
    assert sorted(h for h in patch.splitlines() if h.startswith(headers)) == sorted(
        h.rstrip("\t") for h in theirs.splitlines() if h.startswith(headers)
    )
    applied = subprocess.run(
        ["git", "-C", str(original), "apply", "-"], input=patch, text=True, capture_output=True
    )
    assert applied.returncode == 0, applied.stderr
    for name in names:
        assert (original / name).read_text() == "new\n"


class _FullDisk:
    """Session files whose working copies sit on a full filesystem: every read of the
    session's files needs a write first (a checkout, a cached blob) and meets ENOSPC."""

    @property
    def workspaces(self) -> _FullDisk:
        return self

    def base(self, files: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    def open(self, *, changes: bool) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_the_end_puts_the_tick_back_instead_of_losing_the_patch() -> None:
    # the tick's ENOSPC handler (worker/tick/advance.py) puts the tick back; an answer
    # recorded with `patch: None` would end a repaired session as `no_changes` (the chaos
    # run's file sessions, when the last tick met the full workspaces disk)
    head = head_for({"files": {"base": "0" * 64}, "test_command": PASS})
    with pytest.raises(OSError) as raised:
        repair.finish(head, Ending(files=_FullDisk()))  # type: ignore[arg-type]
    assert raised.value.errno == errno.ENOSPC


def _collection_stopped(module: str) -> str:
    """pytest's words (8.x, `-q`) for a test module whose import failed, as a command."""
    said = (
        "ImportError while importing test module '/workspace/tests/test_dep.py'.\n"
        f"tests/test_dep.py:1: in <module>\n    import {module}\n"
        f"E   ModuleNotFoundError: No module named '{module}'\n"
        "ERROR tests/test_dep.py\n"
        "!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!\n1 error in 0.49s\n"
    )
    return f"printf %s {shlex.quote(said)}; exit 2"


def test_a_test_module_the_environment_lacks_is_not_a_failing_test(project: Path) -> None:
    """boltons' and tabulate's tests import what the environment did not have: pytest
    stopped at collection (exit 2, `No module named 'X'`), no test ran, and the session
    ended `tests_failing` as if the code were broken. A module of the project's own that is
    missing is the code's fault: that still fails."""
    command = _collection_stopped("not_installed_dep")
    auto = {"setup": "auto"}  # a session with an environment (`--setup none`'s: below)
    tests = run_final_tests(head_for({"test_command": command, "environment": auto}), project)
    assert tests["exit_code"] == 2 and tests["passed"] is False, tests["output"]
    assert "'not_installed_dep'" in tests["not_run"] and "test requirements" in tests["not_run"]
    assert repair_outcome(patch="a patch", tests=tests) is Outcome.TESTS_NOT_RUN
    offline = run_final_tests(
        head_for({"test_command": command, "network": "none", "environment": auto}), project
    )
    assert "setup had no network" in offline["not_run"]
    bare = run_final_tests(head_for({"test_command": command}), project)
    assert "the session has no environment (`--setup none`)" in bare["not_run"]

    own = run_final_tests(head_for({"test_command": _collection_stopped("pkg.renamed")}), project)
    assert own["exit_code"] == 2 and "not_run" not in own, own["output"]
    assert repair_outcome(patch="a patch", tests=own) is Outcome.TESTS_FAILING


@pytest.mark.parametrize(
    ("layout", "module"),
    [
        pytest.param("lib/mylib/__init__.py", "mylib.core", id="lib_layout"),
        pytest.param("tests/helpers.py", "helpers", id="test_helper_by_its_bare_name"),
        pytest.param("services/api/apipkg/__init__.py", "apipkg", id="a_subprojects_package"),
    ],
)
def test_a_missing_module_of_the_projects_own_anywhere_in_its_tree_is_a_failing_test(
    project: Path, layout: str, module: str
) -> None:
    """Not only the root and `src/` hold the project's code: a module it cannot import from
    a `lib/` layout, a test helper or a subproject is the code under repair's fault."""
    (project / layout).parent.mkdir(parents=True, exist_ok=True)
    (project / layout).write_text("")
    tests = run_final_tests(head_for({"test_command": _collection_stopped(module)}), project)
    assert tests["exit_code"] == 2 and "not_run" not in tests, tests.get("not_run")
    assert repair_outcome(patch="a patch", tests=tests) is Outcome.TESTS_FAILING


def test_a_unittest_module_misspelled_in_the_test_command_ran_no_test(project: Path) -> None:
    """`python3 -m unittest -q tests.test_mroe` (more-itertools' tests.test_more, misspelled)
    ended `tests_failing`: unittest ran a `_FailedTest` in place of the module it could not
    import ("Ran 1 test", exit 1), and no test of the project's ran. A test module the
    session's change broke (a SyntaxError in the code it imports) still fails, as it does
    under pytest."""
    (project / "tests").mkdir()
    (project / "tests" / "__init__.py").write_text("")
    (project / "tests" / "test_mod.py").write_text(
        "import unittest\n\nfrom pkg.mod import f\n\n\n"
        "class T(unittest.TestCase):\n    def test_f(self):\n        self.assertEqual(f(), 1)\n"
    )
    typo = run_final_tests(
        head_for({"test_command": "python3 -m unittest -q tests.test_mdo"}), project
    )
    assert "unittest.loader._FailedTest" in typo["output"], typo["output"]
    assert "No module named 'tests.test_mdo'" in typo["not_run"], typo["not_run"]
    assert repair_outcome(patch="a patch", tests=typo) is Outcome.TESTS_NOT_RUN

    command = "python3 -m unittest discover -q"
    (project / "pkg" / "mod.py").write_text("def f(:\n    return 1\n")
    broken = run_final_tests(head_for({"test_command": command}), project)
    assert "SyntaxError" in broken["output"] and "not_run" not in broken, broken.get("not_run")
    assert repair_outcome(patch="a patch", tests=broken) is Outcome.TESTS_FAILING
    (project / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    assert run_final_tests(head_for({"test_command": command}), project)["passed"] is True


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"test_command": "pytest " + "x" * 10_000}, "`test_command` is 10,007 characters long"),
        ({"goal": "g" * 20_001}, "`goal` is 20,001 characters long; at most 20,000"),
        ({"test_command": "pytest\x00-q"}, "`test_command` holds a NUL character"),
    ],
)
def test_a_test_command_or_goal_too_long_for_every_prompt_is_refused_naming_it(
    project: Path, state: Path, artifacts: DirectoryArtifacts, extra: dict[str, str], said: str
) -> None:
    data = {"workspace": str(project), "test_command": PASS, **extra}
    with pytest.raises(InvalidInput, match=re.escape(said)):
        prepare(data, state_dir=state, artifacts=artifacts)
