"""The agent loop's tick (docs/DESIGN.md section 2): THINK calls the model, EXECUTE runs
one tool call.

`AgentRunner` is the runner `advance` picks for an agent session
(`tickwork.fsm.kinds.SessionKind.AGENT`); the frame around a tool call is
`tickwork.worker.tick.frame.run_call`, shared with the graph runner.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime
from typing import Any

from tickwork.fsm import budgets, context, machine
from tickwork.fsm.approvals import ApprovalRule, edit_note
from tickwork.fsm.budgets import TenantDay
from tickwork.fsm.deliveries import WAIT_CHILDREN
from tickwork.fsm.errors import (
    ContextTooLong,
    InvalidToolArguments,
    MissingCredentials,
    ModelError,
    TreeFull,
)
from tickwork.fsm.machine import Change, Compact, RunTool
from tickwork.fsm.trees import SPAWN_AGENTS
from tickwork.fsm.values import (
    ErrorCode,
    Event,
    EventKind,
    Head,
    ModelReply,
    Status,
    StepKind,
    idempotency_key,
)
from tickwork.worker.files.workspaces import READ_ONLY_TOOLS, written_paths
from tickwork.worker.jobs.kinds import Ending
from tickwork.worker.models import ModelSettings, pricing
from tickwork.worker.models.base import estimate_prompt as estimate
from tickwork.worker.models.base import estimate_schemas
from tickwork.worker.models.pricing import Price
from tickwork.worker.observers.report import ModelCall, Phase, TickReport
from tickwork.worker.sandbox.runner import sandbox_of
from tickwork.worker.tick.frame import Stop, Tick, run_call, tool_run
from tickwork.worker.tick.runtime import Runtime
from tickwork.worker.tick.trees import spawn_or_join, tree_full, wait_children
from tickwork.worker.tools.registry import (
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    child_results,
    run_tool,
)

__all__ = ["RECALL_SCHEMA", "AgentRunner", "execute", "recall", "schemas_for", "think"]

log = logging.getLogger("tickwork.tick")


def think(tick: Tick) -> Change:
    """THINK: call the model with the transcript (or compact it first) and record its step."""
    rt, claimed, report = tick.rt, tick.claimed, tick.report
    head = claimed.head
    tools = rt.jobs.tools(head.kind)
    schemas = schemas_for(tools, head)
    schema_tokens = estimate_schemas(schemas)
    # the server's tokenizer, as its count of the last prompt shows, not four characters a token
    by = context.scale(
        head, claimed.steps, claimed.observations, estimate=estimate, tools=schema_tokens
    )
    # the view the stored steps were made under: the plan starts from it, and the last
    # reply's usage bounds the next call's only while the prompt is still under it
    stored = context.stored_view(claimed.steps)
    prompt = context.plan(
        head,
        claimed.steps,
        claimed.observations,
        estimate=estimate,
        tools=schema_tokens,
        by=by,
        stored=stored,
    )
    messages = prompt.messages
    last = claimed.steps[-1] if claimed.steps else None
    policy = context.policy_for(head)
    # found once a THINK: for the budgets' check before the call and the bill after it
    price = pricing.session_price(
        head.model, head.config, rt.settings.prices, providers=rt.providers
    )
    ahead = pricing.next_call(
        messages,
        # what the last call read is a floor only while the prompt is the one it grew from
        # (a compaction read the whole transcript its summary now stands for)
        # (and another model's count is not this one's: a fork onto it, `model_since`)
        last=last.usage
        if last is not None
        and last.kind is StepKind.REPLY
        and prompt.view == stored
        and last.step > context.model_since(head)
        else None,
        price=price,
        window=None if policy is None else policy.window,
        tools=schemas,
        scale=by,
        # the plan's estimate of the prompt, not made again: the messages' and the schemas'
        tokens=prompt.unscaled - schema_tokens,
        schema_tokens=schema_tokens,
    )
    # the tenant's day quota bounds every session's spending, whatever its own budget
    day = rt.tenant_day(head)
    before = machine.start_think(head, now=rt.clock(), next_call=ahead, plan=prompt, day=day)
    if isinstance(before, Change):
        return before
    if machine.needs_environment(head):
        # built (or waited for) in a tick of its own; found ready, it is recorded and the
        # model is called in this same tick
        found = tick.files.prepare(head)
        if isinstance(found, Change):
            return found
        head = found
    # the budget is a bound, not an estimate: the call may write no more than what is left
    cap = budgets.completion_cap(head, ahead, day)
    try:
        model = rt.model(head.model)
    except MissingCredentials as exc:
        # this worker lacks the model's API key: retried as a failed call is, where another
        # worker of the fleet may hold it; past the retries the session fails MODEL_ERROR
        # with this message. (Another model it cannot make, say its script gone, is a
        # broken configuration: INTERNAL, as `advance` fails it.)
        log.error("session %s: this worker cannot call its model: %s", head.id, exc)
        return machine.model_failed(
            head,
            error=f"this worker cannot call the model: {exc}",
            transient=True,
            now=rt.clock(),
            jitter=rt.jitter(),
        )
    if isinstance(before, Compact):
        return _compact(rt, head, prompt, schemas, report, cap.tokens, price)
    job = rt.jobs.get(head.kind)
    asked = time.time_ns()
    try:
        reply = model.generate(
            messages,
            schemas,
            ModelSettings(timeout_s=rt.settings.model_timeout_s, max_tokens=cap.tokens),
        )
    except ContextTooLong as exc:
        return _overflow(
            tick, prompt, exc, schemas, asked, tools=schema_tokens, by=by, price=price, day=day
        )
    except ModelError as exc:
        return _model_error(rt, head, exc, asked, messages, report)
    except Exception as exc:
        report.model = ModelCall(
            spec=head.model,
            started_ns=asked,
            ended_ns=time.time_ns(),
            outcome="failed",
            error=f"{type(exc).__name__}: {exc}",
            messages=tuple(messages),
        )
        raise
    cut = (
        budgets.cut_at(cap, ahead, lowered=reply.cap_lowered, day=day, now=rt.clock())
        if reply.truncated
        else None
    )
    if not reply.calls and not reply.content.strip() and cut is None:
        # no answer and nothing to do: a glitch of the server, not the session's answer
        # (unless the budget's cap cut it, e.g. while a reasoning model was still thinking:
        # then it is billed, recorded and ends the session)
        why = "the model returned an empty reply (no content and no tool calls)"
        return _billed_retry(rt, head, reply, why, asked, messages, report, price)
    answered = time.time_ns()
    cost = _cost(rt, head, reply, price)
    change = machine.think(
        head,
        reply,
        now=rt.clock(),
        cost_usd=cost,
        trace_id=uuid.uuid4().hex,
        recent=claimed.recent,
        rules=rules_for(tools, head),
        cut=cut,
        masked_through=prompt.view.masked,
        # unscaled, as sent: what the next THINK's `context.scale` divides the usage by
        prompt_estimate=prompt.unscaled,
    )
    if reply.stated_window is not None and policy is not None:
        change = _learned(change, reply.stated_window, policy.window)
    report.model = ModelCall(
        spec=head.model,
        started_ns=asked,
        ended_ns=answered,
        outcome="ok",
        response_model=reply.model or "",
        usage=reply.usage,
        cost_usd=cost,
        messages=tuple(messages),
        # the cap sent: lowered to the room the server said the prompt left, if it refused
        max_tokens=reply.cap_lowered_to or cap.tokens,
    )
    if change.head.status is Status.COMPLETED:
        result = job.completed(
            change.head, Ending(files=tick.files, history=lambda: rt.store.load(head.id))
        )
        # it ended when its final test run did (minutes after the answer, for a large
        # suite), not when the model answered: the `completed` event and `updated` say so
        ended = rt.clock()
        done = {"result": {**change.head.result, **result}, "updated_at": ended}
        change = change.model_copy(
            update={
                "head": change.head.model_copy(update=done),
                "events": _with_outcome(change.events, result, at=ended),
            }
        )
    return change


def _overflow(
    tick: Tick,
    prompt: context.Plan,
    exc: ContextTooLong,
    schemas: list[dict[str, Any]],
    asked: int,
    *,
    tools: int,
    by: float,
    price: Price | None,
    day: TenantDay | None,
) -> Change:
    """The model refused the prompt as longer than its window: a `context_overflow` event
    and a warning naming the windows. Where the refusal states a window below the
    session's, the session goes on under it (the next tick masks or compacts to its
    target, instead of compacting a step or two at each refusal); else it compacts at
    once, and the next tick tries again with the shorter transcript. `tools` and `by`: the
    schemas' tokens and the scale `think` planned the prompt with; `price`: the session's,
    as `think` found it, to bill the compaction with; `day`: the tenant's day quota as
    `think` read it, which caps the compaction's call as the refused one's."""
    rt, claimed, report = tick.rt, tick.claimed, tick.report
    head = claimed.head
    policy = context.policy_for(head)
    window = policy.window if policy is not None else None
    learned, event = machine.context_overflow(
        head, error=str(exc), estimate=prompt.tokens, window=window, now=rt.clock()
    )
    stated = event.data["stated_window"]
    log.warning(
        "session %s: the model refused the prompt of step %d (about %s tokens) as longer "
        "than its context window; the session's window is %s tokens, the model states %s%s; "
        "give the model's real window (--context-window, or context_window in "
        "TICKWORK_PRICES): %s",
        head.id,
        head.step + 1,
        f"{prompt.tokens:,}",
        "none" if window is None else f"{window:,}",
        "none" if stated is None else f"{stated:,}",
        "" if learned is None else ", which the session goes on under",
        exc,
    )
    if learned is not None:
        report.model = _model_failed(head.model, asked, prompt.messages, learned.head, str(exc))
        return learned
    forced = context.plan(
        head,
        claimed.steps,
        claimed.observations,
        estimate=estimate,
        tools=tools,
        by=by,
        force=True,
    )
    if forced.too_long is not None or forced.compact_through is None:
        # nothing to compact (or no policy: a session stored before 0.2.0) fits it
        why = forced.too_long or "the session has no context policy to compact under"
        failed = machine.fail(head, ErrorCode.CONTEXT, f"{why}: {exc}", now=rt.clock())
        report.model = _model_failed(head.model, asked, prompt.messages, failed.head, str(exc))
        return _with_event(failed, event)
    # capped by the room its own request leaves: the refused prompt's cap (the model's own,
    # where that prompt left too little room) would be refused with it too
    ahead = pricing.next_call(
        forced.messages,
        last=None,
        price=price,
        window=window,
        tools=schemas,
        scale=by,
        tokens=forced.unscaled - tools,
        schema_tokens=tools,
    )
    # a budget its own request would pass ends the session, as a THINK's would: a cap under
    # one token is no call (ModelSettings refuses it: the tick raised, failing INTERNAL)
    before = machine.start_think(head, now=rt.clock(), next_call=ahead, plan=forced, day=day)
    if isinstance(before, Change):
        return _with_event(before, event)
    cap = budgets.completion_cap(head, ahead, day).tokens
    return _with_event(_compact(rt, head, forced, schemas, report, cap, price), event)


def _learned(change: Change, stated: int, window: int) -> Change:
    """`change` with the window a server stated in refusing a cap (the call was asked again
    within it) recorded on the card where it is below the session's, as a refused prompt's
    is (`_overflow`): every prompt after it is planned, and capped, under it."""
    if not 0 < stated < window:
        return change
    head = change.head
    log.warning(
        "session %s: the model refused a completion cap as past its context window of %s "
        "tokens; the session's window is %s tokens, and it goes on under the model's; give "
        "the model's real window (--context-window, or context_window in TICKWORK_PRICES)",
        head.id,
        f"{stated:,}",
        f"{window:,}",
    )
    result = {**head.result, context.STATED_WINDOW: stated}
    return change.model_copy(update={"head": head.model_copy(update={"result": result})})


def _with_event(change: Change, event: Event) -> Change:
    """`change` with `event` before its own."""
    return change.model_copy(update={"events": (event, *change.events)})


def _with_outcome(
    events: tuple[Event, ...], result: dict[str, Any], *, at: datetime
) -> tuple[Event, ...]:
    """The `completed` event says what the job achieved (a repair's outcome), so whoever
    follows the events (`watch`, the page's stream) learns it with the end, and when the
    job's finish ended (`at`)."""
    outcome = result.get("outcome")
    data = {"outcome": outcome} if isinstance(outcome, str) else {}
    return tuple(
        e.model_copy(update={"data": {**e.data, **data}, "at": at})
        if e.kind is EventKind.COMPLETED
        else e
        for e in events
    )


def rules_for(tools: ToolRegistry, head: Head) -> dict[str, ApprovalRule]:
    """The approval rules of the tools the session is offered: a call of another tool (one
    its role does not have) asks nobody, it is refused when it would run."""
    rules = tools.rules()
    offered = head.config.get("tools")
    if not isinstance(offered, list):
        return rules
    return {name: rule for name, rule in rules.items() if name in offered}


def schemas_for(tools: ToolRegistry, head: Head) -> list[dict[str, Any]]:
    """The tools the model is offered: the session's, and `recall` under a context policy
    (an elided observation names it)."""
    schemas = tools.schemas(head.config.get("tools"))
    if context.policy_of(head.config) is not None and context.RECALL not in tools:
        schemas.append(RECALL_SCHEMA)
    return schemas


#: the `recall` tool's schema; `execute` answers it from the store, running nothing
RECALL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": context.RECALL,
        "description": (
            "Show again the whole output of an earlier tool call whose observation was "
            "elided from the conversation; nothing is run again."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "call_id": {"type": "string", "description": "The call's id, as the stub names it."}
            },
            "required": ["call_id"],
            "additionalProperties": False,
        },
    },
}


