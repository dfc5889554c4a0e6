"""A worker whose TICKWORK_ARTIFACTS_URL names another store than the one a session's files
were stored in (another folder mounted on its host, another prefix) cannot see its files.

Before, it failed every such session INTERNAL (`BlobMissing`) and dead-lettered it, the
files safe in the store the other hosts saw. It refuses the tick now, as a worker that
lacks a job kind does: the session is left as it is for a worker that sees its files, and
only past its deadline does it fail (DEADLINE, naming the blob).
"""

from __future__ import annotations

from typing import Any

import pytest
from tickwork.fsm.values import ErrorCode, EventKind, Status

from tests.tasks.conftest import Deployment, until
from tickwork import views

KIND = "tests.jobs:FILES"
REFUSED = "The tick is refused and the session left as it is for a worker that sees its files"


def _read_calc(deployment: Deployment) -> str:
    project = deployment.tmp / "project"
    project.mkdir(exist_ok=True)
    (project / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    replies: list[dict[str, Any]] = [
        {
            "content": "look",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "calc.py"}}],
        },
        {"content": "done"},
    ]
    name = f"s{len(list(deployment.tmp.glob('s*.json')))}"
    return deployment.client.submit(
        KIND,
        {"workspace": str(project), "test_command": "true"},
        model=deployment.script(replies, name=name),
    ).id


def test_a_worker_that_cannot_see_a_sessions_files_leaves_it_for_one_that_can(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    stored = deployment.settings
    elsewhere = deployment.tmp / "another-mount"
    elsewhere.mkdir()
    apart = stored.model_copy(
        update={
            "artifacts_url": f"file://{elsewhere}",
            "workspaces_dir": deployment.tmp / "host-b",
        }
    )
    session_id = _read_calc(deployment)

    deployment.settings = apart
    with caplog.at_level("ERROR", logger="tickwork.tick"), deployment.worker():
        until(
            lambda: caplog.text.count(REFUSED) >= 2,
            timeout=60,
            what="the refusal, and the relay offering the refused tick again",
        )
    head = deployment.client.get(session_id)
    assert (head.status, head.version, head.step) == (Status.READY, 0, 0), head
    # `show` says why it does not move: the worker that refused it, and why
    whole = deployment.client.load(session_id)
    assert [e.kind for e in whole.events] == [EventKind.CREATED, EventKind.TICK_REFUSED]
    (refusal,) = views.session(whole)["refused"]
    assert refusal["reason"].startswith("this worker does not see its files: "), refusal
    assert deployment.client.dead_letters() == []
    assert f"TICKWORK_ARTIFACTS_URL (here file://{elsewhere})" in caplog.text
    assert "INTERNAL" not in caplog.text

    deployment.settings = stored  # a worker that sees the store the session was stored in
    with deployment.worker():
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED and head.final_answer == "done", head


def test_a_session_no_worker_found_the_files_of_fails_at_its_deadline(
    deployment: Deployment,
) -> None:
    # a tool call waiting to run is past the budget checks of a model call: without this,
    # such a session would be offered again for ever
    stored = deployment.settings
    elsewhere = deployment.tmp / "another-mount"
    elsewhere.mkdir()
    project = deployment.tmp / "project"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    fix = {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}
    replies = [{"content": "fix", "tool_calls": [{"name": "write_file", "arguments": fix}]}]
    session_id = deployment.client.submit(
        KIND,
        {"workspace": str(project), "test_command": "true"},
        model=deployment.script(replies),
        budgets={"deadline_s": 10},
    ).id
    with deployment.worker():
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.WAITING_APPROVAL, head
    deployment.client.approve(session_id, "s1c0", approver="alice")

    # its tick is refused (the files are not here) and offered again until the deadline
    deployment.settings = stored.model_copy(update={"artifacts_url": f"file://{elsewhere}"})
    with deployment.worker():
        until(
            lambda: deployment.client.get(session_id).status.terminal,
            timeout=90,
            what="the deadline",
        )
    head = deployment.client.get(session_id)
    assert head.status is Status.FAILED and head.error_code is ErrorCode.DEADLINE, head
    assert "`deadline_s` is 10" in (head.error_message or "")
    written = deployment.client.load(session_id).observation("s1c0")
    assert written is not None and written.is_error and "not run" in written.content
