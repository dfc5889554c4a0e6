"""The repair toolkit on real files and real subprocesses."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.approvals import approval_reason
from tickwork.worker.files.environments import NO_NETWORK
from tickwork.worker.jobs.repair import default_registry, repair_tools, toolkit
from tickwork.worker.sandbox.runner import Limits, Sandbox
from tickwork.worker.tools import ToolContext, ToolResult

Call = Callable[..., ToolResult]

#: the sandbox's python3, on its PATH (the worker's venv is not in the sandbox)
PYTHON = "python3"


@pytest.fixture
def project(workspace: Path) -> Path:
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("def total(xs):\n    return sum(xs) + 1\n")
    (workspace / "src" / "util.py").write_text("# TODO: tidy\nVALUE = 1\n")
    (workspace / "README.md").write_text("# demo\n")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n# TODO in git\n")
    (workspace / "blob.bin").write_bytes(b"\x00\x01TODO\x02")
    return workspace


def test_the_toolkit_and_its_flags() -> None:
    registry = default_registry()
    assert registry.names() == (
        "list_files", "read_file", "search", "write_file", "apply_patch", "run_command",
        "run_tests", "spawn_agents", "wait_children", "adopt_patch",
    )  # fmt: skip
    assert registry.get("adopt_patch").requires_approval  # as write_file
    assert registry.get("spawn_agents").idempotent
    assert registry.get("wait_children").idempotent
    flags = {t.name: (t.requires_approval, t.idempotent) for t in repair_tools()}
    assert flags == {
        "list_files": (False, True),
        "read_file": (False, True),
        "search": (False, True),
        "write_file": (True, True),
        "apply_patch": (True, False),
        "run_command": (False, False),
        "run_tests": (False, True),
    }
    assert registry.get("run_command").approval_policy is not None
    assert default_registry() is not registry, "a new registry each time, no global"


@pytest.mark.parametrize("arguments", [{"cmd": "ls"}, {"command": ["rm", "-rf", "x"]}, {}])
def test_a_run_command_whose_arguments_it_refuses_asks_no_person(
    arguments: dict[str, Any],
) -> None:
    """A model's `run_command {"cmd": "ls"}` waited for a person ("the command is a
    NoneType, not text"), who approved a call that then failed on its arguments: it never
    runs, so the model is told at once what the tool expects."""
    rule = default_registry().get("run_command").rule
    assert approval_reason(rule, arguments, of="tool 'run_command'") is None
    asked = approval_reason(rule, {"command": "rm -rf build"}, of="tool 'run_command'")
    assert asked is not None and "rm" in asked


def test_list_files_recursive_sorted_without_git(project: Path, call: Call) -> None:
    result = call("list_files")
    assert not result.is_error
    assert result.output.splitlines() == ["README.md", "blob.bin", "src/app.py", "src/util.py"]
    assert call("list_files", pattern="*.py").output.splitlines() == ["src/app.py", "src/util.py"]
    assert call("list_files", path="src", pattern="src/u*").output == "src/util.py"
    assert call("list_files", pattern="**/*.md").output == "README.md"
    assert "no files match" in call("list_files", pattern="*.rs").output


def test_a_path_with_a_newline_is_one_quoted_line_the_model_can_pass_back(
    project: Path, call: Call
) -> None:
    """A file named `a<newline>b.py` was listed as two paths, `a` and `b.py`, neither of
    which exists: it is shown as a JSON string, and that string's value opens it."""
    (project / "src" / "a\nb.py").write_text("# TODO: odd name\n")
    (project / "src" / "tab\there.txt").write_text("")
    (project / '"quoted".txt').write_text("")  # its own quotes: quoted too, not read as such
    listed = call("list_files", path="src").output.splitlines()
    assert listed == ['"src/a\\nb.py"', "src/app.py", '"src/tab\\there.txt"', "src/util.py"]
    assert '"\\"quoted\\".txt"' in call("list_files").output.splitlines()
    found = call("search", pattern="odd name").output
    assert found == '"src/a\\nb.py":1: # TODO: odd name'
    path = json.loads(listed[0])
    assert call("read_file", path=path).output.endswith("1\t# TODO: odd name")


def test_list_files_caps_its_count(workspace: Path, call: Call) -> None:
    for n in range(510):
        (workspace / f"f{n:03}.txt").write_text("")
    output = call("list_files").output
    assert output.count("\n") == 500
    assert output.endswith("... and 10 more; narrow the path or pattern")


