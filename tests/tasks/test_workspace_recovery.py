"""A repair session's files survive a SIGKILL: each worker has its own cache of working copies
(two hosts share nothing but the store), and the next worker runs on exactly the saved files,
without what the killed call half did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import CallState, Status
from tickwork.worker.sandbox.shell import run_shell

from tests.tasks.conftest import Deployment, kill, stop
from tickwork.patches import apply_patch
from tickwork.testing import until

pytestmark = pytest.mark.slow

KIND = "tests.jobs:FILES"
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = (
    "import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)
TEST_COMMAND = "python3 -m unittest -q"


def _project(tmp: Path) -> Path:
    root = tmp / "project"
    root.mkdir()
    (root / "calc.py").write_text(BUGGY)
    (root / "test_calc.py").write_text(TESTS)
    return root


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"content": f"call {name}", "tool_calls": [{"name": name, "arguments": arguments}]}


def _host(deployment: Deployment, name: str, *, slow: bool = False) -> dict[str, str]:
    env = {"TICKWORK_WORKSPACES_DIR": str(deployment.tmp / name)}
    return {**env, "TICKWORK_TEST_SLOW": "1"} if slow else env


def _copies(deployment: Deployment, host: str, name: str) -> list[Path]:
    return list((deployment.tmp / host).glob(f"sessions/*/files/{name}"))


def _submit(deployment: Deployment, replies: list[dict[str, Any]]) -> tuple[str, Path]:
    project = _project(deployment.tmp)
    head = deployment.client.submit(
        KIND,
        {"workspace": str(project), "test_command": TEST_COMMAND},
        model=deployment.script(replies),
    )
    return head.id, project


def _finished_right(deployment: Deployment, session_id: str, project: Path) -> None:
    head = deployment.client.get(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.result["files_changed"] == ["calc.py"], head.result["patch"]
    assert head.result["tests"]["passed"] is True, head.result["tests"]
    assert (project / "calc.py").read_text() == BUGGY  # the user's directory: never touched
    apply_patch(project, head.result["patch"])
    assert (project / "calc.py").read_text() == FIXED
    assert run_shell(TEST_COMMAND, cwd=project, timeout_s=60).exit_code == 0


@pytest.mark.parametrize("next_host", ["host-a", "host-b"])
def test_killed_during_run_command_its_half_done_effects_are_discarded(
    deployment: Deployment, next_host: str
) -> None:
    replies = [
        _call("run_command", command="printf half >> half.txt; sleep 30", timeout_s=60),
        _call("slow_write", path="calc.py", content=FIXED),
        {"content": "done"},
    ]
    session_id, project = _submit(deployment, replies)
    first = deployment.spawn(env=_host(deployment, "host-a"))
    try:
        until(lambda: _copies(deployment, "host-a", "half.txt"), timeout=60, what="the command")
        kill(first)
    finally:
        stop(first)
    second = deployment.spawn(env=_host(deployment, next_host))
    try:
        # run_command is not idempotent: a person says what happened
        waiting = deployment.client.wait(session_id, timeout=60)
        assert waiting.status is Status.WAITING_APPROVAL
        [call] = [c for c in deployment.client.load(session_id).steps[0].calls]
        assert call.state is CallState.IN_DOUBT
        deployment.client.provide_output(
            session_id, call.call_id, "the worker died; skip it", approver="ops"
        )
        deployment.client.wait(session_id, timeout=60)
    finally:
        stop(second)
    _finished_right(deployment, session_id, project)
    assert "half.txt" not in deployment.client.patch(session_id)
    # the restarted worker of host A rebuilt its dirty copy before the next tool ran
    assert not _copies(deployment, next_host, "half.txt")


def test_killed_during_a_write_the_next_host_writes_it_again_on_the_saved_files(
    deployment: Deployment,
) -> None:
    replies = [
        _call("slow_write", path="calc.py", content=FIXED, sleep_s=30),
        _call("run_tests"),
        {"content": "done"},
    ]
    session_id, project = _submit(deployment, replies)
    first = deployment.spawn(env=_host(deployment, "host-a", slow=True))
    try:
        half = FIXED[: len(FIXED) // 2]
        until(
            lambda: any(p.read_text() == half for p in _copies(deployment, "host-a", "calc.py")),
            timeout=60,
            what="the half-written file",
        )
        kill(first)
    finally:
        stop(first)
    assert deployment.client.store.files_state(session_id) is None  # nothing was saved
    second = deployment.spawn(env=_host(deployment, "host-b"))
    try:
        deployment.client.wait(session_id, timeout=60)
    finally:
        stop(second)
    _finished_right(deployment, session_id, project)
    tests_run = deployment.client.load(session_id).steps[1].calls[0].call_id
    seen = deployment.client.load(session_id).observation(tests_run)
    assert seen is not None and seen.content.startswith("tests passed")


def test_killed_between_ticks_another_host_goes_on_from_the_saved_files(
    deployment: Deployment,
) -> None:
    replies = [
        _call("slow_write", path="calc.py", content=FIXED),
        {**_call("run_tests"), "delay_s": 8},
        {"content": "done"},
    ]
    session_id, project = _submit(deployment, replies)
    first = deployment.spawn(env=_host(deployment, "host-a"))
    try:
        until(
            lambda: deployment.client.store.files_state(session_id),
            timeout=60,
            what="the write to be saved",
        )
        kill(first)
    finally:
        stop(first)
    assert not (deployment.tmp / "host-b").exists()
    second = deployment.spawn(env=_host(deployment, "host-b"))
    try:
        deployment.client.wait(session_id, timeout=60)
    finally:
        stop(second)
    _finished_right(deployment, session_id, project)