def _cost(rt: Runtime, head: Head, reply: ModelReply, price: Price | None) -> float:
    """What `reply` costs at the session's `price` (`pricing.session_price`, found once a
    THINK)."""
    return pricing.billed(price, head.model, reply.model, reply.usage, rt.settings.prices)


def _compact(
    rt: Runtime,
    head: Head,
    prompt: context.Plan,
    schemas: list[dict[str, Any]],
    report: TickReport,
    max_tokens: int | None,
    price: Price | None,
) -> Change:
    """The compaction micro-phase: one model call that summarises the steps up to the
    plan's cut; saved as a step of its own by the usual compare-and-swap, so a tick that
    runs again after a kill cannot store a second one. `max_tokens`: the budgets' cap;
    `price`: the session's, as the THINK found it."""
    assert prompt.compact_through is not None
    model = rt.model(head.model)
    asked = time.time_ns()
    messages = prompt.messages
    report.phase = Phase.COMPACT
    try:
        # the same tools as every THINK: they are part of the prefix a provider caches
        reply = model.generate(
            messages,
            schemas,
            ModelSettings(timeout_s=rt.settings.model_timeout_s, max_tokens=max_tokens),
        )
    except ContextTooLong as exc:
        return _compaction_refused(rt, head, prompt, exc, asked, report)
    except ModelError as exc:
        return _model_error(rt, head, exc, asked, messages, report)
    # it is offered the tools (they are part of the cached prefix) and may call one
    called = ", ".join(machine.ignored_calls(reply))
    if not reply.content.strip():
        why = (
            f"the model called {called} instead of writing the summary a compaction asks for"
            if called
            else "the model returned an empty summary for a compaction"
        )
        return _billed_retry(rt, head, reply, why, asked, messages, report, price)
    if called:
        # its text is the summary asked for; the calls run nothing (its event names them)
        log.warning(
            "session %s: the model called %s beside the summary of steps 1-%d; the summary "
            "is kept and the calls are not run",
            head.id,
            called,
            prompt.compact_through,
        )
    cost = _cost(rt, head, reply, price)
    report.model = ModelCall(
        spec=head.model,
        started_ns=asked,
        ended_ns=time.time_ns(),
        outcome="ok",
        response_model=reply.model or "",
        usage=reply.usage,
        cost_usd=cost,
        messages=tuple(messages),
        max_tokens=reply.cap_lowered_to or max_tokens,
    )
    change = machine.compacted(
        head,
        reply,
        through=prompt.compact_through,
        now=rt.clock(),
        cost_usd=cost,
        trace_id=uuid.uuid4().hex,
        # the next THINK scales its first prompt by the server's count of this request
        prompt_estimate=prompt.unscaled,
    )
    # a window stated in refusing the compaction's cap is learned as an ordinary call's is
    policy = context.policy_for(head)
    if reply.stated_window is not None and policy is not None:
        change = _learned(change, reply.stated_window, policy.window)
    return change


