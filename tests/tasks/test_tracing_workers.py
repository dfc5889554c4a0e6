"""Traces from real `celery worker` processes over OTLP: a session whose first worker is
SIGKILLed mid-tool and whose second finishes it is one trace in the collector, and so is a
tree whose sessions two worker processes share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tickwork.fsm.values import Status

from tests.tasks.conftest import Deployment, kill, stop, until

pytest.importorskip("opentelemetry.sdk")
from tickwork.worker.observers.trace_ids import session_ids

from tests.worker.test_tracing import Collector

pytestmark = pytest.mark.slow

REPLIES = [
    {"content": "look", "tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]},
    {
        "content": "act",
        "tool_calls": [{"name": "effect", "arguments": {"value": "x", "sleep_s": 30}}],
    },
    {"content": "done"},
]


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    found = Collector()
    # the spawned workers read these from the environment
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", found.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.delenv("TICKWORK_OTEL_ENABLED", raising=False)
    yield found
    found.close()


def names(collector: Collector) -> list[str]:
    return sorted(s.name for s in collector.spans)


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_session_across_a_killed_worker_is_one_trace(
    deployment: Deployment, collector: Collector
) -> None:
    session_id = deployment.submit(REPLIES)
    first = deployment.spawn()
    try:
        until(lambda: deployment.sink_lines("effect.log"), timeout=60, what="the tool to start")
        # the ticks finished before the kill are sent within the batch delay
        until(lambda: len(names(collector)) >= 6, timeout=20, what="the first worker's spans")
        kill(first)
    finally:
        stop(first)
    # its three finished ticks, and nothing of the tick it died in
    assert names(collector) == [
        "chat scripted",
        "chat scripted",
        "execute_tool echo",
        "tick execute",
        "tick think",
        "tick think",
    ]
    second = deployment.spawn()
    try:
        until(
            lambda: deployment.client.get(session_id).status is Status.WAITING_APPROVAL,
            timeout=60,
            what="the in-doubt call",
        )
        deployment.client.provide_output(session_id, "s2c0", "it did run", approver="ops")
        assert deployment.client.wait(session_id, timeout=60).status is Status.COMPLETED
    finally:
        stop(second)  # a graceful stop sends what is left
    until(lambda: any(n.startswith("invoke_agent") for n in names(collector)), timeout=10)
    head = deployment.client.get(session_id)
    trace_id, root_id = session_ids(head.id, head.created_at)
    assert {int.from_bytes(s.trace_id, "big") for s in collector.spans} == {trace_id}
    found = names(collector)
    assert found.count("invoke_agent tests.jobs:TEST") == 1
    assert found.count("chat scripted") == 3  # every model call, across both workers
    assert found.count("execute_tool echo") == 1
    # think x3, execute: echo, the killed worker's none, the in-doubt wait, the answer
    assert found.count("tick think") == 3 and found.count("tick execute") >= 2
    ticks = [s for s in collector.spans if s.name.startswith("tick")]
    assert all(int.from_bytes(s.parent_span_id, "big") == root_id for s in ticks)


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_tree_run_by_two_worker_processes_is_one_trace(
    deployment: Deployment, collector: Collector
) -> None:
    children = [
        {"role": f"helper{n}", "model": deployment.script([{"content": "seen"}], name=f"c{n}")}
        for n in (0, 1)
    ]
    spawn = {"name": "spawn_agents", "arguments": {"children": children}}
    parent = deployment.client.submit(
        "tests.jobs:TREE",
        {},
        model=deployment.script([{"content": "split", "tool_calls": [spawn]}, {"content": "ok"}]),
    )
    workers = [deployment.spawn(), deployment.spawn()]
    try:
        until(
            lambda: deployment.client.get(parent.id).status is Status.COMPLETED,
            timeout=60,
            what="the tree to finish",
        )
    finally:
        for worker in workers:
            stop(worker)  # a graceful stop sends what is left
    kids = deployment.client.store.children(parent.id)
    trace_id, _ = session_ids(parent.id, parent.created_at)
    assert {int.from_bytes(s.trace_id, "big") for s in collector.spans} == {trace_id}
    agents = [s for s in collector.spans if s.name.startswith("invoke_agent")]
    assert len(agents) == 3
    spawning = min(
        (s for s in collector.spans if s.name == "execute_tool spawn_agents"),
        key=lambda s: s.start_time_unix_nano,
    )
    for kid in kids:
        _, own = session_ids(kid.id, kid.created_at)
        [agent] = [a for a in agents if int.from_bytes(a.span_id, "big") == own]
        assert agent.parent_span_id == spawning.span_id
        assert [link.span_id for link in agent.links] == [spawning.span_id]
