"""OpenTelemetry traces of sessions, after the GenAI semantic conventions: a tick observer.

Optional: it needs the `otel` extra (`pip install 'tickwork[otel]'`) and is on when
TICKWORK_OTEL_ENABLED=true, or (unset) when OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; spans go over OTLP/HTTP, configured by the
standard OTEL_* variables. Without the extra tickwork works, untraced.

One trace per session, across ticks, workers and hosts, with nothing stored: the trace id
and the id of the session's `invoke_agent` span are derived from the session's id and
creation time (`trace_ids.session_ids`), so whichever worker runs a tick continues the
same trace. Each tick is a span under the `invoke_agent` span, with a `chat {model}` span
for its model call or an `execute_tool {name}` span for its tool call; the `invoke_agent`
span itself is sent when a tick ends the session (completed, failed, cancelled), spanning
its whole life. Prompts, replies, tool arguments and outputs go in spans only with
TICKWORK_OTEL_CAPTURE_CONTENT=true, masked like stored text.

A tree (docs/DESIGN.md section 16) is one trace, its root's. A child's spans go in the
root's trace; its `invoke_agent` span (still with its own derived id) has as parent, and
links to, the `execute_tool` span of the parent's tick that spawned it. That span's id is
derived too (`trace_ids.spawn_span_id`: of the trace, the parent's id and the spawning
call's id; the saved spawning tick takes it, the tick that later joins the children with
the same call a random one), so a child on any host names its parent span from its own
head. What the head lacks is the root's creation time: each worker reads the root once
and keeps the last `trace_ids.ROOTS_KEPT` roots' trace ids. A read, rather than a trace id
derived from the root's id alone, because an id may be used again once its session is
pruned, and two trees must not share a trace. A child whose root is gone has a trace of
its own.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict
from tickwork.fsm.values import Head, Status, StepKind
from tickwork.worker.config.secrets import Masker
from tickwork.worker.config.settings import read_settings
from tickwork.worker.observers.report import Outcome, TickReport
from tickwork.worker.observers.trace_ids import (
    SessionIds,
    TraceIds,
    TreeTraces,
    spawn_span_id,
)
from tickwork.worker.observers.webhooks import masked_url

log = logging.getLogger("tickwork.tracing")

#: the instrumentation scope of tickwork's spans
SCOPE = "tickwork"
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class TracingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore")

    #: send traces over OTLP (needs the `otel` extra); unset: when an OTLP endpoint is set
    otel_enabled: bool | None = None
    #: put prompts, replies, tool arguments and outputs in spans (masked); off by default
    otel_capture_content: bool = False


def available() -> bool:
    """Whether the `otel` extra is installed."""
    try:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
        )
    except ModuleNotFoundError:
        return False


def enabled(settings: TracingSettings, env: Mapping[str, str] = os.environ) -> bool:
    """Whether the settings ask for traces (the extra aside)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    if settings.otel_enabled is not None:
        return settings.otel_enabled
    return any(env.get(name) for name in ENDPOINTS)


def status(settings: TracingSettings, env: Mapping[str, str] = os.environ) -> str:
    """What `tickwork config` says of tracing: on (where to) or off (and why)."""
    if not enabled(settings, env):
        return (
            "off (set OTEL_EXPORTER_OTLP_ENDPOINT or TICKWORK_OTEL_ENABLED=true, with the "
            "otel extra)"
        )
    if not available():
        return "off (the otel extra is not installed: pip install 'tickwork[otel]')"
    endpoint = next((env[n] for n in ENDPOINTS if env.get(n)), "http://localhost:4318")
    content = "masked content" if settings.otel_capture_content else "no content"
    return f"on: OTLP to {masked_url(endpoint)}, {content}"


def tracer_for(masker: Masker, heads: Callable[[str], Head]) -> SessionTracer | None:
    """A worker's tracer, masking what it captures with `masker` (the runtime's) and reading
    trees' roots with `heads` (the store's `get`); None when tracing is off or the extra is
    missing."""
    settings = read_settings(TracingSettings)
    if not enabled(settings):
        return None
    if not available():
        log.warning(
            "tracing is asked for (TICKWORK_OTEL_ENABLED or OTEL_EXPORTER_OTLP_ENDPOINT) but "
            "the otel extra is not installed: pip install 'tickwork[otel]'; no traces"
        )
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return SessionTracer(
        OTLPSpanExporter(),
        masker=masker,
        heads=heads,
        capture_content=settings.otel_capture_content,
        batch=True,
    )


