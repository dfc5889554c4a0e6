"""Workers killed with SIGKILL mid-tick: sessions go on, nothing runs twice unless allowed."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from tickwork.fsm.values import CallState, Status
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.relay import relay_once
from tickwork.worker.tick.runtime import Runtime, utc_now

from tests.fakes import FakeModel, fake_model_server
from tests.tasks.conftest import Deployment, kill, on_every_broker, stop
from tickwork.testing import until

pytestmark = pytest.mark.slow


@on_every_broker
def test_killed_during_a_model_call_the_model_is_asked_again_only_for_that_step(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies: list[dict[str, object]] = [
        {"content": f"s{i}", "tool_calls": [{"name": "echo", "arguments": {"text": f"t{i}"}}]}
        for i in range(3)
    ]
    replies.append({"content": "done"})
    with fake_model_server(FakeModel(replies, slow={2: 30.0})) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        head = deployment.client.submit("tests.jobs:TEST", {}, model="openai:fake", price=(0, 0))
        first = deployment.spawn()
        try:
            assert fake.arrived[2].wait(60), "the worker never asked for reply 2"
            kill(first)
        finally:
            stop(first)
        second = deployment.spawn()
        try:
            done = deployment.client.wait(head.id, timeout=90)
        finally:
            stop(second)
    assert done.status is Status.COMPLETED
    assert fake.requests == Counter({0: 1, 1: 1, 2: 2, 3: 1})


def _one_call_then_done(name: str) -> list[dict[str, object]]:
    return [
        {
            "content": "act",
            "tool_calls": [{"name": name, "arguments": {"value": "x", "sleep_s": 30}}],
        },
        {"content": "done"},
    ]


@on_every_broker
def test_killed_during_an_idempotent_tool_it_runs_again_with_the_same_key(
    deployment: Deployment,
) -> None:
    session_id = deployment.submit(_one_call_then_done("idem_effect"))
    first = deployment.spawn()
    try:
        until(lambda: deployment.sink_lines("idem.log"), timeout=60, what="the tool to start")
        kill(first)
    finally:
        stop(first)
    # the re-run sleeps 30 s too: let it start, then check the key, then let a worker finish
    second = deployment.spawn()
    try:
        runs = until(
            lambda: (
                len(deployment.sink_lines("idem.log")) == 2 and deployment.sink_lines("idem.log")
            ),
            timeout=60,
            what="the re-run",
        )
    finally:
        kill(second)
    assert runs[0] == runs[1] == f"{session_id}:1:s1c0 x"


@on_every_broker
def test_killed_during_a_non_idempotent_tool_the_call_waits_for_a_person(
    deployment: Deployment,
) -> None:
    session_id = deployment.submit(_one_call_then_done("effect"))
    first = deployment.spawn()
    try:
        until(lambda: deployment.sink_lines("effect.log"), timeout=60, what="the tool to start")
        kill(first)
    finally:
        stop(first)
    second = deployment.spawn()
    try:
        head = until(
            lambda: (
                (h := deployment.client.get(session_id)).status is Status.WAITING_APPROVAL and h
            ),
            timeout=60,
            what="the in-doubt call",
        )
        assert head.awaiting == ("s1c0",)
        assert deployment.client.load(session_id).call("s1c0").state is CallState.IN_DOUBT
        # two relay passes an hour on: the first revives expired leases, the second republishes
        # what that wrote; neither may bring the in-doubt call back
        published: list[tuple[str, int, float]] = []
        rt = Runtime(
            settings=deployment.settings,
            store=deployment.client.store,
            jobs=Jobs(),
            publish_tick=lambda s, v, c: published.append((s, v, c)),
            clock=lambda: utc_now() + timedelta(hours=1),
        )
        relay_once(rt)
        relay_once(rt)
        assert not [p for p in published if p[0] == session_id], "it must never re-run on its own"
        assert deployment.client.get(session_id) == head
        assert len(deployment.sink_lines("effect.log")) == 1
        deployment.client.provide_output(session_id, "s1c0", "it did run", approver="ops")
        done = deployment.client.wait(session_id, timeout=60)
    finally:
        stop(second)
    assert done.status is Status.COMPLETED
    assert len(deployment.sink_lines("effect.log")) == 1
    observation = deployment.client.load(session_id).observation("s1c0")
    assert observation is not None and observation.content == "it did run"
