"""The session state machine: one function per micro-phase (docs/DESIGN.md section 2).

Each function takes the session's head and what happened, and returns a `Change`
(what the store appends and the head it moves to) or a command for the worker
(`CallModel`, `RunTool`). Nothing here does I/O, reads a clock or draws a number.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tickwork.fsm import context, transitions
from tickwork.fsm.approvals import ApprovalRule, approval_reason, check_decision, rejection
from tickwork.fsm.budgets import (
    Exhausted,
    NextCall,
    TenantDay,
    deadline_passed,
    exhausted_budget,
    model_retry_delay,
)
from tickwork.fsm.context import Plan
from tickwork.fsm.deliveries import WAIT_CHILDREN
from tickwork.fsm.errors import CallNotFound, SessionFinished
from tickwork.fsm.fingerprints import call_fingerprint, step_fingerprint
from tickwork.fsm.loops import detect_loop, intervention_text
from tickwork.fsm.outcomes import Outcome
from tickwork.fsm.transitions import Change, StepCharge, in_doubt
from tickwork.fsm.values import (
    CallState,
    Decision,
    DecisionKind,
    ErrorCode,
    Event,
    EventKind,
    Head,
    ModelReply,
    Observation,
    ProposedCall,
    Status,
    Step,
    StepKind,
    ToolCall,
    Usage,
    Value,
    call_id_for,
    provider_call_id,
)

__all__ = [
    "CallModel",
    "Change",
    "Compact",
    "RunTool",
    "StepCharge",
    "arguments_to_run",
    "compacted",
    "context_overflow",
    "decide",
    "environment_failed",
    "environment_ready",
    "environment_wait",
    "fail",
    "ignored_calls",
    "in_doubt",
    "model_failed",
    "needs_environment",
    "next_call",
    "parse_arguments",
    "request_cancel",
    "start_execute",
    "start_think",
    "stopped",
    "think",
    "tool_finished",
]


class CallModel(Value):
    """Call the model with the transcript."""


class Compact(Value):
    """Call the model to summarise the steps up to `through` (docs/DESIGN.md section 14); the
    summary is recorded as a step of its own, and the next tick thinks again."""

    through: int


class RunTool(Value):
    """Run `call` with `arguments`; `rerun` if it had started before and is idempotent."""

    call: ToolCall
    arguments: dict[str, Any]
    rerun: bool = False


def _stepped(head: Head, now: datetime, number: int, reply: ModelReply, cost_usd: float) -> Head:
    """The head after a model call's step `number`: its tokens and cost counted towards
    the budgets, and the call's retries over."""
    return transitions.moved(
        head,
        now,
        step=number,
        tokens=head.tokens + reply.usage.total,
        cost_usd=head.cost_usd + cost_usd,
        model_attempts=0,
    )


def fail(
    head: Head,
    code: ErrorCode,
    message: str,
    *,
    now: datetime,
    open_calls: Sequence[ToolCall] = (),
    decisions: Mapping[str, Decision] | None = None,
    idempotent: bool = False,
) -> Change:
    """End the session as `failed` with `code`; it will be dead-lettered. Its open calls
    are closed as not run, a rejected one with its rejection (`decisions`), one found
    started as `transitions.close_calls` says (`idempotent`: whether it may run twice)."""
    if head.status.terminal:
        raise SessionFinished(f"session {head.id} is already {head.status.value}")
    closed = transitions.close_calls(
        open_calls, "not run: the session failed", now, decisions, idempotent=idempotent
    )
    change = transitions.ended(head, Status.FAILED, now, error_code=code, error_message=message)
    return change.model_copy(update=closed)