def test_list_files_refusals(project: Path, call: Call) -> None:
    assert "PathOutsideWorkspace" in call("list_files", path="..").output
    assert "does not exist" in call("list_files", path="nope").output


def test_list_files_skips_symlinks_leading_out(project: Path, tmp_path: Path, call: Call) -> None:
    (tmp_path / "elsewhere.txt").write_text("secret")
    (project / "out.txt").symlink_to(tmp_path / "elsewhere.txt")
    (project / "in.txt").symlink_to(project / "README.md")
    names = call("list_files").output.splitlines()
    assert "in.txt" in names and "out.txt" not in names


def test_list_and_search_survive_a_symlink_loop(project: Path, call: Call) -> None:
    (project / "loop-a").symlink_to(project / "loop-b")
    (project / "loop-b").symlink_to(project / "loop-a")
    assert "loop-a" not in call("list_files").output
    assert not call("search", pattern="TODO").is_error


def test_read_file_with_line_numbers(project: Path, call: Call) -> None:
    result = call("read_file", path="src/app.py")
    assert result.output == (
        "src/app.py (lines 1-2 of 2)\n     1\tdef total(xs):\n     2\t    return sum(xs) + 1"
    )
    ranged = call("read_file", path="src/util.py", start_line=2, end_line=2)
    assert ranged.output.endswith("     2\tVALUE = 1")


def test_read_file_long_files_are_paged(workspace: Path, call: Call) -> None:
    (workspace / "big.txt").write_text("".join(f"line {n}\n" for n in range(1, 2501)))
    output = call("read_file", path="big.txt").output
    assert "(lines 1-2000 of 2500)" in output
    assert output.endswith("... 500 more lines; read on with start_line=2001")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"path": "../etc/passwd"}, "climbs out"),
        ({"path": "/etc/passwd"}, "absolute"),
        ({"path": "missing.py"}, "does not exist"),
        ({"path": "src"}, "is a directory"),
        ({"path": "blob.bin"}, "binary"),
        ({"path": "src/app.py", "start_line": 9}, "has 2 lines"),
        ({"path": "src/app.py", "start_line": 2, "end_line": 1}, "before start_line"),
        ({"path": "src/app.py", "start_line": 0}, "greater than or equal to 1"),
    ],
)
def test_read_file_refusals(project: Path, call: Call, arguments: dict, message: str) -> None:
    result = call("read_file", **arguments)
    assert result.is_error
    assert message in result.output


def test_read_file_refuses_a_symlink_out(project: Path, tmp_path: Path, call: Call) -> None:
    (tmp_path / "secret").write_text("password")
    (project / "peek").symlink_to(tmp_path / "secret")
    result = call("read_file", path="peek")
    assert result.is_error and "PathOutsideWorkspace" in result.output
    assert "password" not in result.output


def test_search(project: Path, call: Call) -> None:
    result = call("search", pattern=r"TODO|VALUE")
    assert result.output.splitlines() == ["src/util.py:1: # TODO: tidy", "src/util.py:2: VALUE = 1"]
    assert call("search", pattern="sum", path="src/app.py").output == (
        "src/app.py:2: return sum(xs) + 1"
    )
    assert "no matches" in call("search", pattern="nothing-here").output


def test_search_caps_results(workspace: Path, call: Call) -> None:
    (workspace / "many.txt").write_text("hit\n" * 20)
    output = call("search", pattern="hit", max_results=5).output
    assert output.count("many.txt:") == 5
    assert "stopped after 5 results" in output


def test_search_invalid_regex_is_a_clear_error(project: Path, call: Call) -> None:
    result = call("search", pattern="total(")
    assert result.is_error
    assert "invalid regular expression 'total('" in result.output


#: the search of a pattern that backtracks exponentially, run in a process of its own: the
#: standard library's `re` holds the GIL while it matches, so a hang would hold this one
_BACKTRACKING = """
import sys, threading, time
from pathlib import Path
from tickwork.worker.jobs.repair import default_registry, toolkit
from tickwork.worker.tools import ToolContext, run_tool

toolkit.SEARCH_MATCH_S = 1.0
root = Path(sys.argv[1])
(root / "long.txt").write_text("x" * 60 + "\\n")
beats = []
threading.Thread(
    target=lambda: [beats.append(time.sleep(0.05)) for _ in range(40)], daemon=True
).start()
ctx = ToolContext(session_id="s", call_id="s1c0", step=1, workspace=root)
result = run_tool(default_registry().get("search"), {"pattern": "(x|x)+(?=y)"}, ctx)
print(result.is_error, len(beats), result.output)
"""


