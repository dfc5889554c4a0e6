"""`tickwork demo` through its entry point: non-interactive, and driven by keystrokes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from tickwork.store import make_engine, open_store

ROOT = Path(__file__).resolve().parents[2]


def env(state: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    return {
        **clean,
        "PYTHONPATH": str(ROOT),
        "TICKWORK_STATE_DIR": str(state),
        "COLUMNS": "120",
        "TERM": "dumb",
    }


def run_demo(
    tmp_path: Path, *args: str, environ: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`tickwork demo ARGS` run to its end from `tmp_path`, its state in `tmp_path/state`."""
    return subprocess.run(
        [sys.executable, "-m", "tickwork", "demo", *args],
        cwd=tmp_path,
        env=environ or env(tmp_path / "state"),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_demo_yes_repairs_the_example_on_a_fresh_state_folder(tmp_path: Path) -> None:
    done = run_demo(tmp_path, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed" in done.stdout
    assert "+    return sum(numbers) / len(numbers)" in done.stdout
    assert "pass" in done.stdout and "scripted" in done.stdout
    copies = list((tmp_path / "state" / "demo").glob("buggy_calc-*"))
    assert len(copies) == 1
    assert "return sum(numbers) / len(numbers)\n" in (copies[0] / "calc.py").read_text()
    shipped = (ROOT / "examples" / "buggy_calc" / "calc.py").read_text()
    assert "(len(numbers) + 1)" in shipped, "the shipped example must never change"
    # the tests ran in the sandbox (the default): the failures name the working copy's
    # path inside it, not the copy's path on this host
    store = open_store(make_engine(f"sqlite:///{tmp_path / 'state' / 'tickwork.db'}"))
    try:
        (head,) = store.list_sessions(limit=5)
        first_run = store.load(head.id).observations[0].content
    finally:
        store.engine.dispose()
    assert first_run.startswith("tests FAILED") and 'File "/workspace/test_calc.py"' in first_run
    assert str(copies[0]) not in first_run


def spawn(tmp_path: Path) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "tickwork", "demo"],
        cwd=str(tmp_path),
        env=env(tmp_path / "state"),
        encoding="utf-8",
        timeout=120,
        dimensions=(50, 120),
    )
    return child


@pytest.mark.slow
def test_demo_asks_at_the_approval_and_a_reject_reaches_the_model(tmp_path: Path) -> None:
    child = spawn(tmp_path)
    child.expect(r"\[a\]pprove, \[e\]dit or \[r\]eject")
    child.sendline("r")
    child.expect("feedback for the model")
    child.sendline("keep calc.py as it is")
    child.expect("rejected by .*: keep calc.py as it is")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    copy = next((tmp_path / "state" / "demo").glob("buggy_calc-*"))
    assert "(len(numbers) + 1)" in (copy / "calc.py").read_text()


@pytest.mark.slow
def test_enter_at_the_reject_prompt_sends_the_default_it_shows(tmp_path: Path) -> None:
    """The prompt read `feedback for the model (not this way):`, the default Enter sends in
    parentheses, like an aside telling the user what not to do."""
    child = spawn(tmp_path)
    child.expect(r"\[a\]pprove, \[e\]dit or \[r\]eject")
    child.sendline("r")
    child.expect_exact('feedback for the model [default: "not this way"]:')
    child.sendline("")
    child.expect("rejected by .*: not this way")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


@pytest.mark.slow
def test_an_edit_that_keeps_the_arguments_is_recorded_as_an_approval(tmp_path: Path) -> None:
    """`e` then Enter, the arguments unchanged, was recorded as `edit by ...`: nothing was
    edited. It is recorded, and said, as an approval."""
    child = spawn(tmp_path)
    child.expect(r"\[a\]pprove, \[e\]dit or \[r\]eject")
    child.sendline("e")
    child.expect("new arguments")
    child.sendline("")
    child.expect("arguments unchanged: approved")
    child.expect("approve by ")
    child.expect("completed")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    store = open_store(make_engine(f"sqlite:///{tmp_path / 'state' / 'tickwork.db'}"))
    try:
        (head,) = store.list_sessions(limit=5)
        kinds = {d.kind.value for d in store.load(head.id).decisions}
    finally:
        store.engine.dispose()
    assert kinds == {"approve"}, kinds