def start_think(
    head: Head,
    *,
    now: datetime,
    next_call: NextCall | None = None,
    plan: Plan | None = None,
    day: TenantDay | None = None,
) -> Change | CallModel | Compact:
    """Before the model is called: a requested cancel, or a budget spent or that the next
    call (as the caller estimates it) would pass, ends the session, and so does the tenant's
    day quota (`day`: what it spent of its max_usd_per_day, None: no quota); a prompt that no
    compaction brings under the window fails it (`CONTEXT`); a `plan` that compacts first
    makes this tick a compaction (`tickwork.fsm.context.plan`)."""
    transitions.require(head, Status.READY)
    if head.cancel_requested:
        return transitions.ended(head, Status.CANCELLED, now)
    spent = exhausted_budget(head, now=now, next_call=next_call, day=day)
    if spent is not None:
        return transitions.ended(
            head, Status.FAILED, now, error_code=spent.code, error_message=spent.message
        )
    if plan is not None and plan.too_long is not None:
        return fail(head, ErrorCode.CONTEXT, plan.too_long, now=now)
    if plan is not None and plan.compact_through is not None:
        return Compact(through=plan.compact_through)
    return CallModel()


#: the most names of a compaction's ignored calls its event keeps
IGNORED_NAMES = 20


def ignored_calls(reply: ModelReply) -> list[str]:
    """The names of the tools a compaction's reply called (each once, in order; a name
    clipped to 80 characters): a compaction runs nothing, so they are not run."""
    return list(dict.fromkeys(c.name[:80] for c in reply.calls))[:IGNORED_NAMES]


def compacted(
    head: Head,
    reply: ModelReply,
    *,
    through: int,
    now: datetime,
    cost_usd: float,
    trace_id: str,
    prompt_estimate: int | None = None,
) -> Change:
    """Record a compaction: a step of its own whose thought is the summary of the steps up
    to `through`. It counts as a step (it is a model call) and its tokens and cost count
    towards the budgets; the session thinks again at its next tick. Tool calls the model
    made beside its summary do not run: its `compacted` event names them
    (`ignored_calls`). `prompt_estimate`: its request's estimate, which the next THINK's
    `tickwork.fsm.context.scale` divides the server's count of it by."""
    transitions.require(head, Status.READY)
    number = head.step + 1
    step = Step(
        step=number,
        thought=reply.content,
        usage=reply.usage,
        cost_usd=cost_usd,
        latency_ms=reply.latency_ms,
        model=reply.model or head.model,
        trace_id=trace_id,
        at=now,
        kind=StepKind.COMPACTION,
        masked_through=through,
        compacted_through=through,
        prompt_estimate=prompt_estimate,
    )
    data = {
        "step": number,
        "through": through,
        "model": step.model,
        "latency_ms": reply.latency_ms,
        "prompt_tokens": reply.usage.prompt_tokens,
        "completion_tokens": reply.usage.completion_tokens,
        "cost_usd": cost_usd,
    }
    # as a THINK's `model_called` has them: the cache's tokens, and the cap asked again with
    called = {
        **data,
        "compaction": True,
        "cached_prompt_tokens": reply.usage.cached_prompt_tokens,
        "cache_creation_tokens": reply.usage.cache_creation_tokens,
        **({"cap_lowered_to": reply.cap_lowered_to} if reply.cap_lowered_to else {}),
    }
    ignored = ignored_calls(reply)
    return Change(
        head=_stepped(head, now, number, reply, cost_usd),
        step=step,
        events=(
            Event(kind=EventKind.MODEL_CALLED, at=now, data=called),
            Event(
                kind=EventKind.COMPACTED,
                at=now,
                data={**data, "ignored_calls": ignored} if ignored else data,
            ),
        ),
    )


def context_overflow(
    head: Head, *, error: str, estimate: int, window: int | None, now: datetime
) -> tuple[Change | None, Event]:
    """The model refused a prompt of about `estimate` tokens as longer than its context
    window (`window`: the policy's, None without one): the `context_overflow` event, and
    where the refusal states a window below the policy's, the change that records it on the
    session's card (`tickwork.fsm.context.STATED_WINDOW`), after which every prompt is
    planned under it (the next tick masks or compacts to its target). None: the refusal
    states no smaller window; the caller compacts at once."""
    transitions.require(head, Status.READY)
    stated = context.stated_window(error)
    smaller = window is not None and stated is not None and stated < window
    event = Event(
        kind=EventKind.CONTEXT_OVERFLOW,
        at=now,
        data={
            "step": head.step + 1,
            "prompt_tokens_estimate": estimate,
            "window": window,
            "stated_window": stated,
            "error": transitions.cap_error(error),
        },
    )
    if not smaller:
        return None, event
    result = {**head.result, context.STATED_WINDOW: stated}
    return Change(head=transitions.moved(head, now, result=result), events=(event,)), event


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"{number} is out of range")
    return value


