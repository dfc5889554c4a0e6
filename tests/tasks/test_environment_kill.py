"""A `celery worker` SIGKILLed while it builds a session's environment: another worker takes
the build over once its lease runs out and does it again, the two never build at once, and
the session goes on (SQLite + filesystem broker, Postgres + Redis)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from tickwork.fsm.values import Status
from tickwork.worker.sandbox.runner import Sandbox, check

from tests.environments.projects import project
from tests.processes import processes_with
from tests.services import IN_CI
from tests.tasks.conftest import Deployment, kill, stop
from tickwork.testing import until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        check(Sandbox()) is not None and not IN_CI,
        reason=f"bubblewrap cannot run here: {check(Sandbox())}",
    ),
]

#: a setup command no other test runs: its processes counted (tests/processes.py)
MARKER = "sleep 4.0421"
FAST = {
    "TICKWORK_ENVIRONMENT_LEASE_S": "2",
    "TICKWORK_ENVIRONMENT_WAIT_S": "0.3",
}


def _builders() -> int:
    """The setups running: this test's, not the other deployment's run by another xdist
    worker at the same time."""
    return len(processes_with(MARKER, exact=True))


def test_a_build_killed_midway_is_taken_over_once(deployment: Deployment, tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    data = {
        "workspace": str(source),
        "test_command": "python -m unittest discover -s tests",
        "setup": [MARKER, "mkdir -p /env/bin && ln -s /usr/bin/python3 /env/bin/python"],
    }
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(_builders())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    first = deployment.spawn(env=FAST)
    second = None
    try:
        sid = deployment.client.submit(
            "repair", data, model=deployment.script([{"content": "done"}])
        ).id
        envs = deployment.client.store.environments
        until(lambda: _builders() == 1, timeout=60, what="the first worker to run the setup")
        kill(first)
        row = envs.find()[0]
        assert row.status.value == "building" and row.attempts == 1
        second = deployment.spawn(env=FAST)
        head = deployment.client.wait(sid, timeout=90)
        assert head.status is Status.COMPLETED, head.error_message
        row = envs.find()[0]
        assert (row.status.value, row.attempts) == ("ready", 2)
        assert head.result["environment"]["key"] == row.key
        # the tests ran with /env's python (and fail: the model fixed nothing)
        assert "FAILED (failures=1)" in head.result["tests"]["output"]
    finally:
        done.set()
        watcher.join()
        for proc in (first, second):
            if proc is not None:
                stop(proc)
    assert max(seen) == 1, "two builds of one key ran at once"
    assert seen.count(1) > 0
