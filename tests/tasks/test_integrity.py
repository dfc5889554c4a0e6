"""Issue 24: a blob that rotted in the artifact store or a worker's cache is never used.

On main a corrupted blob in a `file://` store was served to a new session, which completed
on the bad content, and submitting the same source again did not repair it (a write
skipped a blob that existed). Here a session whose only copy is bad stops with its own
cause, `ARTIFACT_CORRUPT`, dead-lettered; the same source submitted again puts the good
copy back; a bad copy in a worker's cache is fetched again; `tickwork artifacts verify`
lists what is bad.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import ErrorCode, Status
from tickwork.store.files import blob_hash

from tests.tasks.conftest import ROOT, Deployment, _settings
from tickwork.testing import prepare_database

KIND = "tests.jobs:FILES"
GOOD = "def add(a, b):\n    return a + b\n"
ROTTEN = "def add(a, b):\n    return a - b  # rot\n"


@pytest.fixture
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    """The embedded deployment with a `file://` artifact store."""
    settings = _settings(
        "embedded", tmp_path, request, artifacts_url=f"file://{tmp_path / 'blobs'}"
    )
    prepare_database(settings)
    found = Deployment("embedded", settings, tmp_path)
    yield found
    found.close()


def _project(tmp: Path) -> Path:
    root = tmp / "project"
    root.mkdir(exist_ok=True)
    (root / "calc.py").write_text(GOOD)
    return root


def _read_calc(deployment: Deployment) -> str:
    """A session reading calc.py and ending; its id."""
    replies: list[dict[str, Any]] = [
        {
            "content": "look",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "calc.py"}}],
        },
        {"content": "done"},
    ]
    head = deployment.client.submit(
        KIND,
        {"workspace": str(_project(deployment.tmp)), "test_command": "true"},
        model=deployment.script(replies, name=f"s{len(list(deployment.tmp.glob('s*.json')))}"),
    )
    return head.id


def _observed(deployment: Deployment, session_id: str) -> str:
    session = deployment.client.load(session_id)
    return "\n".join(o.content for o in session.observations)


def _verify(deployment: Deployment, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**deployment.env(), "TICKWORK_ARTIFACTS_URL": deployment.settings.artifacts_url}
    return subprocess.run(
        [sys.executable, "-m", "tickwork", "artifacts", "verify", "--json", *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_rotten_blob_in_the_store_stops_the_session_and_the_same_source_repairs_it(
    deployment: Deployment,
) -> None:
    key = blob_hash(GOOD.encode())
    blob = deployment.tmp / "blobs" / key[:2] / key
    first = _read_calc(deployment)
    blob.write_text(ROTTEN)  # after the submit, before any worker read it

    found = _verify(deployment)
    assert found.returncode == 1, found
    assert json.loads(found.stdout)["bad"] == [{"hash": key, "action": "bad"}]

    with deployment.worker():
        head = deployment.client.wait(first, timeout=60)
    assert head.status is Status.FAILED and head.error_code is ErrorCode.ARTIFACT_CORRUPT, head
    assert key in (head.error_message or "")
    assert [d.session_id for d in deployment.client.dead_letters()] == [first]
    assert "rot" not in _observed(deployment, first)

    second = _read_calc(deployment)  # the same source again: its write puts the good copy
    assert blob.read_text() == GOOD
    with deployment.worker():
        head = deployment.client.wait(second, timeout=60)
    assert head.status is Status.COMPLETED, head.error_message
    assert "return a + b" in _observed(deployment, second)
    assert _verify(deployment).returncode == 0


def test_a_rotten_copy_in_a_workers_cache_is_fetched_again(deployment: Deployment) -> None:
    key = blob_hash(GOOD.encode())
    with deployment.worker():
        assert deployment.client.wait(_read_calc(deployment), timeout=60).status.value == (
            "completed"
        )
    cached = deployment.settings.workspaces_path / "objects" / key[:2] / key
    assert cached.read_text() == GOOD
    cached.write_text(ROTTEN)

    with deployment.worker():
        head = deployment.client.wait(later := _read_calc(deployment), timeout=60)
    assert head.status is Status.COMPLETED, head.error_message
    observed = _observed(deployment, later)
    assert "return a + b" in observed and "rot" not in observed
    assert cached.read_text() == GOOD  # replaced by the good copy