#: a lone surrogate: what a JSON `\\ud800` decodes to, which no UTF-8 text holds
_SURROGATE = re.compile("[\ud800-\udfff]")
#: a JSON escape that may decode to one
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _encodable(value: Any) -> Any:
    """`value` with each lone surrogate in its texts made U+FFFD, as the store keeps them:
    lists and objects are changed in place, without recursion (arguments nest as deep as
    the parser takes)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    todo = [value]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            pairs = [(_SURROGATE.sub("\ufffd", k), v) for k, v in node.items()]
            node.clear()
            node.update(pairs)
            slots: Any = list(node.items())
        elif isinstance(node, list):
            slots = list(enumerate(node))
        else:
            continue
        for slot, item in slots:
            if isinstance(item, str):
                node[slot] = _SURROGATE.sub("\ufffd", item)
            elif isinstance(item, dict | list):
                todo.append(item)
    return value


def parse_arguments(raw: str | dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """(parsed object or None, text as the model wrote it).

    Strict JSON: NaN, Infinity and numbers out of a float's range do not parse, nor does
    nesting too deep for the parser (RecursionError). A lone surrogate (`"\\ud800"`)
    becomes U+FFFD, in the text and in what it parses to.
    """
    if isinstance(raw, dict):
        parsed, _ = parse_arguments(json.dumps(raw))
        return parsed, json.dumps(parsed, ensure_ascii=False)
    text = _SURROGATE.sub("\ufffd", raw)
    try:
        parsed = (
            json.loads(text, parse_constant=_not_json, parse_float=_finite) if text.strip() else {}
        )
    except (ValueError, RecursionError):
        return None, text
    if not isinstance(parsed, dict):
        return None, text
    return (_encodable(parsed) if _SURROGATE_ESCAPE.search(text) else parsed), text


def _provider_ids(calls: Sequence[ProposedCall]) -> list[str | None]:
    """The provider's ids of a reply's calls, to send back with their results: all of them
    when each call has a usable one and none repeats, else none (our own ids go back, and
    no id of ours can then be mistaken for one of theirs)."""
    ids = [provider_call_id(c.id) for c in calls]
    if None in ids or len(set(ids)) < len(ids):
        return [None] * len(calls)
    return ids


def think(
    head: Head,
    reply: ModelReply,
    *,
    now: datetime,
    cost_usd: float,
    trace_id: str,
    recent: Sequence[str],
    rules: Mapping[str, ApprovalRule],
    cut: Exhausted | None = None,
    masked_through: int = 0,
    prompt_estimate: int | None = None,
) -> Change:
    """Record the model's reply as the next step and decide what happens to its calls.

    `recent` holds the fingerprints of the latest steps, oldest first; `rules` maps tool
    names to their approval rules. `cut`: the budget whose completion cap the reply was cut
    at, if it was; the step is recorded and the session fails with that budget's code (a
    cut-off answer is not a final answer, and its calls may be cut off too).
    `masked_through` is the mask the prompt was built with (`tickwork.fsm.context.View.masked`),
    stored on the step so later prompts keep it; `prompt_estimate` is that prompt's estimate,
    stored for `tickwork.fsm.context.scale` (`Step.prompt_estimate`).
    """
    transitions.require(head, Status.READY)
    number = head.step + 1
    limit = head.budgets.max_calls_per_step
    calls = []
    provider_ids = _provider_ids(reply.calls[:limit])
    for index, proposed in enumerate(reply.calls[:limit]):
        arguments, raw = parse_arguments(proposed.arguments)
        name = _encodable(proposed.name)
        shown = arguments if arguments is not None else raw
        reason = approval_reason(rules.get(name), arguments, of=f"tool {name!r}")
        calls.append(
            ToolCall(
                call_id=call_id_for(number, index),
                step=number,
                index=index,
                name=name,
                arguments=arguments,
                raw_arguments=raw,
                fingerprint=call_fingerprint(name, shown),
                needs_approval=reason is not None,
                approval_reason=reason,
                provider_call_id=provider_ids[index],
            )
        )
    fingerprint = step_fingerprint(c.fingerprint for c in calls)
    if calls and all(c.name == WAIT_CHILDREN for c in calls):
        # not a repeat however often the model asks: each wait takes other children's results
        fingerprint = step_fingerprint((fingerprint, str(number)))
    step = Step(
        step=number,
        thought=reply.content,
        calls=tuple(calls),
        usage=reply.usage,
        cost_usd=cost_usd,
        latency_ms=reply.latency_ms,
        fingerprint=fingerprint,
        model=reply.model or head.model,
        trace_id=trace_id,
        at=now,
        masked_through=masked_through,
        prompt_estimate=prompt_estimate,
    )
    head = _stepped(head, now, number, reply, cost_usd)
    events = [
        Event(
            kind=EventKind.MODEL_CALLED,
            at=now,
            data={
                "step": number,
                "model": step.model,
                "latency_ms": reply.latency_ms,
                "prompt_tokens": reply.usage.prompt_tokens,
                "completion_tokens": reply.usage.completion_tokens,
                "cached_prompt_tokens": reply.usage.cached_prompt_tokens,
                "cache_creation_tokens": reply.usage.cache_creation_tokens,
                "cost_usd": cost_usd,
                # the server refused the cap asked for its window: the call was made again
                **({"cap_lowered_to": reply.cap_lowered_to} if reply.cap_lowered_to else {}),
            },
        ),
        Event(
            kind=EventKind.STEP_RECORDED,
            at=now,
            data={
                "step": number,
                "calls": [c.call_id for c in calls],
                "dropped_calls": max(0, len(reply.calls) - limit),
            },
        ),
    ]
    if cut is not None and reply.truncated:
        closed = transitions.close_calls(
            calls, "not run: the model's answer was cut at the budget", now
        )
        ended = transitions.ended(
            head, Status.FAILED, now, events, error_code=cut.code, error_message=cut.message
        )
        return ended.model_copy(update={"step": step, **closed})
    if not calls:
        done = transitions.ended(head, Status.COMPLETED, now, events, final_answer=reply.content)
        return done.model_copy(update={"step": step})

    loop = detect_loop(
        (*recent, fingerprint), max_consecutive_repeats=head.budgets.max_consecutive_repeats
    )
    if loop is not None:
        interventions = head.loop_interventions + 1
        text = intervention_text(loop)
        events.append(
            Event(
                kind=EventKind.LOOP_INTERVENTION,
                at=now,
                data={"step": number, "loop": loop.kind.value, "interventions": interventions},
            )
        )
        blocked = {"step": step, **transitions.close_calls(calls, text, now)}
        if interventions > head.budgets.max_loop_interventions:
            message = (
                f"{loop.kind.value} loop at step {number} after "
                f"{head.loop_interventions} interventions"
            )
            ended = transitions.ended(
                head,
                Status.FAILED,
                now,
                events,
                error_code=ErrorCode.LOOP,
                error_message=message,
                loop_interventions=interventions,
            )
            return ended.model_copy(update=blocked)
        again = transitions.moved(head, now, loop_interventions=interventions)
        return Change(head=again, events=tuple(events), **blocked)

    awaiting = tuple(c.call_id for c in calls if c.needs_approval)
    if awaiting:
        calls = [
            c.model_copy(update={"state": CallState.AWAITING_APPROVAL}) if c.needs_approval else c
            for c in calls
        ]
        step = step.model_copy(update={"calls": tuple(calls)})
        events.append(
            Event(
                kind=EventKind.APPROVAL_REQUESTED,
                at=now,
                data={"step": number, "calls": list(awaiting)},
            )
        )
        return Change(
            head=transitions.moved(head, now, status=Status.WAITING_APPROVAL, awaiting=awaiting),
            step=step,
            events=tuple(events),
        )
    return Change(
        head=transitions.moved(head, now, status=Status.EXECUTING), step=step, events=tuple(events)
    )


def model_failed(
    head: Head,
    *,
    error: str,
    transient: bool,
    now: datetime,
    jitter: float = 0.0,
    retry_after_s: float | None = None,
    usage: Usage | None = None,
    cost_usd: float = 0.0,
) -> Change:
    """A model call failed: retry with backoff while transient and within budget, else fail.

    `usage` and `cost_usd`: what a call that answered, but with nothing the session can use
    (an empty reply or summary), was billed; it counts towards the budgets as every call's
    does (no step records it: the `model_retry` event names it, or the `failed` event of
    the last attempt)."""
    transitions.require(head, Status.READY)
    attempts = head.model_attempts + 1
    billed: dict[str, Any] = {}
    if usage is not None:
        billed = {"tokens": head.tokens + usage.total, "cost_usd": head.cost_usd + cost_usd}
    if transient and attempts <= head.budgets.max_model_retries:
        delay = model_retry_delay(attempts, jitter=jitter)
        if retry_after_s is not None:
            delay = max(delay, retry_after_s)
        # each retry's event keeps the error as a failure keeps it: a server's error body
        # may be any size, and a session retries up to max_model_retries times
        cut = transitions.cap_error(error)
        data: dict[str, Any] = {"attempt": attempts, "delay_s": delay, "error": cut}
        if usage is not None:
            data |= {"tokens": usage.total, "cost_usd": cost_usd}
        event = Event(kind=EventKind.MODEL_RETRY, at=now, data=data)
        return Change(
            head=transitions.moved(head, now, model_attempts=attempts, **billed),
            events=(event,),
            delay_s=delay,
        )
    why = f"after {attempts} attempts: " if transient else "permanent error: "
    ended = transitions.ended(
        head,
        Status.FAILED,
        now,
        error_code=ErrorCode.MODEL_ERROR,
        error_message=why + error,
        model_attempts=attempts,
        **billed,
    )
    if usage is None:
        return ended
    # the last attempt's bill, named by the `failed` event as a retry's by its own
    named = {"tokens": usage.total, "cost_usd": cost_usd}
    events = tuple(
        e.model_copy(update={"data": {**e.data, **named}}) if e.kind is EventKind.FAILED else e
        for e in ended.events
    )
    return ended.model_copy(update={"events": events})


def next_call(calls: Sequence[ToolCall]) -> ToolCall | None:
    """The first call of the step still to execute, in order."""
    return next((c for c in sorted(calls, key=lambda c: c.index) if c.state.open), None)


def stopped(
    head: Head,
    calls: Sequence[ToolCall],
    decisions: Mapping[str, Decision],
    *,
    idempotent: bool,
    now: datetime,
) -> Change | None:
    """What an `executing` tick does before it runs the step's next call (or node): end
    the session cancelled if a cancel was asked for, failed `DEADLINE` if its deadline
    passed, its open calls closed (`transitions.close_calls`: a rejected one with its
    rejection, one found started as not run if `idempotent`); None to go on."""
    if head.cancel_requested:
        return transitions.cancelled(head, calls, now, decisions, idempotent=idempotent)
    if (late := deadline_passed(head, now=now)) is not None:
        return fail(
            head,
            ErrorCode.DEADLINE,
            late,
            now=now,
            open_calls=calls,
            decisions=decisions,
            idempotent=idempotent,
        )
    return None


def start_execute(
    head: Head,
    calls: Sequence[ToolCall],
    decisions: Mapping[str, Decision],
    *,
    idempotent: bool,
    now: datetime,
) -> Change | RunTool:
    """Pick the step's next call and say whether to run it, or what happens instead.

    `idempotent` tells whether that call's tool may run twice (for a call found `started`).
    Past the deadline no call starts (the watch would stop it at once, a quick one only
    after it ran: an approval given late must not run a destructive command); the session
    fails `DEADLINE`, its open calls closed (`transitions.close_calls`: one found started
    reads as not run if `idempotent`).
    """
    transitions.require(head, Status.EXECUTING)
    if (ended := stopped(head, calls, decisions, idempotent=idempotent, now=now)) is not None:
        return ended
    call = next_call(calls)
    if call is None:
        return Change(head=transitions.moved(head, now, status=Status.READY))
    decision = decisions.get(call.call_id)
    if call.state is CallState.STARTED:
        if idempotent:
            return RunTool(call=call, arguments=arguments_to_run(call, decision), rerun=True)
        return in_doubt(head, call, now=now)
    if call.state is CallState.REJECTED:
        assert decision is not None, f"rejected call {call.call_id} has no decision"
        text = rejection(call, decision)
        return tool_finished(head, calls, call, output=text, is_error=True, now=now)
    edited = decision is not None and decision.kind is DecisionKind.EDIT
    if call.arguments is None and not edited:
        what = (
            f"the arguments of {call.name}" if call.name else "your reply named no tool; its text"
        )
        text = (
            f"{what} are not a valid JSON object: "
            f"{call.raw_arguments[:200]!r}; call it again with a JSON object"
        )
        return tool_finished(head, calls, call, output=text, is_error=True, now=now)
    return RunTool(call=call, arguments=arguments_to_run(call, decision))


def arguments_to_run(call: ToolCall, decision: Decision | None) -> dict[str, Any]:
    """The arguments the call runs with: an edit's, or those an approval of an in-doubt
    call carried over from the edit it ran with, else the model's."""
    if (
        decision is not None
        and decision.kind in (DecisionKind.EDIT, DecisionKind.APPROVE)
        and decision.arguments is not None
    ):
        return decision.arguments
    return call.arguments or {}