def _compaction_refused(
    rt: Runtime,
    head: Head,
    prompt: context.Plan,
    exc: ContextTooLong,
    asked: int,
    report: TickReport,
) -> Change:
    """The model refused a compaction's own prompt as longer than its window: a
    `context_overflow` event, and where the refusal states a window below the session's,
    the session goes on under it as after a refused THINK (the next tick compacts to its
    target); else it fails `CONTEXT`, naming the window the model states."""
    policy = context.policy_for(head)
    window = policy.window if policy is not None else None
    learned, event = machine.context_overflow(
        head, error=str(exc), estimate=prompt.tokens, window=window, now=rt.clock()
    )
    stated = event.data["stated_window"]
    if learned is not None:
        log.warning(
            "session %s: the model refused the compaction of steps 1-%d (about %s tokens) as "
            "longer than its context window of %s tokens; the session's window is %s "
            "tokens, and it goes on under the model's; give the model's real window "
            "(--context-window, or context_window in TICKWORK_PRICES)",
            head.id,
            prompt.compact_through,
            f"{prompt.tokens:,}",
            f"{stated:,}",
            f"{window:,}",
        )
        report.model = _model_failed(head.model, asked, prompt.messages, learned.head, str(exc))
        return learned
    why = f"compacting steps 1-{prompt.compact_through} was refused as too long too: {exc}"
    if stated is not None:
        why += (
            f"; the model states a context window of {stated:,} tokens"
            + ("" if window is None else f" (the session's is {window:,})")
            + "; fork it with the model's real window (`context_window`)"
        )
    failed = machine.fail(head, ErrorCode.CONTEXT, why, now=rt.clock())
    report.model = _model_failed(head.model, asked, prompt.messages, failed.head, str(exc))
    return _with_event(failed, event)