@pytest.mark.slow
def test_ctrl_c_leaves_the_session_resumable_and_the_next_demo_resumes_it(tmp_path: Path) -> None:
    child = spawn(tmp_path)
    child.expect(r"\[a\]pprove, \[e\]dit or \[r\]eject")
    child.sendintr()
    child.expect("again to resume")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130

    again = spawn(tmp_path)
    again.expect(r"Resume demo session (\w+)")
    again.sendline("y")
    again.expect(r"\[a\]pprove, \[e\]dit or \[r\]eject")
    again.sendline("a")
    again.expect("completed")
    again.expect(pexpect.EOF)
    again.close()
    assert again.exitstatus == 0
    assert len(list((tmp_path / "state" / "demo").glob("buggy_calc-*"))) == 1


@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGHUP], ids=["term", "hangup"])
def test_a_demo_ended_by_a_signal_stops_its_worker(tmp_path: Path, ending: signal.Signals) -> None:
    """SIGTERM, or SIGHUP when its terminal closes, ends the demo as Ctrl-C does: its worker,
    in a process group of its own that neither signal reaches, is stopped with it."""
    child = spawn(tmp_path)
    child.expect(r"\[a\]pprove, \[e\]dit or \[r\]eject")
    workers = _children(child.pid)
    assert workers, "the demo runs a worker of its own"

    os.kill(child.pid, ending)
    child.expect(pexpect.EOF)
    child.close()

    assert child.exitstatus == 130
    alive = [pid for pid in workers if _alive(pid)]
    for pid in alive:
        os.killpg(pid, signal.SIGKILL)  # not left behind by a failing run
    assert not alive, f"the demo's worker {alive} outlived it"


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_demo_with_a_model_it_has_no_key_for_stops_before_making_a_session(
    tmp_path: Path,
) -> None:
    environ = {k: v for k, v in env(tmp_path / "state").items() if not k.startswith("OPENAI_")}
    done = run_demo(tmp_path, "--model", "openai:gpt-4o-mini", "--yes", environ=environ)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "needs an API key" in done.stderr and "OPENAI_API_KEY" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "state" / "demo" / "session").exists()


def test_two_workers_put_the_signal_handlers_back_once_both_stopped() -> None:
    from tickwork.demos import _Endings, _interrupt

    before = signal.getsignal(signal.SIGTERM)
    endings = _Endings()
    endings.worker_started()
    endings.worker_started()
    endings.worker_stopped()
    assert signal.getsignal(signal.SIGTERM) is _interrupt  # the other still runs
    endings.worker_stopped()
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_demo_whose_tests_still_fail_does_not_say_it_completed_alone(tmp_path: Path) -> None:
    """A model that wrote something else: the session completed, its tests fail; the
    demo's closing line said `completed` in green, as for a repair."""
    script = tmp_path / "bad.json"
    script.write_text(
        '{"replies": [{"content": "w", "tool_calls": [{"name": "write_file", "arguments": '
        '{"path": "NOTES.txt", "content": "hm\\n"}}]}, {"content": "all fixed!"}]}'
    )
    done = run_demo(tmp_path, "--yes", "--model", f"scripted:{script}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": completed, but its tests still fail (tests_failing)" in done.stdout, done.stdout
    assert "outcome: tests_failing" in done.stdout


@pytest.mark.parametrize(
    "kind", [(), ("--graph",), ("--agents",)], ids=["repair", "graph", "agents"]
)
def test_a_demo_whose_state_folder_cannot_be_made_says_which_setting_to_change(
    tmp_path: Path, kind: tuple[str, ...]
) -> None:
    """TICKWORK_STATE_DIR under a file: `tickwork submit` said so, naming the setting (exit
    2); the demo said only `No such file or directory` (or `Not a directory`), exit 1."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run_demo(tmp_path, *kind, "--yes", environ=env(blocker / "state"))
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: cannot make the folder "), line
    assert str(blocker / "state") in line and "TICKWORK_STATE_DIR" in line, line


def test_a_failed_demo_does_not_offer_a_patch_it_does_not_have(tmp_path: Path) -> None:
    """A demo session that failed before changing a file closed with "print the patch with
    `tickwork patch ID` or apply it with ...", a command that then says it has none."""
    script = tmp_path / "short.json"
    script.write_text(
        '{"replies": [{"content": "r", "tool_calls": [{"name": "read_file", "arguments": '
        '{"path": "calc.py"}}]}]}'
    )
    done = run_demo(tmp_path, "--yes", "--model", f"scripted:{script}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert ": failed" in done.stdout and "MODEL_ERROR" in done.stdout, done.stdout
    assert "tickwork patch" not in done.stdout, done.stdout
    (session,) = [w for w in done.stdout.split() if len(w) == 32 and w.isalnum()][:1]
    assert f"`tickwork dlq show {session}`" in " ".join(done.stdout.split()), done.stdout