def _ran_with(call: ToolCall, earlier: Decision | None) -> dict[str, Any] | None:
    """The arguments an in-doubt call last ran with when a person had changed them (None:
    the model's own); a call not in doubt has not run, so nothing is carried."""
    if call.state is not CallState.IN_DOUBT or earlier is None:
        return None
    if earlier.kind in (DecisionKind.EDIT, DecisionKind.APPROVE):
        return earlier.arguments
    return None


def tool_finished(
    head: Head,
    calls: Sequence[ToolCall],
    call: ToolCall,
    *,
    output: str,
    is_error: bool,
    now: datetime,
    duration_ms: float = 0.0,
) -> Change:
    """Record the call's observation; when it was the step's last open call, think again."""
    transitions.require(head, Status.EXECUTING)
    rest = [c for c in calls if c.call_id != call.call_id and c.state.open]
    status = Status.EXECUTING if rest else Status.READY
    return Change(
        head=transitions.moved(head, now, status=status),
        events=(
            transitions.call_finished(
                call, output, is_error=is_error, now=now, duration_ms=duration_ms
            ),
        ),
        **transitions.observed(call, output, is_error=is_error, now=now, duration_ms=duration_ms),
    )


def decide(
    head: Head,
    calls: Sequence[ToolCall],
    decision: Decision,
    existing: Decision | None,
    *,
    now: datetime,
) -> Change:
    """Record a person's decision; the last awaited one makes the session executable. On
    a session that has ended (its deadline passed while it waited, say) nothing is
    recorded: SessionFinished says how it ended and that the decision was not taken."""
    if head.status.terminal:
        raise SessionFinished(_ended_before(head, decision))
    transitions.require(head, Status.WAITING_APPROVAL)
    call = next((c for c in calls if c.call_id == decision.call_id), None)
    if call is None:
        raise CallNotFound(
            f"session {head.id} has no call {decision.call_id} waiting; "
            f"waiting: {', '.join(head.awaiting) or 'none'}"
        )
    state = check_decision(call, decision, existing, session_id=head.id)
    if decision.kind is DecisionKind.APPROVE:
        # running an in-doubt call again runs it as it ran: with an earlier edit's arguments
        decision = decision.model_copy(update={"arguments": _ran_with(call, existing)})
    observations: tuple[Observation, ...] = ()
    if decision.kind is DecisionKind.PROVIDE_OUTPUT:
        observations = (Observation(call_id=call.call_id, content=decision.output, at=now),)
    awaiting = tuple(a for a in head.awaiting if a != call.call_id)
    status = Status.WAITING_APPROVAL if awaiting else Status.EXECUTING
    event = Event(
        kind=EventKind.APPROVAL_DECIDED,
        at=now,
        data={
            "call_id": call.call_id,
            "decision": decision.kind.value,
            "approver": decision.approver,
            "comment": decision.comment,
            # a rejection's reason, which the model reads: "" for other decisions
            "feedback": decision.feedback,
        },
    )
    return Change(
        head=transitions.moved(head, now, status=status, awaiting=awaiting),
        call_states=((call.call_id, state),),
        observations=observations,
        decisions=(decision,),
        events=(event,),
    )


