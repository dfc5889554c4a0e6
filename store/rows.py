"""Converting between table rows and fsm values."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from tickwork.fsm.outcomes import outcome_of
from tickwork.fsm.values import (
    Budgets,
    CallState,
    Decision,
    DecisionKind,
    ErrorCode,
    Event,
    EventKind,
    Head,
    Observation,
    Status,
    Step,
    StepKind,
    ToolCall,
    Usage,
)

Row = Mapping[Any, Any]


#: a lone surrogate: how Python holds bytes that are not UTF-8 (a tool's output decoded with
#: `surrogateescape`, a JSON `\\udcff`); no database stores it
_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(value: Any) -> Any:
    """`value` as every backend can store it: Postgres refuses NUL in text and jsonb, and
    NaN or Infinity in jsonb (SQLite takes both; both backends are kept alike); neither
    encodes a lone surrogate. Each such character becomes U+FFFD."""
    kind = type(value)
    if kind is str:  # the common case first, without a copy
        return _text(value)
    if kind is int or kind is bool or value is None:
        return value
    if isinstance(value, str):
        return _text(str.__str__(value))  # a plain str, as a subclass (an enum) holds it
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def _text(value: str) -> str:
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    if not value.isascii() and _SURROGATE.search(value):
        value = _SURROGATE.sub("\ufffd", value)
    return value


def _row(values: dict[str, Any]) -> dict[str, Any]:
    return {name: storable(value) for name, value in values.items()}


#: head columns a save may change; kind, input, config and budgets are fixed at creation
MUTABLE_HEAD = (
    "status",
    "updated_at",
    "step",
    "tokens",
    "cost_usd",
    "loop_interventions",
    "model_attempts",
    "error_code",
    "error_message",
    "final_answer",
    "result",
    "outcome",
    "awaiting",
)


def head_from_row(row: Row) -> Head:
    """The head of a row of ours, built without validating it again (`model_construct`):
    every value the table holds was validated on the way in, and the columns' types give
    each field its type; the budgets, a JSON value, are validated."""
    return Head.model_construct(
        id=row["id"],
        kind=row["kind"],
        status=Status(row["status"]),
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        model=row["model"],
        budgets=Budgets.model_validate(row["budgets"]),
        input=row["input"],
        config=row["config"],
        step=row["step"],
        tokens=row["tokens"],
        cost_usd=row["cost_usd"],
        loop_interventions=row["loop_interventions"],
        model_attempts=row["model_attempts"],
        cancel_requested=row["cancel_requested"],
        error_code=ErrorCode(row["error_code"]) if row["error_code"] else None,
        error_message=row["error_message"],
        final_answer=row["final_answer"],
        result=row["result"],
        parent_id=row["parent_id"],
        fork_step=row["fork_step"],
        root_id=row["root_id"],
        spawn_call=row["spawn_call"],
        role=row["role"],
        awaiting=tuple(row["awaiting"]),
        submitted_by=row["submitted_by"],
        runtime_level=row["runtime_level"],
        tenant=row["tenant"],
        priority=row["priority"],
        concurrency_key=row["concurrency_key"],
        max_per_key=row["max_per_key"],
    )


def head_to_row(head: Head) -> dict[str, Any]:
    return _row(
        {
            "id": head.id,
            "kind": head.kind,
            "version": head.version,
            "created_at": head.created_at,
            "model": head.model,
            "budgets": head.budgets.model_dump(),
            "input": head.input,
            "config": head.config,
            "cancel_requested": head.cancel_requested,
            "parent_id": head.parent_id,
            "fork_step": head.fork_step,
            "root_id": head.root_id,
            "spawn_call": head.spawn_call,
            "role": head.role,
            "submitted_by": head.submitted_by,
            "runtime_level": head.runtime_level,
            "tenant": head.tenant,
            "priority": head.priority,
            "concurrency_key": head.concurrency_key,
            "max_per_key": head.max_per_key,
            "lease_owner": None,
            "lease_expires_at": None,
            **head_changes(head),
        }
    )


def head_changes(head: Head) -> dict[str, Any]:
    return _row(
        {
            "status": head.status.value,
            "updated_at": head.updated_at,
            "step": head.step,
            "tokens": head.tokens,
            "cost_usd": head.cost_usd,
            "loop_interventions": head.loop_interventions,
            "model_attempts": head.model_attempts,
            "error_code": head.error_code.value if head.error_code else None,
            "error_message": head.error_message,
            "final_answer": head.final_answer,
            "result": head.result,
            "outcome": outcome.value if (outcome := outcome_of(head.result)) else None,
            "awaiting": list(head.awaiting),
        }
    )


def step_to_row(session_id: str, step: Step) -> dict[str, Any]:
    return _row(
        {
            "session_id": session_id,
            "step": step.step,
            "thought": step.thought,
            "prompt_tokens": step.usage.prompt_tokens,
            "completion_tokens": step.usage.completion_tokens,
            "cached_prompt_tokens": step.usage.cached_prompt_tokens,
            "cache_creation_tokens": step.usage.cache_creation_tokens,
            "cost_usd": step.cost_usd,
            "latency_ms": step.latency_ms,
            "fingerprint": step.fingerprint,
            "model": step.model[:200],
            "trace_id": step.trace_id,
            "at": step.at,
            "kind": step.kind.value,
            "masked_through": step.masked_through,
            "compacted_through": step.compacted_through,
            "prompt_estimate": step.prompt_estimate,
        }
    )


def step_from_row(row: Row, calls: tuple[ToolCall, ...]) -> Step:
    return Step(
        step=row["step"],
        thought=row["thought"],
        calls=calls,
        usage=Usage(
            prompt_tokens=row["prompt_tokens"],
            completion_tokens=row["completion_tokens"],
            cached_prompt_tokens=row["cached_prompt_tokens"] or 0,
            cache_creation_tokens=row["cache_creation_tokens"] or 0,
        ),
        cost_usd=row["cost_usd"],
        latency_ms=row["latency_ms"],
        fingerprint=row["fingerprint"],
        model=row["model"],
        trace_id=row["trace_id"],
        at=row["at"],
        kind=StepKind(row.get("kind") or StepKind.REPLY),
        masked_through=row.get("masked_through") or 0,
        compacted_through=row.get("compacted_through") or 0,
        prompt_estimate=row.get("prompt_estimate"),
    )


def call_to_row(session_id: str, call: ToolCall) -> dict[str, Any]:
    return _row(
        {
            "session_id": session_id,
            "call_id": call.call_id,
            "step": call.step,
            "index": call.index,
            # a model may name any tool; no real one is longer than 64 (tools.registry)
            "name": call.name[:200],
            "arguments": call.arguments,
            "raw_arguments": call.raw_arguments,
            "fingerprint": call.fingerprint,
            "state": call.state.value,
            "needs_approval": call.needs_approval,
            "started_at": None,
            "provider_call_id": call.provider_call_id,
            "approval_reason": call.approval_reason,
        }
    )


def call_from_row(row: Row) -> ToolCall:
    return ToolCall(
        call_id=row["call_id"],
        step=row["step"],
        index=row["index"],
        name=row["name"],
        arguments=row["arguments"],
        raw_arguments=row["raw_arguments"],
        fingerprint=row["fingerprint"],
        state=CallState(row["state"]),
        needs_approval=row["needs_approval"],
        approval_reason=row["approval_reason"],
        provider_call_id=row["provider_call_id"],
    )


def observation_to_row(session_id: str, o: Observation) -> dict[str, Any]:
    return _row(
        {
            "session_id": session_id,
            "call_id": o.call_id,
            "content": o.content,
            "is_error": o.is_error,
            "at": o.at,
            "duration_ms": o.duration_ms,
        }
    )


def observation_from_row(row: Row) -> Observation:
    return Observation(
        call_id=row["call_id"],
        content=row["content"],
        is_error=row["is_error"],
        at=row["at"],
        duration_ms=row["duration_ms"],
        elided=row.get("elided"),
    )


def decision_to_row(session_id: str, d: Decision) -> dict[str, Any]:
    return _row(
        {
            "session_id": session_id,
            "call_id": d.call_id,
            "attempt": d.attempt,
            "kind": d.kind.value,
            "approver": d.approver,
            "at": d.at,
            "fingerprint": d.fingerprint,
            "comment": d.comment,
            "arguments": d.arguments,
            "feedback": d.feedback,
            "output": d.output,
        }
    )


def decision_from_row(row: Row) -> Decision:
    return Decision(
        call_id=row["call_id"],
        attempt=row["attempt"],
        kind=DecisionKind(row["kind"]),
        approver=row["approver"],
        at=row["at"],
        fingerprint=row["fingerprint"],
        comment=row["comment"],
        arguments=row["arguments"],
        feedback=row["feedback"],
        output=row["output"],
    )


def event_to_row(session_id: str, version: int, e: Event) -> dict[str, Any]:
    return _row(
        {
            "session_id": session_id,
            "version": version,
            "kind": e.kind.value,
            "at": e.at,
            "data": e.data,
        }
    )


def event_from_row(row: Row) -> Event:
    return Event(kind=EventKind(row["kind"]), at=row["at"], data=row["data"])
