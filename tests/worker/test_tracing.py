"""OpenTelemetry traces of sessions through the SDK's in-memory exporter: one trace per
session across ticks and workers, GenAI semantic-convention spans, content only when asked
for and masked."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import SessionNotFound
from tickwork.fsm.values import Head, Status
from tickwork.worker.observers.report import TickReport
from tickwork.worker.observers.trace_ids import TreeTraces, session_ids, spawn_span_id
from tickwork.worker.observers.tracing import (
    SessionTracer,
    TracingSettings,
    enabled,
    status,
)
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.relay import relay_once
from tickwork.worker.tick.runtime import Runtime
from tickwork.worker.tick.wiring import install

from tests.worker.ticking import Ticks

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "buggy_calc"
SCRIPT = ROOT / "examples" / "repair_demo.json"


class Killed(BaseException):
    """The worker process dies mid-call (as SIGKILL: nothing after it runs)."""


class Dying:
    def generate(self, *_: Any, **__: Any) -> Any:
        raise Killed


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def traced(rt: Runtime, *, content: bool = True) -> tuple[InMemorySpanExporter, SessionTracer]:
    exporter = InMemorySpanExporter()
    tracer = SessionTracer(
        exporter, masker=rt.masker, heads=rt.store.get, capture_content=content, batch=False
    )
    rt.observers.add(tracer)
    return exporter, tracer


def run(ticks: Ticks, rt: Runtime, session_id: str, heard: list[TickReport]) -> None:
    for _ in range(50):
        head = ticks.store.get(session_id)
        if not head.status.runnable:
            return
        heard.append(advance(rt, session_id, head.version))
    raise AssertionError("the session did not rest")


def test_a_repair_session_run_by_two_workers_one_killed_is_one_trace(
    ticks: Ticks, tmp_path: Path
) -> None:
    workspace = tmp_path / "buggy_calc"
    shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("__pycache__"))
    head = ticks.client.submit(
        "repair",
        {
            "workspace": str(workspace),
            "test_command": "python3 -m unittest -q",
            "goal": "fix the calculator",
        },
        model=f"scripted:{SCRIPT}",
        session_id="repair-traced",
    )
    first, second = ticks.runtime(), ticks.runtime(lambda: datetime.now(UTC) + timedelta(hours=1))
    first_spans, first_tracer = traced(first)
    second_spans, _ = traced(second)
    heard: list[TickReport] = []
    # worker 1: the first step (think, run the tests), then it dies asking for step 2
    for _ in range(2):
        heard.append(advance(first, head.id, ticks.store.get(head.id).version))
    first.observers.remove(first_tracer)  # a killed process sends nothing more
    first._models[head.model] = Dying()  # type: ignore[assignment]
    with pytest.raises(Killed):
        advance(first, head.id, ticks.store.get(head.id).version)
    assert ticks.store.lease(head.id) is not None  # its lease is left behind
    # worker 2, on another host: the relay revives the session when the lease expires
    relay_once(second)
    run(ticks, second, head.id, heard)
    waiting = ticks.store.get(head.id)
    assert waiting.status is Status.WAITING_APPROVAL, waiting.error_message
    ticks.client.approve(head.id, waiting.awaiting[0], approver="alice")
    run(ticks, second, head.id, heard)
    session = ticks.store.load(head.id)
    assert session.head.status is Status.COMPLETED, session.head.error_message

    spans: list[ReadableSpan] = [
        *first_spans.get_finished_spans(),
        *second_spans.get_finished_spans(),
    ]
    assert first_spans.get_finished_spans() and second_spans.get_finished_spans()
    trace_id, root_id = session_ids(head.id, head.created_at)
    assert {s.context.trace_id for s in spans} == {trace_id}  # ONE trace
    by = {"invoke_agent": [], "tick": [], "chat": [], "execute_tool": []}  # type: dict[str, list[ReadableSpan]]
    for span in spans:
        by[span.name.split(" ")[0]].append(span)
    [agent] = by["invoke_agent"]
    assert agent.context.span_id == root_id and agent.parent is None
    assert agent.name == "invoke_agent repair"
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.conversation.id"] == head.id
    assert agent.attributes["tickwork.session.status"] == "completed"
    # every tick the live workers ran, under the session's span
    assert len(by["tick"]) == len([r for r in heard if r.claimed is not None])
    assert all(s.parent is not None and s.parent.span_id == root_id for s in by["tick"])
    ticks_by_id = {s.context.span_id: s for s in by["tick"]}
    # every model call, with its usage, in the tick that made it
    steps = session.steps
    chats = sorted(by["chat"], key=lambda s: s.start_time or 0)
    assert len(chats) == len(steps)
    for span, step in zip(chats, steps, strict=True):
        assert span.name == "chat scripted" and span.parent is not None
        assert ticks_by_id[span.parent.span_id].name == "tick think"
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.request.model"] == "scripted"
        assert span.attributes["gen_ai.usage.input_tokens"] == step.usage.prompt_tokens
        assert span.attributes["gen_ai.usage.output_tokens"] == step.usage.completion_tokens
        cached = span.attributes["gen_ai.usage.cache_read.input_tokens"]
        assert cached == step.usage.cached_prompt_tokens
        assert span.attributes["gen_ai.request.max_tokens"] >= 1
    # every tool call, by its id and name
    calls = {c.call_id: c.name for step in steps for c in step.calls}
    tools = {s.attributes["gen_ai.tool.call.id"]: s for s in by["execute_tool"]}
    assert {k: s.attributes["gen_ai.tool.name"] for k, s in tools.items()} == calls
    for span in tools.values():
        assert span.name == f"execute_tool {span.attributes['gen_ai.tool.name']}"
        assert span.parent is not None
        assert ticks_by_id[span.parent.span_id].name == "tick execute"
        assert "gen_ai.tool.call.result" in span.attributes
    assert span.start_time and span.end_time and span.start_time <= span.end_time


def test_a_tree_is_one_trace_with_each_child_under_the_call_that_spawned_it(
    ticks: Ticks,
) -> None:
    def script(name: str, replies: list[dict[str, Any]]) -> str:
        path = ticks.tmp / f"{name}.json"
        path.write_text(json.dumps(replies))
        return f"scripted:{path}"

    children = [
        {"role": f"helper{n}", "model": script(f"c{n}", [{"content": "seen"}])} for n in (0, 1)
    ]
    spawn = {"name": "spawn_agents", "arguments": {"children": children}}
    parent = ticks.client.submit(
        "tests.jobs:TREE",
        {},
        model=script("parent", [{"content": "split", "tool_calls": [spawn]}, {"content": "ok"}]),
    )
    exporter = InMemorySpanExporter()
    reads: list[str] = []

    def heads(session_id: str) -> Head:
        reads.append(session_id)
        return ticks.store.get(session_id)

    ticks.rt.observers.add(
        SessionTracer(exporter, masker=ticks.rt.masker, heads=heads, batch=False)
    )
    assert ticks.run(parent.id).status is Status.WAITING_CHILDREN
    kids = ticks.store.children(parent.id)
    for kid in kids:
        assert ticks.run(kid.id).status is Status.COMPLETED
    assert ticks.run(parent.id).status is Status.COMPLETED
    assert reads == [parent.id]  # the root is read once, whatever its children's ticks

    spans = exporter.get_finished_spans()
    trace_id, _ = session_ids(parent.id, parent.created_at)
    assert {s.context.trace_id for s in spans} == {trace_id}  # ONE trace for the tree
    agents = {s.attributes["gen_ai.agent.id"]: s for s in spans if s.name.startswith("invoke")}
    ticked = [s for s in spans if s.name.startswith("tick")]
    assert set(agents) == {parent.id, *(k.id for k in kids)}
    assert agents[parent.id].parent is None
    # the spawn call runs twice: the tick that spawned, and the one that joined
    spawning, joining = sorted(
        (s for s in spans if s.name == "execute_tool spawn_agents"),
        key=lambda s: s.start_time or 0,
    )
    assert spawning.context.span_id != joining.context.span_id
    for kid in kids:
        agent = agents[kid.id]
        assert agent.context.span_id == session_ids(kid.id, kid.created_at)[1]
        assert agent.parent is not None and agent.parent.span_id == spawning.context.span_id
        [link] = agent.links
        assert link.context.span_id == spawning.context.span_id
        assert (
            link.context.trace_id == trace_id and link.attributes["tickwork.link"] == "spawned_by"
        )
        assert agent.attributes["tickwork.session.parent_id"] == parent.id
        assert agent.attributes["tickwork.session.root_id"] == parent.id
        assert agent.attributes["tickwork.session.role"] == kid.role
        assert agent.attributes["tickwork.session.spawn_call"] == kid.spawn_call
        # the child's ticks under its own invoke_agent span
        own = [t for t in ticked if t.attributes["tickwork.session.id"] == kid.id]
        assert own and {t.parent and t.parent.span_id for t in own} == {agent.context.span_id}


def test_a_graphs_branches_are_in_its_trace_under_the_node_that_fanned_out(
    ticks: Ticks,
) -> None:
    exporter, _ = traced(ticks.rt, content=False)
    script = ticks.tmp / "graph.json"
    script.write_text(json.dumps([{"content": "-"}]))
    root = ticks.client.submit(
        "tests.graphs:MAP_SUM", {"items": [1, 2, 3]}, model=f"scripted:{script}"
    )
    assert ticks.run(root.id).status is Status.WAITING_CHILDREN
    for branch in ticks.store.children(root.id):
        assert ticks.run(branch.id).status is Status.COMPLETED
    assert ticks.run(root.id).status is Status.COMPLETED
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {session_ids(root.id, root.created_at)[0]}
    named = {s.context.span_id: s.name for s in spans}
    branches = [s for s in spans if s.name.startswith("invoke") and s.parent is not None]
    assert len(branches) == 3
    assert {named.get(s.parent.span_id) for s in branches if s.parent} == {"execute_tool split"}


def test_a_childs_trace_is_its_roots_read_once_and_its_own_when_the_root_is_gone() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    stored = {r: Head(id=r, kind="k", created_at=at, updated_at=at, model="m") for r in "ab"}
    reads: list[str] = []

    def heads(session_id: str) -> Head:
        reads.append(session_id)
        if session_id not in stored:
            raise SessionNotFound(f"no session {session_id!r}")
        return stored[session_id]

    def child(n: int, root: str) -> Head:
        later = at + timedelta(seconds=n)
        lineage = {"root_id": root, "parent_id": root, "spawn_call": "s1c0"}
        return Head(id=f"c{n}", kind="k", created_at=later, updated_at=later, model="m", **lineage)

    trees = TreeTraces(heads, size=1)
    first = trees.ids(child(1, "a"))
    assert first.trace_id == session_ids("a", at)[0]
    assert first.span_id == session_ids("c1", at + timedelta(seconds=1))[1]
    assert first.spawned_by == spawn_span_id(first.trace_id, "a", "s1c0")
    assert trees.ids(child(2, "a")).trace_id == first.trace_id and reads == ["a"]
    trees.ids(child(3, "b"))
    trees.ids(child(4, "a"))
    assert reads == ["a", "b", "a"]  # one root kept
    orphan = trees.ids(child(5, "pruned"))
    assert orphan == (*session_ids("c5", at + timedelta(seconds=5)), None)
    assert trees.ids(stored["a"]) == (*session_ids("a", at), None)  # a root


SECRET = "sk-proj-abcdef1234567890"


def test_contents_only_when_asked_for_and_masked(ticks: Ticks) -> None:
    replies = [
        {"content": "look", "tool_calls": [{"name": "echo", "arguments": {"text": SECRET}}]},
        {"content": "done"},
    ]
    plain, _ = traced(ticks.rt, content=False)
    ticks.run(ticks.submit(replies))
    shown = [dict(s.attributes or {}) for s in plain.get_finished_spans()]
    assert not any(
        k in a for a in shown for k in ("gen_ai.input.messages", "gen_ai.tool.call.arguments")
    )

    other = ticks.runtime()
    captured, _ = traced(other, content=True)
    ticks.run(ticks.submit(replies), other)
    spans = captured.get_finished_spans()
    text = repr([dict(s.attributes or {}) for s in spans])
    assert SECRET not in text
    tool = next(s for s in spans if s.name == "execute_tool echo")
    assert "****" in str(tool.attributes["gen_ai.tool.call.arguments"])
    chat = next(s for s in spans if s.name.startswith("chat"))
    assert "gen_ai.input.messages" in (chat.attributes or {})


def test_a_failed_model_call_is_an_error_span(ticks: Ticks) -> None:
    exporter, _ = traced(ticks.rt)
    ticks.run(ticks.submit([{"error": {"transient": False, "message": "400 no"}}]))
    spans = exporter.get_finished_spans()
    chat = next(s for s in spans if s.name.startswith("chat"))
    assert chat.status.status_code.name == "ERROR"
    assert chat.attributes["tickwork.model.outcome"] == "failed"
    agent = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert agent.attributes["error.type"] == "MODEL_ERROR"


def test_the_ids_of_a_session_are_the_same_everywhere_and_its_own() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert session_ids("a", at) == session_ids("a", at)
    assert session_ids("a", at) != session_ids("b", at)
    assert session_ids("a", at) != session_ids("a", at + timedelta(microseconds=1))
    trace_id, span_id = session_ids("a", at)
    assert 0 < trace_id < 2**128 and 0 < span_id < 2**64


def test_tracing_is_on_with_an_endpoint_or_when_asked_for() -> None:
    off = TracingSettings()
    assert not enabled(off, {})
    assert enabled(off, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert not enabled(
        off, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "true"}
    )
    assert enabled(TracingSettings(otel_enabled=True), {})
    assert not enabled(TracingSettings(otel_enabled=False), {"OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
    assert status(off, {}).startswith("off")
    shown = status(off, {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://u:pw@collector:4318/x"})
    assert shown.startswith("on: OTLP to https://collector:4318/****") and "pw" not in shown


class Collector:
    """An OTLP/HTTP receiver on loopback: keeps the spans of every export it gets."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans: list[Any] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        collector.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@contextmanager
