"""Repair sessions of the release before stored files (a project folder changed in place and
a baseline folder copied at submit, no `config.files`), finished by today's workers: the
patch is the folder against its old baseline, the approval preview diffs against the file
as it is, and a baseline that is not on the host gives a clear note, not a KeyError."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from tickwork.fsm.values import Head, Session, Status
from tickwork.worker.jobs.repair import REPAIR
from tickwork.worker.jobs.repair.job import user_prompt

from tests.tasks.conftest import Deployment
from tickwork.api.sessions import waiting_view
from tickwork.cli_demo import DEMO_SCRIPT, demo_input, prepare_demo_workspace

WRITE = "s3c0"
FIX = "-    return sum(numbers) / (len(numbers) + 1)\n+    return sum(numbers) / len(numbers)\n"


def take_baseline(workspace: Path, dest: Path) -> Path:
    """The baseline that release copied at submit: its text files and a manifest."""
    manifest: dict[str, object] = {"workspace": str(workspace), "exclude": None}
    text, modes = [], {}
    for path in sorted(p for p in workspace.rglob("*") if p.is_file()):
        rel = path.relative_to(workspace).as_posix()
        if "__pycache__" in rel:
            continue
        (dest / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest / "files" / rel)
        text.append(rel)
        modes[rel] = path.stat().st_mode
    manifest.update(text=text, other={}, modes=modes)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def legacy_session(deployment: Deployment, *, baseline_kept: bool = True) -> tuple[str, Path]:
    """A demo session stored as that release stored it, and its first tick published."""
    state = deployment.settings.state_dir
    workspace = prepare_demo_workspace(state)
    data = demo_input(workspace)
    baseline = take_baseline(workspace, state / "baselines" / uuid.uuid4().hex)
    if not baseline_kept:
        shutil.rmtree(baseline)
    now = deployment.client.clock()
    head = Head(
        id=uuid.uuid4().hex,
        kind="repair",
        created_at=now,
        updated_at=now,
        model=f"scripted:{DEMO_SCRIPT}",
        input=data,
        config={
            "system_prompt": REPAIR.system_prompt,
            "user_prompt": user_prompt(str(workspace), data["test_command"], data["goal"]),
            "workspace": str(workspace),
            "test_command": data["test_command"],
            "baseline": str(baseline),
        },
    )
    deployment.client.store.create(Session(head=head), now=now)
    deployment.client.publish(head.id, head.version)
    return head.id, workspace


def test_a_legacy_session_gets_its_patch_from_its_old_baseline(deployment: Deployment) -> None:
    with deployment.worker():
        session_id, workspace = legacy_session(deployment)
        waiting = deployment.client.wait(session_id, timeout=60)
        assert waiting.status is Status.WAITING_APPROVAL, waiting.error_message

        card = waiting_view(deployment.client.load(session_id), deployment.client)
        preview = card["calls"][0]["preview"]
        # against the file as it is in the folder: the one-line fix, not a whole new file
        assert preview["note"] == "against the session's current file"
        assert FIX in preview["diff"]
        assert sum(line.startswith(("-", "+")) for line in preview["diff"].splitlines()) == 4

        deployment.client.approve(session_id, WRITE, approver="alice")
        head = deployment.client.wait(session_id, timeout=60)

    assert head.status is Status.COMPLETED, head.error_message
    assert "patch_error" not in head.result, head.result
    assert FIX in head.result["patch"]
    assert "--- a/calc.py\n+++ b/calc.py\n" in head.result["patch"]
    assert head.result["files_changed"] == ["calc.py"]
    assert head.result["tests"]["passed"] is True
    assert deployment.client.patch(session_id) == head.result["patch"]
    assert "len(numbers) + 1" not in (workspace / "calc.py").read_text()  # changed in place


def test_a_legacy_session_without_its_baseline_says_so(deployment: Deployment) -> None:
    with deployment.worker():
        session_id, _ = legacy_session(deployment, baseline_kept=False)
        assert deployment.client.wait(session_id, timeout=60).status is Status.WAITING_APPROVAL
        deployment.client.approve(session_id, WRITE, approver="alice")
        head = deployment.client.wait(session_id, timeout=60)

    assert head.status is Status.COMPLETED, head.error_message
    assert head.result["patch"] is None
    assert head.result["patch_error"].startswith("legacy session (stored before tickwork 0.1.0")
    assert "is not on this host" in head.result["patch_error"]
    assert head.result["tests"]["passed"] is True