def test_search_with_a_pattern_that_backtracks_forever_ends_and_says_why(
    workspace: Path,
) -> None:
    """The pattern is the model's: one that backtracks exponentially on a line is stopped
    after SEARCH_MATCH_S with an error observation naming it, and the worker's other
    threads (leases, heartbeats) run meanwhile."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _BACKTRACKING, str(workspace)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    is_error, beats, output = done.stdout.split(" ", 2)
    assert is_error == "True", output
    assert int(beats) >= 10, "other threads were held while the pattern was matched"
    assert "'(x|x)+(?=y)'" in output and "long.txt" in output and "simpler" in output, output


def test_search_does_not_follow_symlinks_out(project: Path, tmp_path: Path, call: Call) -> None:
    (tmp_path / "secret").write_text("TODO password")
    (project / "peek").symlink_to(tmp_path / "secret")
    assert "password" not in call("search", pattern="TODO").output


def test_write_file_creates_replaces_and_is_idempotent(workspace: Path, call: Call) -> None:
    first = call("write_file", path="pkg/new.py", content="x = 1\n")
    second = call("write_file", path="pkg/new.py", content="x = 1\n")
    assert first.output == second.output == "wrote 6 characters (1 lines) to pkg/new.py"
    assert (workspace / "pkg" / "new.py").read_text() == "x = 1\n"
    call("write_file", path="pkg/new.py", content="x = 2\n")
    assert (workspace / "pkg" / "new.py").read_text() == "x = 2\n"


@pytest.mark.parametrize(
    ("path", "message"),
    [("../escape.txt", "climbs out"), ("/tmp/abs.txt", "absolute"), (".", "is a directory")],
)
def test_write_file_refusals(workspace: Path, call: Call, path: str, message: str) -> None:
    result = call("write_file", path=path, content="x")
    assert result.is_error and message in result.output
    assert not (workspace.parent / "escape.txt").exists()


def test_write_file_refuses_writing_through_a_symlink_out(
    workspace: Path, tmp_path: Path, call: Call
) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("safe")
    (workspace / "link.txt").symlink_to(target)
    (workspace / "dir").symlink_to(tmp_path, target_is_directory=True)
    assert call("write_file", path="link.txt", content="pwned").is_error
    assert call("write_file", path="dir/victim.txt", content="pwned").is_error
    assert target.read_text() == "safe"


def test_apply_patch_tool(project: Path, call: Call) -> None:
    patch = (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def total(xs):\n"
        "-    return sum(xs) + 1\n+    return sum(xs)\n"
    )
    result = call("apply_patch", patch=patch)
    assert not result.is_error, result.output
    assert result.output == "patched src/app.py (1 hunk(s))"
    assert (project / "src" / "app.py").read_text() == "def total(xs):\n    return sum(xs)\n"
    again = call("apply_patch", patch=patch)
    assert again.is_error and "does not apply" in again.output


def test_apply_patch_refuses_paths_outside(project: Path, call: Call) -> None:
    patch = "--- /dev/null\n+++ b/../evil.py\n@@ -0,0 +1 @@\n+x\n"
    result = call("apply_patch", patch=patch)
    assert result.is_error and "PathOutsideWorkspace" in result.output
    assert not (project.parent / "evil.py").exists()


def test_run_command_output_has_exit_code_stdout_stderr(workspace: Path, call: Call) -> None:
    result = call("run_command", command="echo out; echo err >&2; exit 3")
    assert not result.is_error
    assert result.output == "exit code: 3\n--- stdout ---\nout\n--- stderr ---\nerr"


def test_run_command_runs_in_the_workspace(workspace: Path, call: Call) -> None:
    (workspace / "marker").write_text("")
    assert "marker" in call("run_command", command="ls").output
    # in the sandbox the working copy is /workspace, not its path on the host
    assert call("run_command", command="pwd").output.endswith("\n/workspace")
    call("run_command", command="echo made > made.txt")
    assert (workspace / "made.txt").read_text() == "made\n"


def test_run_command_environment_is_clean(
    workspace: Path, call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_DATABASE_URL", "postgresql://secret")
    output = call("run_command", command="env").output
    assert "postgresql://secret" not in output
    assert "TICKWORK_IDEMPOTENCY_KEY=sess:1:s1c0" in output
    assert "PATH=" in output


def test_run_command_timeout_kills_the_whole_group(workspace: Path, call: Call) -> None:
    started = time.monotonic()
    result = call("run_command", command="sleep 30 & sleep 30; echo never", timeout_s=0.5)
    assert time.monotonic() - started < 10
    assert result.is_error
    assert "timed out after 0.5s" in result.output
    assert "never" not in result.output


def test_run_command_is_bounded_by_the_call_timeout(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    started = time.monotonic()
    result = call("run_command", ctx=make_ctx(timeout_s=1.0), command="sleep 30", timeout_s=600)
    assert time.monotonic() - started < 10
    assert result.is_error and "timed out" in result.output


def test_run_command_output_is_capped(workspace: Path, call: Call) -> None:
    result = call("run_command", command=f"{PYTHON} -c \"print('x' * 50000)\"")
    assert "characters cut" in result.output
    assert len(result.output) < 20_200


@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_run_command_output_is_capped_while_read(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext], mode: str
) -> None:
    sandbox = Sandbox(mode=mode, limits=Limits(output_bytes=100_000))
    result = call("run_command", ctx=make_ctx(sandbox=sandbox), command="yes", timeout_s=60)
    assert result.is_error
    assert "the command was killed: its output passed 100000 bytes" in result.output


def test_run_command_stops_when_the_session_says_so(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    started = time.monotonic()
    ctx = make_ctx(stop=lambda: "the session was cancelled")
    result = call("run_command", ctx=ctx, command="sleep 30", timeout_s=60)
    assert time.monotonic() - started < 10
    assert result.is_error and "killed: the session was cancelled" in result.output


def test_a_blank_command_from_the_model_is_refused_saying_what_to_send(
    workspace: Path, call: Call
) -> None:
    """The model's own `run_command` of "" ran `sh -c ""` and said exit code 0, as if a
    command had run; it is refused, as a person's blank edit is, telling the model what to
    send (not to reject the call: that is a person's word)."""
    for blank in ("", "  \n"):
        result = call("run_command", command=blank)
        assert result.is_error, result.output
        assert "the command is empty" in result.output, result.output
        assert "give the shell command line to run" in result.output, result.output
        assert "exit code" not in result.output and "reject" not in result.output


def test_run_command_validates_its_timeout(workspace: Path, call: Call) -> None:
    result = call("run_command", command="ls", timeout_s=-1)
    assert result.is_error and "timeout_s" in result.output


def test_run_tests_reports_pass_and_fail(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    (workspace / "check.py").write_text("import sys\nprint('ran')\nsys.exit(int(sys.argv[1]))\n")
    passing = call("run_tests", ctx=make_ctx(config={"test_command": f"{PYTHON} check.py 0"}))
    assert passing.output.startswith("tests passed")
    assert "ran" in passing.output
    failing = call("run_tests", ctx=make_ctx(config={"test_command": ["python3", "check.py", "1"]}))
    assert failing.output.startswith("tests FAILED")
    assert "exit code: 1" in failing.output


#: pytest's summary with `--color=yes` (wcwidth's tox.ini `addopts`), as the terminal gets it
COLOURED = (
    "\\033[31mFAILED\\033[0m tests/test_core.py::\\033[1mtest_wide\\033[0m\\n"
    "\\033[31m\\033[1m42 failed\\033[0m, \\033[32m1992 passed\\033[0m\\033[31m in 37.09s\\033[0m\\n"
)


def test_run_tests_reads_a_coloured_summary_and_shows_it_without_escapes(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    """wcwidth's pytest configuration says `--color=yes`: the summary's escape codes hid
    its "42 failed" from the check of a pipe's exit code (`pytest | tail -5` exits 0 as
    `tail`: "tests passed", `repaired`), and reached the model and `tickwork show` as
    `[31m` noise."""
    (workspace / "run.sh").write_text(f"printf '{COLOURED}'\n")
    said = call("run_tests", ctx=make_ctx(config={"test_command": "sh run.sh | tail -5"})).output
    assert said.startswith("tests FAILED: the test command exited 0"), said
    assert "42 failed, 1992 passed in 37.09s" in said
    assert "\x1b" not in said and "[31m" not in said


def test_run_tests_says_when_the_runner_found_no_test(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    """unittest finds no test in a tests/ folder without __init__.py and, before Python 3.12,
    exits 0: the model was told "tests passed" with nothing tested."""
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("def test_a():\n    assert False\n")
    ctx = make_ctx(config={"test_command": f"{PYTHON} -m unittest -q"})
    found = call("run_tests", ctx=ctx)
    assert found.output.startswith("tests did NOT run: the test runner found no test"), found
    assert "Ran 0 tests" in found.output


def test_run_tests_says_when_the_runner_or_the_command_is_missing(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    """An environment without pytest (`No module named pytest`) or without the command
    (exit 127) ran no test: the model was told "tests FAILED", as if the code were wrong,
    while the final run recorded the same as tests_not_run."""
    missing = call(
        "run_tests", ctx=make_ctx(config={"test_command": f"{PYTHON} -m no_such_runner_x -q"})
    )
    assert missing.output.startswith(
        "tests did NOT run: the test runner no_such_runner_x is not installed"
    ), missing.output
    absent = call("run_tests", ctx=make_ctx(config={"test_command": "no-such-command-x -q"}))
    assert absent.output.startswith("tests did NOT run: the shell could not find"), absent.output


def test_run_tests_tells_the_model_that_setup_had_no_network_not_to_declare_the_runner(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    """Setup without egress left out the runner the project declares: the model was told
    to "declare it in the project's test dependencies" (an edit of the project's packaging
    for what no edit fixes). It is told that setup had no network."""
    setup = {"missing": ["no-such-runner-x"], "note": NO_NETWORK}
    ctx = make_ctx(config={"test_command": f"{PYTHON} -m no_such_runner_x -q"}, setup=setup)
    said = call("run_tests", ctx=ctx).output
    assert said.startswith("tests did NOT run: the test runner no_such_runner_x is not"), said
    assert "the project declares it, but setup had no network" in said
    assert "declare it in the project's test dependencies" not in said


def test_run_tests_tells_a_session_without_environment_to_ask_for_one(
    workspace: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    """cachetools with `--setup none`: the model was told to declare pytest in the project's
    test dependencies, which its tox.ini does; it is told the session has no environment."""
    command = f"{PYTHON} -m no_such_runner_x -q"
    said = call("run_tests", ctx=make_ctx(config={"test_command": command})).output
    assert "the session has no environment (`--setup none`)" in said, said
    assert "declare it in the project's test dependencies" not in said
    built = make_ctx(config={"test_command": command, "environment": {"setup": "auto"}})
    assert "declare it in the project's test dependencies" in call("run_tests", ctx=built).output


def test_run_tests_walks_the_workspace_only_for_a_collection_stop(
    workspace: Path,
    call: Call,
    make_ctx: Callable[..., ToolContext],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every run of the tests walked the whole working copy for the project's own modules
    (and read the settings for the setup's network), which only a pytest run stopped at
    collection for want of a module needs: a passing or failing run does neither."""
    walks: list[Path] = []
    asked_online: list[bool] = []
    real_walk, real_policy = toolkit.own_modules, toolkit.policy_for

    def own_modules(root: Path) -> frozenset[str]:
        walks.append(root)
        return real_walk(root)

    def policy_for(*args: Any, setup: bool = False) -> Any:
        asked_online.extend([True] if setup else [])
        return real_policy(*args, setup=setup)

    monkeypatch.setattr(toolkit, "own_modules", own_modules)
    monkeypatch.setattr(toolkit, "policy_for", policy_for)
    (workspace / "check.py").write_text("import sys\nprint('ran')\nsys.exit(int(sys.argv[1]))\n")
    for code in (0, 1):
        said = call("run_tests", ctx=make_ctx(config={"test_command": f"{PYTHON} check.py {code}"}))
        assert said.output.startswith(("tests passed", "tests FAILED")), said.output
    assert walks == [] and asked_online == []

    stopped = (
        "E   ModuleNotFoundError: No module named 'not_installed_dep'\n"
        "!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!\n1 error in 0.49s\n"
    )
    (workspace / "stopped.txt").write_text(stopped)
    auto = {"test_command": "cat stopped.txt; exit 2", "environment": {"setup": "auto"}}
    said = call("run_tests", ctx=make_ctx(config=auto))
    assert said.output.startswith("tests did NOT run: pytest stopped at collection"), said.output
    assert "'not_installed_dep'" in said.output and "test requirements" in said.output
    assert walks == [workspace] and asked_online == [True]


def test_run_tests_without_a_test_command(workspace: Path, call: Call) -> None:
    result = call("run_tests")
    assert result.is_error
    assert "no test_command configured" in result.output


def test_tools_without_a_workspace(call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    result = call("list_files", ctx=make_ctx(workspace=None))
    assert result.is_error and "no workspace" in result.output