def _model_name(spec: str) -> str:
    """`gpt-4o` of `openai:gpt-4o`; a script's path is not a model name."""
    kind, sep, rest = spec.partition(":")
    if kind == "react" and sep:
        return _model_name(rest)
    if kind == "scripted":
        return "scripted"
    return rest if sep and rest else spec


def _provider(spec: str) -> str:
    kind, sep, rest = spec.partition(":")
    return _provider(rest) if kind == "react" and sep else kind


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1e9)


class SessionTracer:
    """The tick observer that sends spans; `exporter` is any OpenTelemetry SpanExporter,
    `heads` reads a session's head (the store's `get`: a tree's root, once per root)."""

    def __init__(
        self,
        exporter: Any,
        *,
        masker: Masker,
        heads: Callable[[str], Head],
        capture_content: bool = False,
        batch: bool = True,
    ) -> None:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        self.masker, self.capture_content = masker, capture_content
        self._ids = SessionIds()
        self._trees = TreeTraces(heads)
        named = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "tickwork"}
        self._resource = Resource.create(named)
        # the exporter outlives each provider's shutdown (`_Kept`), so that `start`
        # after `stop` (the app's next worker) sends spans again through it
        self._exporter = _Kept(exporter)
        self._processor = BatchSpanProcessor if batch else SimpleSpanProcessor
        self._stopped = False
        self.provider, self.tracer = self._provided()

    def _provided(self) -> tuple[Any, Any]:
        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider(resource=self._resource, id_generator=self._ids)
        provider.add_span_processor(self._processor(self._exporter))
        return provider, provider.get_tracer(SCOPE)

    def start(self) -> None:
        """Spans are sent by the SDK's processor; after `stop` (a worker's shutdown), a new
        provider and processor for the app's next worker."""
        if self._stopped:
            self.provider, self.tracer = self._provided()
            self._stopped = False

    def stop(self) -> None:
        """Send what is buffered and stop the exporting thread."""
        self._stopped = True
        self.provider.shutdown()

    def flush(self) -> None:
        self.provider.force_flush()

    def __call__(self, report: TickReport) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        head = report.claimed
        if head is None:
            return  # a dropped duplicate: nothing happened to the session
        ids = self._trees.ids(head)
        root = _inside(ids.trace_id, ids.span_id)
        after = report.head
        span = self.tracer.start_span(
            f"tick {report.phase.value}",
            context=root,
            kind=SpanKind.INTERNAL,
            start_time=report.started_ns,
            attributes={
                "gen_ai.conversation.id": head.id,
                "tickwork.session.id": head.id,
                "tickwork.session.kind": head.kind,
                "tickwork.tick.version": report.version,
                "tickwork.tick.phase": report.phase.value,
                "tickwork.tick.outcome": report.outcome.value,
                "tickwork.tick.claim_s": report.claim_s,
                "tickwork.tick.io_s": report.io_s,
                "tickwork.tick.save_s": report.save_s,
                "tickwork.session.status": (after or head).status.value,
            },
        )
        if report.error:
            self._failed(span, report.error)
        inside = trace.set_span_in_context(span)
        if report.model is not None:
            self._chat(report, head, inside)
        if report.tool is not None:
            self._tool(report, head, inside, ids.trace_id)
        span.end(end_time=report.ended_ns)
        if after is not None and after.status.terminal:
            self._session(report, after, ids)

    def _chat(self, report: TickReport, head: Head, context: Any) -> None:
        from opentelemetry.trace import SpanKind

        call = report.model
        assert call is not None
        name = _model_name(call.spec)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": _provider(call.spec),
            "gen_ai.request.model": name,
            "gen_ai.conversation.id": head.id,
            "gen_ai.usage.input_tokens": call.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": call.usage.completion_tokens,
            # part of input_tokens, as the GenAI conventions count them
            "gen_ai.usage.cache_read.input_tokens": call.usage.cached_prompt_tokens,
            "gen_ai.usage.cache_creation.input_tokens": call.usage.cache_creation_tokens,
            "tickwork.model.outcome": call.outcome,
            "tickwork.model.cost_usd": call.cost_usd,
        }
        if call.response_model:
            attributes["gen_ai.response.model"] = call.response_model
        if call.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = call.max_tokens
        compaction = report.change.step if report.change is not None else None
        if compaction is not None and compaction.kind is StepKind.COMPACTION:
            attributes["tickwork.context.compacted_through"] = compaction.compacted_through
        if self.capture_content:
            attributes["gen_ai.input.messages"] = self._shown(list(call.messages))
            step = report.change.step if report.change is not None else None
            if step is not None:
                attributes["gen_ai.output.messages"] = self._shown(
                    [
                        {
                            "role": "assistant",
                            "content": step.thought,
                            "tool_calls": [
                                {"id": c.call_id, "name": c.name, "arguments": c.arguments}
                                for c in step.calls
                            ],
                        }
                    ]
                )
        span = self.tracer.start_span(
            f"chat {name}",
            context=context,
            kind=SpanKind.CLIENT,
            start_time=call.started_ns,
            attributes=attributes,
        )
        if call.outcome != "ok":
            self._failed(span, call.error or call.outcome)
        span.end(end_time=call.ended_ns)

    def _tool(self, report: TickReport, head: Head, context: Any, trace_id: int) -> None:
        from opentelemetry.trace import SpanKind

        run = report.tool
        assert run is not None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": run.name,
            "gen_ai.tool.call.id": run.call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": head.id,
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = self._shown(run.arguments)
            change = report.change
            found = [o for o in (change.observations if change else ()) if o.call_id == run.call_id]
            if found:
                attributes["gen_ai.tool.call.result"] = self.masker.text(found[0].content)
        change = report.change
        spawned = report.outcome is Outcome.SAVED and change is not None and bool(change.children)
        # the saved tick that spawned children: the span id they derive as their parent's
        given = spawn_span_id(trace_id, head.id, run.call_id) if spawned else None
        with self._ids.given(given):
            span = self.tracer.start_span(
                f"execute_tool {run.name}",
                context=context,
                kind=SpanKind.INTERNAL,
                start_time=run.started_ns,
                attributes=attributes,
            )
        if run.is_error:
            self._failed(span, "tool_error")
        span.end(end_time=run.ended_ns)

    def _session(self, report: TickReport, head: Head, ids: TraceIds) -> None:
        from opentelemetry.trace import Link, SpanKind

        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": head.kind,
            "gen_ai.agent.id": head.id,
            "gen_ai.conversation.id": head.id,
            "gen_ai.provider.name": _provider(head.model),
            "gen_ai.request.model": _model_name(head.model),
            "tickwork.session.status": head.status.value,
            "tickwork.session.steps": head.step,
            "tickwork.session.tokens": head.tokens,
            "tickwork.session.cost_usd": head.cost_usd,
        }
        if head.parent_id:
            attributes["tickwork.session.parent_id"] = head.parent_id
        if head.root_id:
            attributes["tickwork.session.root_id"] = head.root_id
            attributes["tickwork.session.role"] = head.role
        if head.spawn_call:
            attributes["tickwork.session.spawn_call"] = head.spawn_call
        links: list[Link] = []
        if ids.spawned_by is None:  # a trace's root span, with the session's own ids
            context, trace_given = _empty_context(), ids.trace_id
        else:  # a child: under the span that spawned it, in its root's trace
            context, trace_given = _inside(ids.trace_id, ids.spawned_by), None
            spawning = _context_of(ids.trace_id, ids.spawned_by)
            links.append(Link(spawning, {"tickwork.link": "spawned_by"}))
        with self._ids.given(ids.span_id, trace_id=trace_given):
            span = self.tracer.start_span(
                f"invoke_agent {head.kind}",
                context=context,
                kind=SpanKind.INTERNAL,
                start_time=_ns(head.created_at),
                attributes=attributes,
                links=links,
            )
        if head.status is Status.FAILED:
            self._failed(span, head.error_code or "failed", head.error_message)
        span.end(end_time=report.ended_ns)

    def _failed(self, span: Any, kind: str, message: str = "") -> None:
        from opentelemetry.trace import Status as SpanStatus
        from opentelemetry.trace import StatusCode

        span.set_attribute("error.type", str(kind)[:200])
        span.set_status(SpanStatus(StatusCode.ERROR, self.masker.text(message or kind)[:1000]))

    def _shown(self, value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return self.masker.text(text)


class _Kept:
    """An exporter that a provider's shutdown only flushes: the tracer keeps it for the
    next provider (`SessionTracer.start` after `stop`); an OTLP exporter shut down sends
    nothing more."""

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter

    def export(self, spans: Any) -> Any:
        return self.exporter.export(spans)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self.force_flush()


def _empty_context() -> Any:
    from opentelemetry.context import Context

    return Context()


def _context_of(trace_id: int, span_id: int) -> Any:
    """The context of a span sent elsewhere (another tick, another host)."""
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )


def _inside(trace_id: int, span_id: int) -> Any:
    """A context whose current span is that one: spans started in it are its children."""
    from opentelemetry import trace

    return trace.set_span_in_context(trace.NonRecordingSpan(_context_of(trace_id, span_id)))
