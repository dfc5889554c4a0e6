"""`tickwork demo` on a machine without bubblewrap (issue 22): its own shipped example, driven
by its scripted model, runs unconfined under a banner that says how to install bubblewrap;
the same demo with another model, and every session a submitter makes, is still refused.

bwrap is hidden by giving the demo (and the worker it starts) a PATH without it: the
sandbox's check looks bwrap up on the PATH, as on a machine that lacks it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tickwork.fsm.errors import InvalidInput, SandboxUnavailable
from tickwork.store import make_engine, open_store
from tickwork.worker.sandbox import runner
from tickwork.worker.sandbox.runner import DEMO_UNCONFINED, Sandbox, run_sandboxed, sandbox_for

from tests.e2e.conftest import Cli, Deployment
from tests.e2e.test_demo import ROOT, env

DEMO_SCRIPT = ROOT / "examples" / "repair_demo.json"


def without_bwrap(tmp_path: Path) -> str:
    """A PATH holding what the demo's commands use (sh and the coreutils it may call), never
    bwrap."""
    found = tmp_path / "bin"
    found.mkdir(exist_ok=True)
    for tool in ("sh", "bash", "cat", "ls", "env", "git"):
        where = shutil.which(tool)
        if where:
            (found / tool).symlink_to(where)
    # the demo's test command says python3: the interpreter itself, not a version manager's
    # shim (which needs more of the PATH than this)
    (found / "python3").symlink_to(Path(sys.base_prefix, "bin", "python3"))
    return str(found)


def demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tickwork", "demo", "--yes", *args],
        cwd=tmp_path,
        env={**env(tmp_path / "state"), "PATH": without_bwrap(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def words(text: str) -> str:
    """The text as one line of words, without the banner's box."""
    return " ".join(re.sub("[\u2500-\u257f]", " ", text).split())


def outcome(state: Path) -> tuple[str, bool]:
    store = open_store(make_engine(f"sqlite:///{state / 'tickwork.db'}"))
    try:
        (head,) = store.list_sessions(limit=1)
        return str(head.result.get("outcome")), head.config.get(DEMO_UNCONFINED) is True
    finally:
        store.engine.dispose()


@pytest.mark.slow
def test_the_demo_runs_its_own_example_unconfined_where_bwrap_is_missing(tmp_path: Path) -> None:
    done = demo(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = words(done.stdout)  # the banner wraps
    assert "NO SANDBOX: bubblewrap (bwrap) is not installed" in out
    assert "UNCONFINED" in out and "apt-get install bubblewrap" in out
    assert "Every other session's commands are refused" in out
    assert "completed" in out and "outcome: repaired" in out
    copy = next((tmp_path / "state" / "demo").glob("buggy_calc-*"))
    assert "return sum(numbers) / len(numbers)\n" in (copy / "calc.py").read_text()
    assert outcome(tmp_path / "state") == ("repaired", True)


@pytest.mark.slow
def test_the_demo_with_another_model_is_refused_like_every_other_session(tmp_path: Path) -> None:
    # the same replies, but named by the user: not the demo's own session, so no exception
    done = demo(tmp_path, "--model", f"scripted:{DEMO_SCRIPT}")
    out = words(done.stdout)
    assert "NO SANDBOX" in out and "will be refused" in out, out
    assert "bubblewrap (bwrap) is not installed" in done.stdout + done.stderr
    assert outcome(tmp_path / "state") == ("tests_not_run", False)


def test_only_the_demos_flag_lets_a_session_run_unconfined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", without_bwrap(tmp_path))
    monkeypatch.setattr(runner, "_working", set())  # forget sandboxes that worked before
    sandbox = Sandbox()
    work = tmp_path / "work"
    work.mkdir()
    assert sandbox_for({}, sandbox) is sandbox
    assert sandbox_for({DEMO_UNCONFINED: "yes"}, sandbox) is sandbox  # only exactly true
    with pytest.raises(SandboxUnavailable, match="bwrap"):
        run_sandboxed("echo hi", workdir=work, timeout_s=10, sandbox=sandbox_for({}, sandbox))
    demo_sandbox = sandbox_for({DEMO_UNCONFINED: True}, sandbox)
    assert demo_sandbox.mode == "none"
    ran = run_sandboxed("echo hi", workdir=work, timeout_s=10, sandbox=demo_sandbox)
    assert (ran.exit_code, ran.stdout) == (0, "hi\n")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap to stay confined")
def test_with_bwrap_the_demos_session_stays_in_the_sandbox() -> None:
    sandbox = Sandbox()
    assert sandbox_for({DEMO_UNCONFINED: True}, sandbox) is sandbox


def test_a_submitter_cannot_set_the_demos_flag(deployment: Deployment, cli: Cli) -> None:
    project = deployment.tmp / "project"
    project.mkdir(exist_ok=True)
    script = deployment.script([{"content": "done"}])
    given = cli.inline(
        "submit", "repair", "--workspace", str(project), "--test-cmd", "true",
        "--input", json.dumps({DEMO_UNCONFINED: True}), "--model", script, ok=False,
    )  # fmt: skip
    given.error(2, "unknown key(s) demo_unconfined")
    with pytest.raises(InvalidInput, match="from outside cannot set"):
        deployment.client.submit(
            "repair",
            {"workspace": str(project), "test_command": "true"},
            model=script,
            trusted=False,
            own_config={DEMO_UNCONFINED: True},
        )
    assert deployment.client.sessions(limit=5) == []
