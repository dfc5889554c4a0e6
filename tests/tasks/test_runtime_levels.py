"""A rolling upgrade's protocol (docs/DESIGN.md section 12): a session that needs a later runtime
level is refused by a worker of this level without being touched, and run whole by a worker of its
level beside it, on one database and queue."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import update
from tickwork.fsm.values import RUNTIME_LEVEL, EventKind, Status
from tickwork.store.schema import sessions

from tests.tasks.conftest import Deployment, stop, until
from tickwork.testing import running_worker


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


def test_a_later_level_is_left_to_a_worker_of_that_level(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="tickwork.tick")
    replies = [
        {"content": f"step {i}", "tool_calls": [call("effect", value=f"v{i}")]} for i in range(3)
    ]
    replies.append({"content": "all done"})
    session_id = deployment.submit(replies)
    engine = deployment.client.store.engine
    later = RUNTIME_LEVEL + 1
    with engine.begin() as conn:  # as a client of the next release would have stored it
        conn.execute(
            update(sessions).where(sessions.c.id == session_id).values(runtime_level=later)
        )

    refusal = f"session {session_id} needs runtime level {later}"

    with deployment.worker():
        # the tick was delivered and refused, offered again by the relay and refused again
        until(
            lambda: caplog.text.count(refusal) >= 2,
            timeout=60,
            what="the relay offering the refused tick again",
        )
        head = deployment.client.get(session_id)
        assert (head.status, head.version, head.step) == (Status.READY, 0, 0)
        assert deployment.client.store.lease(session_id) is None
        assert [e.kind for e in deployment.client.load(session_id).events] == [EventKind.CREATED]

    # this release's worker (a process of its own) and one of the next level, side by side
    current = deployment.spawn()
    try:
        with running_worker(
            deployment.settings, queues=[deployment.settings.queue], runtime_level=later
        ):
            head = deployment.client.wait(session_id, timeout=90)
    finally:
        stop(current)

    assert head.status is Status.COMPLETED, head
    assert head.final_answer == "all done"
    assert head.runtime_level == later
    # every call ran once: nothing was half-run by the worker that refused it
    assert sorted(line.split()[1] for line in deployment.sink_lines("effect.log")) == [
        "v0",
        "v1",
        "v2",
    ]
