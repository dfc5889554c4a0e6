"""After a worker is killed with SIGKILL, `tickwork show` names who held the session, and the
relay's log names the sessions it revives and whose lease expired."""

from __future__ import annotations

import logging
import socket

import pytest
from tickwork.worker.tick.app import make_app, runtime
from tickwork.worker.tick.relay import relay_once

from tests.e2e.conftest import Cli, Deployment, call
from tests.tasks.conftest import kill, stop
from tickwork.testing import until


def test_show_names_the_lease_owner_and_the_relay_logs_the_revived_session(
    deployment: Deployment, cli: Cli, caplog: pytest.LogCaptureFixture
) -> None:
    session_id = deployment.submit(
        [
            {
                "content": "act",
                "tool_calls": [call("idem_effect", value="x", sleep_s=60)],
            },
            {"content": "done"},
        ]
    )
    worker = deployment.spawn()
    try:
        until(lambda: deployment.sink_lines("idem.log"), timeout=60, what="the tool to start")
        kill(worker)
    finally:
        stop(worker)

    held = cli.inline("show", session_id, "--json").json()["lease"]
    # the worker as Celery names it (`name@host`, its --hostname), then its process
    node, pid, _ = held["owner"].split(":", 2)
    assert node.endswith(f"@{socket.gethostname()}") and pid == str(worker.pid), held
    assert held["expires_at"]
    assert "lease" in cli.inline("show", session_id).stdout
    expired = until(
        lambda: (
            (lease := cli.inline("show", session_id, "--json").json()["lease"])["expired"] and lease
        ),
        timeout=30,
        what="the dead worker's lease to expire",
    )
    assert expired["owner"] == held["owner"]

    with (
        make_app(deployment.settings, relay=False) as app,
        caplog.at_level(logging.INFO, logger="tickwork.relay"),
    ):
        done = relay_once(runtime(app))

    assert done.lease_expiries == 1
    revived = [r.getMessage() for r in caplog.records if "expired" in r.getMessage()]
    assert len(revived) == 1
    assert session_id in revived[0] and held["owner"] in revived[0]
    assert cli.inline("show", session_id, "--json").json()["lease"] is None
