"""A worker cut off from Postgres or from the broker in the middle of a tick.

The cut is a TCP proxy (tests/proxy.py) between that worker and the server that stops
forwarding without closing anything, as a partition does, and later resumes. Another
worker, which reaches everything, runs the session on meanwhile. When the cut worker's
connection comes back, what it does late must not count twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select
from tickwork.fsm.values import EventKind, Status
from tickwork.store.schema import outbox

from tests.proxy import Proxy
from tests.tasks.conftest import Deployment, stop, until

pytestmark = pytest.mark.slow

DEFAULT_PORTS = {"postgresql": 5432, "redis": 6379, "amqp": 5672, "pyamqp": 5672}


def proxy_for(url: str) -> Proxy:
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    return Proxy(parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORTS[scheme])


def outcomes(log: Path) -> list[str]:
    """What each tick of a `celery worker` returned, from its log (`... succeeded in 1.2s:
    'saved'`)."""
    return re.findall(r"tickwork\.tick\[[^\]]+\] succeeded in [\d.]+s: '(\w+)'", log.read_text())


def outbox_rows(d: Deployment, session_id: str) -> list[object]:
    with d.client.store.engine.connect() as conn:
        return list(conn.execute(select(outbox).where(outbox.c.session_id == session_id)))


@pytest.fixture
def cut_off(deployment: Deployment) -> Iterator[Deployment]:
    """The deployment with a short lease: a cut worker's lease expires in 2 s."""
    deployment.settings = deployment.settings.model_copy(update={"lease_s": 2.0})
    yield deployment


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_a_worker_cut_off_from_postgres_mid_tick_has_its_late_save_refused(
    cut_off: Deployment,
) -> None:
    d = cut_off
    session_id = d.submit(
        [
            {
                "content": "act",
                "tool_calls": [{"name": "idem_effect", "arguments": {"value": "x", "sleep_s": 2}}],
            },
            {"content": "done"},
        ]
    )
    with proxy_for(d.settings.db_url) as proxy:
        first = d.spawn(env={"TICKWORK_DATABASE_URL": proxy.url_for(d.settings.db_url)})
        try:
            (log,) = d.tmp.glob("worker-*.log")
            until(lambda: d.sink_lines("idem.log"), timeout=60, what="the tool to start")
            proxy.blackhole()  # mid-call: the lease cannot be renewed, the save cannot land
            with d.worker():
                done = d.client.wait(session_id, timeout=60)
                # the first worker is still stuck in its save, which Postgres has not seen
                assert "lost" not in outcomes(log)
                proxy.resume()
                until(lambda: "lost" in outcomes(log), timeout=30, what="the late save")
        finally:
            stop(first)

    assert done.status is Status.COMPLETED
    assert d.client.get(session_id) == done  # the late save changed nothing
    # the tool ran twice, under one idempotency key: its effect once
    key = f"{session_id}:1:s1c0"
    assert d.sink_lines("idem.log") == [f"{key} x", f"{key} x"]
    session = d.client.load(session_id)
    assert [o.call_id for o in session.observations] == ["s1c0"]
    kinds = [e.kind for e in session.events]
    assert kinds.count(EventKind.TOOL_FINISHED) == 1
    assert kinds.count(EventKind.MODEL_CALLED) == 2


@pytest.mark.parametrize("deployment", ["production", "rabbitmq"], indirect=True)
def test_a_worker_cut_off_from_the_broker_mid_tick_doubles_nothing(cut_off: Deployment) -> None:
    d = cut_off
    session_id = d.submit(
        [
            {
                "content": "act",
                "tool_calls": [{"name": "effect", "arguments": {"value": "x", "sleep_s": 2}}],
            },
            {"content": "again", "tool_calls": [{"name": "effect", "arguments": {"value": "y"}}]},
            {"content": "done"},
        ]
    )
    with proxy_for(d.settings.broker_url) as proxy:
        # the cut worker runs its relay too: it may win the lost tick's outbox row in turn
        # with the healthy worker, and must give it back when it cannot publish it
        first = d.spawn(env={"TICKWORK_BROKER_URL": proxy.url_for(d.settings.broker_url)})
        try:
            (log,) = d.tmp.glob("worker-*.log")
            until(lambda: d.sink_lines("effect.log"), timeout=60, what="the tool to start")
            proxy.blackhole()  # its save lands, its next tick is never published
            with d.worker():
                done = d.client.wait(session_id, timeout=60)
                proxy.resume()  # what it sent meanwhile arrives: a duplicate, dropped
                until(lambda: len(outcomes(log)) >= 2, timeout=30, what="the cut tick to end")
                until(lambda: not outbox_rows(d, session_id), timeout=30, what="the outbox")
        finally:
            stop(first)

    assert done.status is Status.COMPLETED
    assert d.client.get(session_id) == done
    assert outcomes(log)[:2] == ["saved", "saved"]  # the cut tick kept its lease and saved
    # each non-idempotent call ran once; each step was asked of the model once
    assert d.sink_lines("effect.log") == [f"{session_id}:1:s1c0 x", f"{session_id}:2:s2c0 y"]
    session = d.client.load(session_id)
    assert [o.call_id for o in session.observations] == ["s1c0", "s2c0"]
    kinds = [e.kind for e in session.events]
    assert kinds.count(EventKind.MODEL_CALLED) == 3
    assert kinds.count(EventKind.TOOL_FINISHED) == 2