def _billed_retry(
    rt: Runtime,
    head: Head,
    reply: ModelReply,
    why: str,
    asked: int,
    messages: list[Any],
    report: TickReport,
    price: Price | None,
) -> Change:
    """A reply that is no answer (empty, or no summary), retried as a glitch of the server
    and billed as the server billed it (at the session's `price`, as the THINK found it)."""
    failed = machine.model_failed(
        head,
        error=why,
        transient=True,
        now=rt.clock(),
        jitter=rt.jitter(),
        usage=reply.usage,
        cost_usd=_cost(rt, head, reply, price),
    )
    report.model = _model_failed(head.model, asked, messages, failed.head, why)
    return failed


def _model_failed(spec: str, asked: int, messages: list[Any], after: Head, error: str) -> ModelCall:
    """A failed model call: `retry` if the session tries again later, else `failed`."""
    return ModelCall(
        spec=spec,
        started_ns=asked,
        ended_ns=time.time_ns(),
        outcome="retry" if after.status.runnable and after.error_code is None else "failed",
        error=error,
        messages=tuple(messages),
    )


def _model_error(
    rt: Runtime, head: Head, exc: ModelError, asked: int, messages: list[Any], report: TickReport
) -> Change:
    """A model call that raised a ModelError: the machine retries it later or fails the
    session (a server's Retry-After capped), and the call is noted for the tick's report."""
    failed = machine.model_failed(
        head,
        error=str(exc),
        transient=exc.transient,
        now=rt.clock(),
        jitter=rt.jitter(),
        retry_after_s=_capped(rt, head.id, exc.retry_after_s),
    )
    report.model = _model_failed(head.model, asked, messages, failed.head, str(exc))
    return failed