#: what a decision carries besides the verdict, which a refused one leaves unrecorded
_CARRIED = {
    DecisionKind.REJECT: ("rejection", " and its feedback were"),
    DecisionKind.EDIT: ("edit", " and its arguments were"),
    DecisionKind.PROVIDE_OUTPUT: ("output given", " was"),
    DecisionKind.APPROVE: ("approval", " was"),
}


def _ended_before(head: Head, decision: Decision) -> str:
    """Why a decision on an ended session is refused: how the session ended (its error,
    which says how to go on) and that nothing of the decision was recorded."""
    how = head.status.value
    if head.error_code is not None:
        how += f" {head.error_code.value} ({head.error_message})"
    what, were = _CARRIED[decision.kind]
    return (
        f"session {head.id} {how} before this decision: the {what} of call "
        f"{decision.call_id}{were} not recorded; fork it to decide again"
    )


def request_cancel(
    head: Head,
    calls: Sequence[ToolCall],
    *,
    now: datetime,
    by: str = "",
    decisions: Mapping[str, Decision] | None = None,
) -> Change:
    """Cancel a suspended (waiting for a person or for its children) or queued session at
    once, its open calls closed as not run (a rejected one with its rejection, `decisions`
    holding it); a runnable one at its next tick. A session's children are cancelled by
    the store."""
    if head.status.terminal:
        raise SessionFinished(f"session {head.id} is already {head.status.value}")
    requested = Event(kind=EventKind.CANCEL_REQUESTED, at=now, data={"by": by})
    if head.status is Status.QUEUED:  # never started: no calls, no tick to wait for
        return transitions.ended(head, Status.CANCELLED, now, (requested,), cancel_requested=True)
    if head.status in (Status.WAITING_APPROVAL, Status.WAITING_CHILDREN):
        change = transitions.ended(head, Status.CANCELLED, now, (requested,), cancel_requested=True)
        return change.model_copy(
            update=transitions.close_calls(calls, "not run: session cancelled", now, decisions)
        )
    return Change(head=transitions.moved(head, now, cancel_requested=True), events=(requested,))


