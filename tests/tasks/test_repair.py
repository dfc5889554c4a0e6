"""The repair demo through real workers: approve the fix and the tests pass, reject it and the
session still ends, with an empty patch. The submitted directory is never changed: the
result is a patch that makes its tests pass once applied."""

from __future__ import annotations

from pathlib import Path

from tickwork.fsm.values import CallState, EventKind, Status
from tickwork.worker.sandbox.shell import run_shell

from tests.tasks.conftest import Deployment
from tickwork.cli_demo import DEMO_SCRIPT, demo_input, prepare_demo_workspace
from tickwork.patches import apply_patch

WRITE = "s3c0"
FIX = "-    return sum(numbers) / (len(numbers) + 1)\n+    return sum(numbers) / len(numbers)\n"


def submit_demo(deployment: Deployment) -> tuple[str, Path]:
    """A demo session on a fresh copy of the example, waiting for its write_file call."""
    state = deployment.settings.state_dir
    workspace = prepare_demo_workspace(state)
    head = deployment.client.submit(
        "repair", demo_input(workspace), model=f"scripted:{DEMO_SCRIPT}"
    )
    assert head.config["source"]["kind"] == "workspace" and "workspace" not in head.config
    waiting = deployment.client.wait(head.id, timeout=60)
    assert waiting.status is Status.WAITING_APPROVAL, waiting.error_message
    assert waiting.awaiting == (WRITE,)
    assert "len(numbers) + 1" in (workspace / "calc.py").read_text()
    return head.id, workspace


def test_the_approved_fix_makes_the_tests_pass(
    deployment: Deployment,
) -> None:
    with deployment.worker():
        session_id, workspace = submit_demo(deployment)
        deployment.client.approve(session_id, WRITE, approver="alice", comment="looks right")
        head = deployment.client.wait(session_id, timeout=60)

    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer and head.final_answer.startswith("Summary")
    assert "len(numbers) + 1" in (workspace / "calc.py").read_text()  # never edited in place
    assert deployment.client.patch(session_id) == head.result["patch"]
    apply_patch(workspace, head.result["patch"])
    rerun = run_shell(head.config["test_command"], cwd=workspace, timeout_s=60)
    assert rerun.exit_code == 0, rerun.describe()
    result = head.result
    assert FIX in result["patch"] and "--- a/calc.py\n+++ b/calc.py\n" in result["patch"]
    assert result["files_changed"] == ["calc.py"]
    assert result["tests"]["passed"] is True and result["tests"]["exit_code"] == 0

    session = deployment.client.load(session_id)
    names = [[c.name for c in step.calls] for step in session.steps]
    assert names == [["run_tests"], ["read_file"], ["write_file"], ["run_tests"], []]
    calls = [c for step in session.steps for c in step.calls]
    assert all(c.state is CallState.DONE for c in calls)
    outputs = [session.observation(c.call_id) for c in calls]
    assert all(o is not None and not o.is_error for o in outputs)
    assert [o.content.split(" (")[0] for o in outputs if o and o.content.startswith("tests")] == [
        "tests FAILED",
        "tests passed",
    ]
    decision = session.decision(WRITE)
    assert decision is not None and decision.approver == "alice"


def test_a_rejected_fix_still_ends_the_session_with_no_patch(
    deployment: Deployment,
) -> None:
    with deployment.worker():
        session_id, workspace = submit_demo(deployment)
        deployment.client.reject(session_id, WRITE, "not today", approver="bob")
        head = deployment.client.wait(session_id, timeout=60)

    assert head.status is Status.COMPLETED, head.error_message
    assert "len(numbers) + 1" in (workspace / "calc.py").read_text()
    assert head.result["patch"] == "" and head.result["files_changed"] == []
    assert head.result["tests"]["passed"] is False

    session = deployment.client.load(session_id)
    assert len(session.steps) == 5
    rejected = session.observation(WRITE)
    assert rejected is not None and rejected.is_error
    assert rejected.content == "rejected by bob: not today"
    last_run = session.observation(session.steps[3].calls[0].call_id)
    assert last_run is not None and last_run.content.startswith("tests FAILED")


def test_a_repair_ends_when_its_final_test_run_does(deployment: Deployment) -> None:
    """The `completed` event and `updated` carried the time the model answered: a final
    test run of minutes (packaging's suite) was invisible, and `watch` said the session
    completed minutes before it did."""
    workspace = prepare_demo_workspace(deployment.settings.state_dir)
    data = {**demo_input(workspace), "test_command": "sleep 2; true"}
    with deployment.worker():
        head = deployment.client.submit(
            "repair", data, model=deployment.script([{"content": "done"}])
        )
        done = deployment.client.wait(head.id, timeout=60)
    assert done.status is Status.COMPLETED, done.error_message
    events = {e.kind: e.at for _, e in deployment.client.store.events_after(head.id)}
    answered, completed = events[EventKind.MODEL_CALLED], events[EventKind.COMPLETED]
    assert (completed - answered).total_seconds() >= 2, (answered, completed)
    assert done.updated_at == completed