def _capped(rt: Runtime, session_id: str, retry_after_s: float | None) -> float | None:
    """A model's Retry-After, at most TICKWORK_MAX_RETRY_DELAY_S."""
    cap = rt.settings.max_retry_delay_s
    if retry_after_s is not None and retry_after_s > cap:
        log.warning(
            "session %s: the model asked to wait %gs; waiting TICKWORK_MAX_RETRY_DELAY_S=%gs",
            session_id,
            retry_after_s,
            cap,
        )
        return cap
    return retry_after_s


def recall(rt: Runtime, head: Head, arguments: dict[str, Any]) -> tuple[str, bool]:
    """The `recall` tool: a stored observation of this session, read from the store."""
    wanted = arguments.get("call_id")
    if not isinstance(wanted, str) or not wanted.strip():
        return 'recall takes {"call_id": "<id>"}, the id an elided observation names', True
    found = rt.store.observation(head.id, wanted.strip())
    if found is None:
        return (
            f"no call {wanted.strip()[:80]!r} with an output in this session; use the id an "
            "elided observation names, e.g. s12c0",
            True,
        )
    return (f"ERROR: {found.content}" if found.is_error else found.content), False


def execute(tick: Tick) -> Change:
    """EXECUTE: run the step's next pending call (or say why it does not run)."""
    rt, claimed, files = tick.rt, tick.claimed, tick.files
    head = claimed.head
    tools = rt.jobs.tools(head.kind)
    tool = next_tool(tick)
    plan = machine.start_execute(
        head, claimed.calls, claimed.decisions, idempotent=may_run_twice(tool), now=rt.clock()
    )
    if not isinstance(plan, RunTool):
        return plan
    call = plan.call

    def refused(output: str) -> Change:
        """The call does not run: `output` tells the model why."""
        tick.report.tool = tool_run(call, began, is_error=True, arguments=plan.arguments)
        return finished(output, is_error=True)

    def finished(output: str, *, is_error: bool, duration_ms: float = 0.0) -> Change:
        return machine.tool_finished(
            head,
            claimed.calls,
            call,
            output=edit_note(claimed.decisions.get(call.call_id), is_error=is_error) + output,
            is_error=is_error,
            duration_ms=duration_ms,
            now=rt.clock(),
        )

    began = time.time_ns()
    if tool is None and call.name == context.RECALL and context.policy_of(head.config):
        output, is_error = recall(rt, head, plan.arguments)
        tick.report.tool = tool_run(call, began, is_error=is_error, arguments=plan.arguments)
        return finished(output, is_error=is_error)
    offered = head.config.get("tools")
    if tool is None or (isinstance(offered, list) and call.name not in offered):
        # a role's session may call only its role's tools, whatever the kind has
        names = list(offered if isinstance(offered, list) else tools.names())
        if context.policy_of(head.config) is not None and context.RECALL not in names:
            names.append(context.RECALL)  # offered beside them (`schemas_for`), and answered
        return refused(f"unknown tool {call.name!r}; the tools are: {', '.join(names)}")
    if call.name in (SPAWN_AGENTS, WAIT_CHILDREN):
        # children start in this tick's save, and the join's outcome is recorded when it
        # wakes the session (docs/DESIGN.md section 16): nothing runs in between
        tick.report.tool = tool_run(call, began, is_error=False, arguments=plan.arguments)
        if call.name == WAIT_CHILDREN:
            return wait_children(tick, call, plan.arguments)
        return spawn_or_join(tick, call, plan.arguments)
    try:
        arguments = tool.validate(plan.arguments)
    except InvalidToolArguments as exc:
        return refused(str(exc))
    # the files first: a copy that cannot be made leaves the call unstarted, not in doubt
    workspace = files.open(changes=tool.name not in READ_ONLY_TOOLS)
    environment = files.environment()  # unpacked before the call starts, like the files

    def run(stop: Stop) -> ToolResult:
        tool_context = ToolContext(
            session_id=head.id,
            call_id=call.call_id,
            step=call.step,
            idempotency_key=idempotency_key(head.id, call.step, call.call_id),
            workspace=workspace,
            config=head.config,
            timeout_s=min(tool.timeout_s, rt.settings.longest_call_s),  # fits the broker
            stop=stop,
            sandbox=sandbox_of(rt.settings),
            environment=environment,
            setup=head.result.get("environment") or {},
            children=lambda: child_results(rt.store.children(head.id)),
            changed=files.changed,
        )
        return run_tool(
            tool, arguments, tool_context, max_output_chars=rt.settings.max_output_chars
        )

    result, _ = run_call(
        tick,
        call,
        run,
        rerun=plan.rerun,
        arguments=arguments,
        is_error=lambda done: done.is_error,
    )
    files.record(step=call.step, call_id=call.call_id, paths=written_paths(tool.name, arguments))
    return finished(result.output, is_error=result.is_error, duration_ms=result.duration_ms)