def exporting(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Collector, Runtime, SessionTracer]]:
    """A worker's runtime whose tracer (`install`) exports to a collector on loopback, its
    only OTLP endpoint, until the block ends: the collector, the runtime and its tracer."""
    collector = Collector()
    try:
        for name in ("TICKWORK_OTEL_ENABLED", "TICKWORK_WEBHOOK_URL"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
        rt = ticks.runtime()
        install(rt)
        [tracer] = [b for b in rt.background if isinstance(b, SessionTracer)]
        yield collector, rt, tracer
    finally:
        collector.close()


def test_a_worker_with_an_otlp_endpoint_exports_the_sessions_spans(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    with exporting(ticks, monkeypatch) as (collector, rt, tracer):
        replies = [
            {"content": "look", "tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]},
            {"content": "done"},
        ]
        session_id = ticks.submit(replies)
        assert ticks.run(session_id, rt).status is Status.COMPLETED
        tracer.stop()  # what the worker does at shutdown: the batch goes out
    head = ticks.store.get(session_id)
    trace_id, root_id = session_ids(head.id, head.created_at)
    names = sorted(s.name for s in collector.spans)
    assert names == [
        "chat scripted",
        "chat scripted",
        "execute_tool echo",
        "invoke_agent tests.jobs:TEST",
        "tick execute",
        "tick think",
        "tick think",
    ]
    assert {int.from_bytes(s.trace_id, "big") for s in collector.spans} == {trace_id}
    [agent] = [s for s in collector.spans if s.name.startswith("invoke_agent")]
    assert int.from_bytes(agent.span_id, "big") == root_id


def test_a_tracer_stopped_by_one_worker_sends_the_next_workers_spans(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An app's second worker in one process (an embedder's, a test's): the first worker's
    shutdown shut the tracer's provider and its OTLP exporter down for good, so every span
    of the second worker's sessions was dropped."""
    with exporting(ticks, monkeypatch) as (collector, rt, tracer):
        first = ticks.submit([{"content": "done"}])
        assert ticks.run(first, rt).status is Status.COMPLETED
        tracer.stop()  # the first worker's shutdown
        tracer.start()  # the second worker's start
        second = ticks.submit([{"content": "done"}])
        assert ticks.run(second, rt).status is Status.COMPLETED
        tracer.stop()
    traces = {int.from_bytes(s.trace_id, "big") for s in collector.spans}
    for session_id in (first, second):
        head = ticks.store.get(session_id)
        assert session_ids(head.id, head.created_at)[0] in traces, session_id
    assert not [t for t in threading.enumerate() if t.name == "OtelBatchSpanRecordProcessor"]
