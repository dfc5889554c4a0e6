"""The repair job kind: its input checks, the workspace baseline, and the patch and tests at
the end; the demo's example and script."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fsm.errors import InvalidInput
from fsm.values import Head
from worker import repair
from worker.jobs import Jobs
from worker.models.scripted import load_script
from worker.repair import (
    DEMO_EXAMPLE,
    DEMO_SCRIPT,
    REPAIR,
    demo_input,
    diff_workspace,
    finish,
    prepare,
    prepare_demo_workspace,
)
from worker.tools.patches import apply_patch
from worker.tools.shell import run_shell

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PASS = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(0)'"
FAIL = f"{shlex.quote(sys.executable)} -c 'import sys; print(\"2 failed\"); sys.exit(3)'"


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


def head_for(config: dict[str, Any]) -> Head:
    return Head(
        id="sess-1", kind="repair", created_at=T0, updated_at=T0, model="scripted", config=config
    )


def start(project: Path, state: Path, command: str = PASS, **extra: Any) -> dict[str, Any]:
    return prepare({"workspace": str(project), "test_command": command, **extra}, state_dir=state)


def test_the_builtin_kind_is_this_one() -> None:
    kind = Jobs().get("repair")
    assert kind is REPAIR and kind.finish is finish
    assert set(kind.tools().names()) >= {"run_tests", "read_file", "write_file", "apply_patch"}
    assert "approv" in kind.system_prompt and "without any tool call" in kind.system_prompt


#: stands for the project's path in the cases below
WS = "<project>"


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"test_command": PASS}, "`workspace` is required"),
        ({"workspace": "", "test_command": PASS}, "`workspace` is required"),
        ({"workspace": 3, "test_command": PASS}, "`workspace` is required"),
        ({"workspace": "/no/such/dir", "test_command": PASS}, "does not exist"),
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
        ({"workspace": WS, "test_command": PASS, "test_cmd": "x"}, r"unknown key\(s\) test_cmd"),
        ({"workspace": WS, "test_command": PASS, "network": "yes"}, "`network` must be true"),
    ],
)
def test_invalid_input_says_what_to_do(
    project: Path, state: Path, data: dict[str, Any], match: str
) -> None:
    data = {k: str(project) if v == WS else v for k, v in data.items()}
    with pytest.raises(InvalidInput, match=match):
        prepare(data, state_dir=state)
    assert not (state / "baselines").exists()


def test_a_workspace_must_be_a_directory(project: Path, state: Path) -> None:
    with pytest.raises(InvalidInput, match="is not a directory; give the project's folder"):
        start(project / "README.md", state)


def test_a_workspace_that_is_the_state_dir_is_refused(project: Path) -> None:
    with pytest.raises(InvalidInput, match="is tickwork's state dir"):
        start(project, project)


@pytest.mark.parametrize(
    ("limit", "value"), [("MAX_BASELINE_BYTES", 20), ("MAX_BASELINE_FILES", 1)]
)
def test_a_workspace_too_large_is_refused_and_leaves_nothing(
    project: Path, state: Path, monkeypatch: pytest.MonkeyPatch, limit: str, value: int
) -> None:
    monkeypatch.setattr(repair, limit, value)
    with pytest.raises(InvalidInput, match=r"holds more than .* at the project itself"):
        start(project, state)
    assert not (state / "baselines").exists()


def test_prepare_returns_the_config_and_a_baseline_outside_the_workspace(
    project: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project.parent)
    config = start(Path("project"), state, " python -m pytest -q ", goal="fix f")
    assert config["workspace"] == str(project.resolve())
    assert config["test_command"] == "python -m pytest -q"
    for text in ("fix f", str(project.resolve()), "python -m pytest -q", "run_tests", "summary"):
        assert text in config["user_prompt"]
    baseline = Path(config["baseline"])
    assert baseline.parent == state.resolve() / "baselines"
    assert project.resolve() not in baseline.parents
    files = baseline / "files"
    copied = sorted(p.relative_to(files).as_posix() for p in files.rglob("*") if p.is_file())
    assert copied == ["README.md", "pkg/gone.py", "pkg/mod.py"]  # no binary, no caches, no .git
    assert (files / "pkg" / "mod.py").read_text() == "def f():\n    return 1\n"


def test_network_is_off_unless_the_input_asks_for_it(project: Path, state: Path) -> None:
    assert "network" not in start(project, state)
    assert "network" not in start(project, state, network=False)
    assert start(project, state, network=True)["network"] is True


def test_a_test_command_may_be_a_list_of_words(project: Path, state: Path) -> None:
    config = start(project, state, ["python", "-m", "pytest", "-k", "a b"])  # type: ignore[arg-type]
    assert config["test_command"] == "python -m pytest -k 'a b'"


def test_large_files_are_not_copied(
    project: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(repair, "MAX_FILE_BYTES", 15)
    config = start(project, state)
    files = Path(config["baseline"]) / "files"
    assert sorted(p.name for p in files.rglob("*") if p.is_file()) == ["gone.py"]


def test_the_state_dir_comes_from_the_settings_by_default(
    project: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_STATE_DIR", str(state))
    config = REPAIR.prepare({"workspace": str(project), "test_command": PASS})
    assert Path(config["baseline"]).parent == state.resolve() / "baselines"


def test_a_state_dir_inside_the_workspace_is_neither_copied_nor_diffed(project: Path) -> None:
    inner = project / "var" / "tw"
    (inner / "broker").mkdir(parents=True)
    (inner / "broker" / "msg.json").write_text("{}")
    config = start(project, inner)
    assert not (Path(config["baseline"]) / "files" / "var").exists()
    (inner / "broker" / "msg2.json").write_text("{}")
    assert diff_workspace(Path(config["baseline"]), project) == ("", [])


def test_an_unchanged_workspace_has_an_empty_patch(project: Path, state: Path) -> None:
    config = start(project, state)
    (project / "__pycache__" / "mod.cpython.pyc").write_bytes(b"\x00compiled")
    result = finish(head_for(config))
    assert result["patch"] == "" and result["files_changed"] == []


def test_finish_diffs_modified_new_and_deleted_files(project: Path, state: Path) -> None:
    config = start(project, state)
    original = project.parent / "original"
    shutil.copytree(project, original)
    (project / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    (project / "pkg" / "gone.py").unlink()
    (project / "pkg" / "new.py").write_text("NEW = 1\n")
    (project / "README.md").write_text("no newline at the end, still\n")

    result = finish(head_for(config))

    patch = result["patch"]
    assert result["files_changed"] == ["README.md", "pkg/gone.py", "pkg/mod.py", "pkg/new.py"]
    assert "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n" in patch
    assert "-    return 1\n+    return 2\n" in patch
    assert "deleted file mode 100644\n--- a/pkg/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n" in patch
    assert "new file mode 100644\n--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+NEW = 1\n" in (
        patch
    )
    assert "-no newline at the end\n\\ No newline at end of file\n" in patch
    # the patch turns the starting workspace into the final one
    apply_patch(original, patch)
    for rel in ("pkg/mod.py", "pkg/new.py", "README.md"):
        assert (original / rel).read_bytes() == (project / rel).read_bytes()
    assert not (original / "pkg" / "gone.py").exists()


def test_crlf_line_endings_survive_the_patch(project: Path, state: Path) -> None:
    (project / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    config = start(project, state)
    original = project.parent / "original"
    shutil.copytree(project, original)
    (project / "win.txt").write_bytes(b"one\r\n2\r\n")
    patch, changed = diff_workspace(Path(config["baseline"]), project)
    assert changed == ["win.txt"] and "-two\r\n+2\r\n" in patch
    apply_patch(original, patch)
    assert (original / "win.txt").read_bytes() == b"one\r\n2\r\n"


def test_lines_split_at_newlines_only(project: Path, state: Path) -> None:
    (project / "odd.py").write_text("a = '\x0c'\nb = '\u2028'\nc = 1\n")
    config = start(project, state)
    (project / "odd.py").write_text("a = '\x0c'\nb = '\u2028'\nc = 2")
    patch, _ = diff_workspace(Path(config["baseline"]), project)
    assert patch.endswith(
        "@@ -1,3 +1,3 @@\n a = '\x0c'\n b = '\u2028'\n-c = 1\n+c = 2\n"
        "\\ No newline at end of file\n"
    )


def test_binary_and_empty_files_get_headers_only(project: Path, state: Path) -> None:
    config = start(project, state)
    (project / "logo.png").write_bytes(b"\x89PNG\x00changed, longer")
    (project / "data.bin").write_bytes(b"\x00\x01")
    (project / "empty.txt").write_text("")
    (project / "pkg" / "mod.py").write_bytes(b"\x00now binary")
    patch, changed = diff_workspace(Path(config["baseline"]), project)
    assert changed == ["data.bin", "empty.txt", "logo.png", "pkg/mod.py"]
    assert "Binary files /dev/null and b/data.bin differ\n" in patch
    assert "Binary files a/logo.png and b/logo.png differ\n" in patch
    assert "Binary files a/pkg/mod.py and b/pkg/mod.py differ\n" in patch
    assert "diff --git a/empty.txt b/empty.txt\nnew file mode 100644\n" in patch


def test_finish_records_the_final_test_run(project: Path, state: Path) -> None:
    passing = finish(head_for(start(project, state, PASS)))["tests"]
    assert passing["command"] == PASS
    assert (passing["exit_code"], passing["passed"], passing["timed_out"]) == (0, True, False)
    failing = finish(head_for(start(project, state, FAIL)))["tests"]
    assert (failing["exit_code"], failing["passed"]) == (3, False)
    assert "2 failed" in failing["output"]


def test_the_final_test_run_has_a_timeout(project: Path, state: Path) -> None:
    slow = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(30)'"
    tests = finish(head_for(start(project, state, slow, test_timeout_s=0.5)))["tests"]
    assert tests["timed_out"] is True and tests["passed"] is False and tests["exit_code"] is None


def test_the_final_test_run_ends_before_the_brokers_delivery_timeout(
    project: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(30)'"
    config = start(project, state, slow, test_timeout_s=60)
    # a broker that gives a delivery 301 s leaves a tick's calls 1 s
    monkeypatch.setenv("TICKWORK_DELIVERY_TIMEOUT_S", "301")
    monkeypatch.setenv("TICKWORK_MODEL_TIMEOUT_S", "1")

    tests = finish(head_for(config))["tests"]

    assert tests["timed_out"] is True and tests["passed"] is False


def test_finish_without_its_baseline_still_returns(project: Path, state: Path) -> None:
    config = start(project, state)
    shutil.rmtree(config["baseline"])
    result = finish(head_for(config))
    assert result["patch"] is None and "manifest.json" in result["patch_error"]
    assert result["tests"]["passed"] is True


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