def needs_environment(head: Head) -> bool:
    """A job that asked for an environment (`config["environment"]`) and has none recorded
    in its result yet: its next THINK tick builds or finds it first (docs/DESIGN.md section 13)."""
    return bool(head.config.get("environment")) and "environment" not in head.result


def environment_ready(head: Head, record: Mapping[str, Any], *, now: datetime) -> Change:
    """The session's environment is built or found: record it on the card (the result);
    the next tick calls the model."""
    transitions.require(head, Status.READY)
    event = Event(
        kind=EventKind.ENVIRONMENT_READY,
        at=now,
        data={"key": record.get("key"), "built": bool(record.get("built"))},
    )
    result = {**head.result, "environment": dict(record)}
    return Change(head=transitions.moved(head, now, result=result), events=(event,))


def environment_wait(head: Head, *, key: str, delay_s: float, now: datetime) -> Change:
    """Another worker builds the environment this session needs: look again in `delay_s`
    (a delayed tick: no worker waits for the build)."""
    transitions.require(head, Status.READY)
    event = Event(kind=EventKind.ENVIRONMENT_WAITING, at=now, data={"key": key, "delay_s": delay_s})
    return Change(head=transitions.moved(head, now), events=(event,), delay_s=delay_s)


def environment_failed(
    head: Head, record: Mapping[str, Any], message: str, *, now: datetime
) -> Change:
    """The environment could not be built: the session fails early with `ENV_SETUP` (not
    as a test failure), the setup's record and output on its card; its outcome says the
    tests were not run."""
    transitions.require(head, Status.READY)
    result = {
        **head.result,
        "environment": dict(record),
        "outcome": Outcome.TESTS_NOT_RUN.value,
    }
    return transitions.ended(
        head,
        Status.FAILED,
        now,
        error_code=ErrorCode.ENV_SETUP,
        error_message=message,
        result=result,
    )
