"""Fencing a stopped worker (issue 24): a worker process stopped (SIGSTOP) while its command
runs cannot kill it itself; its watchdog does, before the lease runs out and another worker
may run the same command."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select
from tickwork.fsm.values import Status
from tickwork.store.schema import sessions

from tests.tasks.conftest import Deployment, kill
from tickwork.testing import until

KIND = "tests.jobs:FILES"
BEATING = "while :; do date +%s%N >> beat; sleep 0.05; done"


def _beats(root: Path) -> int:
    return sum(len(p.read_text().split()) for p in root.glob("sessions/*/files/beat"))


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _lease_expires(deployment: Deployment, session_id: str) -> datetime:
    """The session's lease expiry (a read waits for no writer: the stopped worker may hold
    SQLite's write lock)."""
    with deployment.client.store.engine.connect() as conn:
        value = conn.execute(
            select(sessions.c.lease_expires_at).where(sessions.c.id == session_id)
        ).scalar_one()
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@pytest.mark.slow
@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_stopped_workers_command_dies_before_its_lease_runs_out(
    deployment: Deployment,
) -> None:
    project = deployment.tmp / "project"
    project.mkdir()
    (project / "calc.py").write_text("x = 1\n")
    call = {"name": "run_command", "arguments": {"command": BEATING, "timeout_s": 300}}
    session_id = deployment.client.submit(
        KIND,
        {"workspace": str(project), "test_command": "python3 -c pass"},
        model=deployment.script([{"content": "run", "tool_calls": [call]}, {"content": "done"}]),
    ).id
    root = deployment.settings.state_dir / "workspaces"
    worker = deployment.spawn()
    try:
        until(lambda: _beats(root) > 2, timeout=60, what="the command beating")
        os.kill(worker.pid, signal.SIGSTOP)  # the worker alone: its command runs on
        lease_s = deployment.settings.lease_s

        def quiet() -> bool:
            beats = _beats(root)
            time.sleep(0.5)  # ten beats' time
            return _beats(root) == beats

        until(quiet, timeout=lease_s + 10, what="the command killed while its worker stops")
        assert _stopped(worker.pid), "the worker ran again: the test proves nothing"
        # its last beat came before the lease ran out: no other worker could have claimed
        # the session while it still ran
        expires = _lease_expires(deployment, session_id)
        last = max(
            int(b) for p in root.glob("sessions/*/files/beat") for b in p.read_text().split()
        )
        assert last / 1e9 < expires.timestamp()
        assert deployment.client.store.get(session_id).status is Status.EXECUTING
    finally:
        os.kill(worker.pid, signal.SIGCONT)
        kill(worker)
