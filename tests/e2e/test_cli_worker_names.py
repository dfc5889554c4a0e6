"""Two `tickwork worker`s on one host are told apart in `celery inspect`."""

from __future__ import annotations

import socket

import pytest
from tickwork.worker.tick.app import make_app

from tests.e2e.conftest import Cli, Deployment, stop
from tickwork.testing import until


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_two_workers_on_one_host_have_their_own_node_names(
    deployment: Deployment, cli: Cli
) -> None:
    """Both answered `celery -A tickwork inspect` (the runbook's way to see who consumes the
    queue) as celery@HOST; each is `tickwork-<its pid>@HOST` unless given `--hostname`,
    whose `%h` is the host's name (docker-compose.yml's worker and its health check)."""
    args = ("worker", "--pool", "solo", "--no-dead-letters")
    workers = [cli.start(*args)[0], cli.start(*args)[0]]
    named = cli.start(*args, "--hostname", "named@%h")[0]
    app = make_app(deployment.settings, relay=False)
    try:
        answered = until(
            lambda: (
                len(nodes := {n for r in app.control.ping(timeout=1) for n in r}) == 3 and nodes
            ),
            timeout=60,
            what="the three workers to answer a ping",
        )
    finally:
        for worker in (*workers, named):
            stop(worker)
    host = socket.gethostname()
    assert answered == {f"tickwork-{w.pid}@{host}" for w in workers} | {f"named@{host}"}