def next_tool(tick: Tick) -> Tool | None:
    """The tool of the step's next call; None with no call left, or one the kind lacks."""
    tools = tick.rt.jobs.tools(tick.head.kind)
    upcoming = machine.next_call(tick.claimed.calls)
    return tools.get(upcoming.name) if upcoming and upcoming.name in tools else None


def may_run_twice(tool: Tool | None) -> bool:
    """Whether the step's next call, found started, runs again (`machine.start_execute`),
    so that a tick ending the session closes it as not run: its tool's `idempotent`; a
    call of a tool the kind lacks is refused, never run."""
    return tool.idempotent if tool is not None else True


class AgentRunner:
    """The agent loop's tick (`tickwork.worker.tick.frame.Runner`): THINK when the session
    is ready, EXECUTE when it has calls to run."""

    def phase(self, head: Head) -> Phase:
        return Phase.THINK if head.status is Status.READY else Phase.EXECUTE

    def advance(self, tick: Tick) -> Change:
        return think(tick) if tick.head.status is Status.READY else execute(tick)

    def tree_full(self, tick: Tick, change: Change, refused: TreeFull) -> Change:
        return tree_full(tick, change, refused)

    def idempotent(self, tick: Tick) -> bool:
        return may_run_twice(next_tool(tick))
