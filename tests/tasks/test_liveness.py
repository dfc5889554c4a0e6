"""A worker's sign of life (issue 27): a worker killed with SIGKILL mid-tool has its session
taken over by another worker long before its lease would run out; a stopped one (SIGSTOP)
keeps its session until its lease runs out, and its late save is then refused."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tickwork.fsm.values import CallState, Status

from tests.tasks.conftest import Deployment, kill, owner_pid, stop
from tickwork.testing import until

pytestmark = pytest.mark.slow

#: so long that only the sign of life can explain a takeover before it runs out
LONG_LEASE_S = 60.0


def _one_call_then_done(name: str, sleep_s: float) -> list[dict[str, object]]:
    return [
        {
            "content": "act",
            "tool_calls": [{"name": name, "arguments": {"value": "x", "sleep_s": sleep_s}}],
        },
        {"content": "done"},
    ]


def _expires(deployment: Deployment, session_id: str) -> datetime:
    lease = deployment.client.store.lease(session_id)
    assert lease is not None, "the session holds no lease"
    return lease[1] if lease[1].tzinfo else lease[1].replace(tzinfo=UTC)


def _spawn(deployment: Deployment, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A worker subprocess (`extra`: more of Celery's options) and its log file."""
    before = set(deployment.tmp.glob("worker-*.log"))
    proc = deployment.spawn(*extra)
    (log,) = set(deployment.tmp.glob("worker-*.log")) - before
    return proc, log


@pytest.mark.parametrize("deployment", ["embedded", "production"], indirect=True)
@pytest.mark.parametrize("tool", ["idem_effect", "effect"])
def test_a_killed_workers_session_is_taken_over_long_before_its_lease_runs_out(
    deployment: Deployment, tool: str
) -> None:
    deployment.settings = deployment.settings.model_copy(update={"lease_s": LONG_LEASE_S})
    log = "idem.log" if tool == "idem_effect" else "effect.log"
    # runs until its 60 s timeout: the second worker has that long to start before the kill
    session_id = deployment.submit(_one_call_then_done(tool, sleep_s=150))
    first = deployment.spawn()
    second = None
    try:
        until(lambda: deployment.sink_lines(log), timeout=60, what="the tool to start")
        assert owner_pid(deployment, session_id) == first.pid
        # ready before the kill: its start (slow on a loaded machine) does not count
        # against the killed worker's lease, before whose end the takeover must come
        second, second_log = _spawn(deployment)
        until(lambda: "ready" in second_log.read_text(), timeout=50, what="the second worker")
        kill(first)
        # a dead worker renews nothing: its lease would run out at this time at the latest
        expires = _expires(deployment, session_id)
        left = (expires - datetime.now(UTC)).total_seconds()
        if tool == "idem_effect":
            # run again on the second worker, with the same key
            runs = until(
                lambda: len(deployment.sink_lines(log)) == 2 and deployment.sink_lines(log),
                timeout=left,
                what="the session taken over",
            )
            assert runs[0] == runs[1] == f"{session_id}:1:s1c0 x"
        else:
            # the in-doubt rule holds on a takeover as on an expired lease
            head = until(
                lambda: (
                    (h := deployment.client.get(session_id)).status is Status.WAITING_APPROVAL and h
                ),
                timeout=left,
                what="the in-doubt call",
            )
            assert head.awaiting == ("s1c0",)
            assert deployment.client.load(session_id).call("s1c0").state is CallState.IN_DOUBT
            assert len(deployment.sink_lines(log)) == 1
        # taken over before the killed worker's lease ran out: only its sign explains it
        assert datetime.now(UTC) < expires
    finally:
        stop(first)
        if second is not None:
            kill(second)


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_lease_names_its_worker_as_celery_inspect_does(deployment: Deployment) -> None:
    """An operator matches a lease to a worker by the node name (`--hostname`) that
    `celery inspect` and the worker's log show; its process id keeps it unique."""
    session_id = deployment.submit(_one_call_then_done("idem_effect", sleep_s=60))
    worker, _ = _spawn(deployment, "--hostname", "alpha@%h")
    try:
        until(lambda: deployment.sink_lines("idem.log"), timeout=60, what="the tool to start")
        lease = deployment.client.store.lease(session_id)
        assert lease is not None, "the session holds no lease"
        assert lease[0].startswith(f"alpha@{socket.gethostname()}:{worker.pid}:")
        assert owner_pid(deployment, session_id) == worker.pid
    finally:
        kill(worker)


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_a_stopped_worker_keeps_its_session_until_its_lease_runs_out_and_its_save_is_refused(
    deployment: Deployment,
) -> None:
    lease_s = 10.0
    deployment.settings = deployment.settings.model_copy(update={"lease_s": lease_s})
    session_id = deployment.submit(_one_call_then_done("idem_effect", sleep_s=lease_s + 4))
    first, first_log = _spawn(deployment)
    second = None
    try:
        until(lambda: deployment.sink_lines("idem.log"), timeout=60, what="the tool to start")
        assert owner_pid(deployment, session_id) == first.pid
        second, second_log = _spawn(deployment)
        until(lambda: "ready" in second_log.read_text(), timeout=60, what="the second worker")
        os.kill(first.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        expires = _expires(deployment, session_id)  # a stopped worker renews nothing
        # alive (its connection and sign held) though stopped: the second worker's relay
        # looks every 0.25 s and would take a gone worker's session after 1 s; for 4 s (or
        # until just before the lease runs out) the session stays the stopped worker's
        watched = 0.0
        while time.monotonic() - stopped < 4.0:
            owner = owner_pid(deployment, session_id)
            if datetime.now(UTC) >= expires - timedelta(seconds=0.5):
                break  # read too late to tell a takeover from an expiry
            assert owner == first.pid, "taken over while its worker was alive"
            watched = time.monotonic() - stopped
            time.sleep(0.2)
        assert watched > 2.0, "the machine is too slow for this test's window: nothing shown"
        assert len(deployment.sink_lines("idem.log")) == 1
        # once the lease runs out, the second worker runs the call again
        until(
            lambda: len(deployment.sink_lines("idem.log")) == 2,
            timeout=lease_s + 60,
            what="the session taken over after its lease ran out",
        )
        assert time.monotonic() - stopped > lease_s * 0.5
        os.kill(first.pid, signal.SIGCONT)
        # the first worker wakes, finishes its call and tries to save: refused (fencing)
        until(lambda: "'lost'" in first_log.read_text(), timeout=60, what="the late save")
        done = deployment.client.wait(session_id, timeout=90)
    finally:
        os.kill(first.pid, signal.SIGCONT)
        kill(first)
        if second is not None:
            kill(second)
    assert done.status is Status.COMPLETED
    session = deployment.client.load(session_id)
    observation = session.observation("s1c0")
    assert observation is not None and observation.content == "stored x"
    assert "'saved'" in second_log.read_text()
