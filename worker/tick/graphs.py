"""The graph runner: the tick that runs one node of a graph session (docs/DESIGN.md
section 12).

    from tickwork.fsm.graph import END, START, Graph
    from tickwork.worker.tick.graphs import NodeContext, graph_kind

    graph = Graph("refund", version="1", state=Refund)
    graph.add_node("draft", draft)
    ...
    KIND = graph_kind(graph.compile())   # name it in TICKWORK_IMPORTS: module:KIND

`GraphRunner` is the runner `advance` picks for a graph session
(`tickwork.fsm.kinds.SessionKind.GRAPH`); the graph kinds are `tickwork.worker.jobs.graphs`
(`graph_kind` and `GraphKind` can be imported from here too, as they always were).

A node is `fn(state, ctx) -> dict`: `state` is the state model, the dict the fields it
changes. `ctx` (`NodeContext`) gives what an agent's tick has: the model, the kind's tools,
the idempotency key `"{session_id}:{step}:{node}"`, the session's config and a stop flag.
"""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tickwork.fsm import context, graph_machine, trees
from tickwork.fsm.approvals import ApprovalRule, approval_reason
from tickwork.fsm.budgets import TenantDay, completion_cap, model_retry_delay
from tickwork.fsm.errors import (
    ArtifactsUnavailable,
    ContextTooLong,
    GraphVersionMismatch,
    InvalidStateUpdate,
    ModelError,
    StoreError,
    TreeFull,
)
from tickwork.fsm.graph import Branches, CompiledGraph
from tickwork.fsm.graph_machine import Decided, RunNode
from tickwork.fsm.joins import Join
from tickwork.fsm.kinds import graph_of
from tickwork.fsm.transitions import Change, cap_error
from tickwork.fsm.values import (
    CallState,
    DecisionKind,
    ErrorCode,
    Event,
    EventKind,
    Head,
    ModelReply,
    Status,
    ToolCall,
    Usage,
)
from tickwork.worker.jobs.graphs import GraphKind, given_update, graph_kind
from tickwork.worker.models import ModelSettings, pricing
from tickwork.worker.models.base import Message, estimate_prompt, estimate_schemas
from tickwork.worker.models.pricing import Price
from tickwork.worker.observers.report import ModelCall, Phase
from tickwork.worker.sandbox.runner import sandbox_of
from tickwork.worker.tick.frame import Stop, Tick, run_call
from tickwork.worker.tick.runtime import Runtime
from tickwork.worker.tools.registry import ToolContext, ToolResult, run_tool

__all__ = [
    "GraphKind",
    "GraphRunner",
    "NodeContext",
    "NodeFailed",
    "check_version",
    "graph_kind",
    "node_key",
]

log = logging.getLogger("tickwork.graph")
#: the longest a node's run waits out transient model errors in all, holding its worker
#: thread: past it the error goes to the node (and fails the session `MODEL_ERROR`)
MAX_NODE_RETRY_WAIT_S = 60.0
#: the tick's own logger, where a tick that fails its session says so (`advance`)
tick_log = logging.getLogger("tickwork.tick")


@dataclass
class NodeContext:
    """What a running node may use: the session's model and tools, its idempotency key."""

    session_id: str
    step: int
    node: str
    #: `"{session_id}:{step}:{node}"`: the same on every run of this step's node
    idempotency_key: str
    config: Mapping[str, Any]
    rt: Runtime = field(repr=False)
    head: Head = field(repr=False)
    #: why the node must stop now (a cancel, the deadline), or None
    stop: Callable[[], str | None] = lambda: None
    #: the tenant's day quota, read once for the node's run (`Runtime.tenant_day`; None:
    #: it has none): each of the node's calls is capped by what it leaves, the node's
    #: earlier calls counted
    day: TenantDay | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    #: the model use of this node's `generate` calls, charged to the node's step
    usage: Usage = field(default_factory=Usage)
    #: this node's model calls, as one, for the tick's report (None: it called none)
    model_call: ModelCall | None = None
    #: the context window the model stated in refusing a call of this node, below the
    #: session's: the node's later calls are fitted under it, and it is recorded on the card
    stated_window: int | None = None
    #: the events of this node's model calls (`model_called`, `context_overflow`), saved
    #: with the node's run as an agent's THINK saves its own
    events: list[Event] = field(default_factory=list)
    #: how many times the estimate the server counted this node's last prompt
    #: (`context.measured`; before its first reply, the session's earlier nodes' last,
    #: `context.learned_scale`): its next prompt is fitted and capped as the server will
    #: count it, as an agent's THINK is (`context.scale`)
    scale: float = 1.0
    #: the transient model errors this node's calls met and waited out, and for how long
    retries: int = 0
    waited_s: float = 0.0

    def generate(self, messages: list[Message], tools: Iterable[str] | None = None) -> ModelReply:
        """Call the session's model (`messages` as the agent sends them; `tools` names the
        kind's tools to offer). Its tokens and cost count in the session's budgets and on
        the node's step. Under the session's context policy (`tickwork.fsm.context.policy_for`:
        the config's, under the window its model stated if smaller), old tool outputs in
        `messages` are elided when they pass its target (`tickwork.fsm.context.fit`), and the
        completion cap leaves the prompt room in its window, the prompt estimated as the
        server counted this node's last one (`scale`); a prompt the model still refuses
        as too long is fitted once more under the window the refusal states, where that is
        below the session's (`stated_window`, recorded on the card); refused again, or with
        no such window stated, it raises `ContextTooLong`, which fails the session with
        `CONTEXT` unless the node handles it."""
        model = self.rt.model(self.head.model)
        registry = self.rt.jobs.tools(self.head.kind)
        schemas = registry.schemas(list(tools)) if tools is not None else []
        # one policy for the fit and the cap: the config's under the window the model stated
        policy = self._policy()
        tool_tokens = estimate_schemas(schemas)
        sent = context.fit(
            messages, policy, estimate=estimate_prompt, tools=tool_tokens, by=self.scale
        )
        estimated = estimate_prompt(sent) + tool_tokens  # as sent, unscaled
        cap = self._cap(sent, schemas, policy)
        asked = time.time_ns()
        try:
            reply = model.generate(
                sent,
                schemas,
                ModelSettings(timeout_s=self.rt.settings.model_timeout_s, max_tokens=cap),
            )
        except ContextTooLong as exc:
            self._noted(asked, sent, cap, error=f"{type(exc).__name__}: {exc}")
            self.events.append(
                graph_machine.node_context_overflow(
                    step=self.step,
                    node=self.node,
                    error=str(exc),
                    estimate=math.ceil(estimated * self.scale),
                    window=None if policy is None else policy.window,
                    now=self.rt.clock(),
                )
            )
            stated = context.stated_window(str(exc))
            once = self.stated_window is None
            if not once or policy is None or stated is None or not 0 < stated < policy.window:
                raise
            # as an agent's session goes on under it (`think`'s `_overflow`), once a node
            self._learn(stated, policy.window, "prompt")
            return self.generate(messages, tools)
        except ModelError as exc:
            self._noted(asked, sent, cap, error=f"{type(exc).__name__}: {exc}")
            if not exc.transient or not self._waited_out(exc):
                raise
            return self.generate(messages, tools)
        except Exception as exc:
            self._noted(asked, sent, cap, error=f"{type(exc).__name__}: {exc}")
            raise
        stated = reply.stated_window  # in refusing the cap first asked for
        if stated is not None and policy is not None and 0 < stated < policy.window:
            self._learn(stated, policy.window, "completion cap")
        if reply.cap_lowered_to is not None:  # its `model_called` event says it too
            log.warning(
                "session %s: node %r: the server refused a completion cap of %s tokens for its "
                "window; asked again with %s",
                self.session_id,
                self.node,
                f"{cap:,}",
                f"{reply.cap_lowered_to:,}",
            )
        self.scale = context.measured(reply.usage.prompt_tokens, estimated)
        self.tokens += reply.usage.total
        self.usage = Usage(
            prompt_tokens=self.usage.prompt_tokens + reply.usage.prompt_tokens,
            completion_tokens=self.usage.completion_tokens + reply.usage.completion_tokens,
            cached_prompt_tokens=self.usage.cached_prompt_tokens + reply.usage.cached_prompt_tokens,
            cache_creation_tokens=(
                self.usage.cache_creation_tokens + reply.usage.cache_creation_tokens
            ),
        )
        cost = pricing.billed(
            self._price, self.head.model, reply.model, reply.usage, self.rt.settings.prices
        )
        self.cost_usd += cost
        self.events.append(
            graph_machine.node_model_called(
                self.head,
                step=self.step,
                node=self.node,
                reply=reply,
                cost_usd=cost,
                now=self.rt.clock(),
            )
        )
        # the cap sent: lowered to the room the server said the prompt left, if it refused
        self._noted(asked, sent, reply.cap_lowered_to or cap, reply=reply)
        return reply

    @functools.cached_property
    def _price(self) -> Price | None:
        """The session's price (`pricing.session_price`), found once a node run: the session's
        model and config and the worker's prices do not change within it. Its calls are
        capped (`_cap`) and billed (`pricing.billed`) at it, as an agent's THINK is."""
        return pricing.session_price(
            self.head.model, self.head.config, self.rt.settings.prices, providers=self.rt.providers
        )

    def _policy(self) -> context.Policy | None:
        """The session's policy (`context.policy_for`) under the window the model stated in
        refusing one of this node's calls, where that is smaller."""
        policy = context.policy_for(self.head)
        if policy is None or self.stated_window is None or self.stated_window >= policy.window:
            return policy
        return replace(policy, window=self.stated_window)

    def _waited_out(self, exc: ModelError) -> bool:
        """After a transient model error (a timeout, 429, 5xx): wait as an agent's session
        waits before its next attempt (`model_retry_delay`, a server's Retry-After up to
        TICKWORK_MAX_RETRY_DELAY_S) and say True to call again, within the node's run (its
        code never sees the error, so a node that may not run twice runs once). False, and
        the error goes to the node, past the session's `max_model_retries`, past
        MAX_NODE_RETRY_WAIT_S of waiting in this run, or when the node must stop."""
        self.retries += 1
        if self.retries > self.head.budgets.max_model_retries:
            return False
        delay = model_retry_delay(self.retries, jitter=self.rt.jitter())
        if exc.retry_after_s is not None:
            delay = max(delay, min(exc.retry_after_s, self.rt.settings.max_retry_delay_s))
        if self.waited_s + delay > MAX_NODE_RETRY_WAIT_S:
            return False
        error = cap_error(str(exc))  # as an agent's retry keeps it
        data = {"node": self.node, "attempt": self.retries, "delay_s": delay, "error": error}
        self.events.append(Event(kind=EventKind.MODEL_RETRY, at=self.rt.clock(), data=data))
        log.warning(
            "session %s: node %r: the model call failed (%s); again in %.1fs",
            *(self.session_id, self.node, error, delay),
        )
        until = time.monotonic() + delay
        while (left := until - time.monotonic()) > 0:
            if self.stop() is not None:
                return False
            time.sleep(min(left, 0.25))
        self.waited_s += delay
        return True

    def _learn(self, stated: int, window: int, what: str) -> None:
        """The window the model stated in refusing a `what` of this node's, below the
        session's `window`: this node's calls are fitted under it from now on."""
        self.stated_window = stated
        log.warning(
            "session %s: node %r: the model refused a %s as past its context window of %s "
            "tokens; the session's window is %s tokens, and it goes on under the model's; "
            "give the model's real window (--context-window, or context_window in "
            "TICKWORK_PRICES)",
            self.session_id,
            self.node,
            what,
            f"{stated:,}",
            f"{window:,}",
        )

    def _noted(
        self,
        asked: int,
        sent: list[Message],
        cap: int,
        *,
        reply: ModelReply | None = None,
        error: str = "",
    ) -> None:
        """This node's model calls so far, one more made from `asked`, as one `ModelCall`."""
        before = self.model_call
        self.model_call = ModelCall(
            spec=self.head.model,
            started_ns=before.started_ns if before is not None else asked,
            ended_ns=time.time_ns(),
            outcome="failed" if reply is None else "ok",
            response_model=reply.model or "" if reply is not None else "",
            usage=self.usage,
            cost_usd=self.cost_usd,
            error=error,
            messages=tuple(sent),
            max_tokens=cap,
            calls=(before.calls + 1) if before is not None else 1,
        )

    def _cap(
        self,
        messages: list[Message],
        schemas: Sequence[Mapping[str, Any]],
        policy: context.Policy | None,
    ) -> int:
        """The completion cap of a node's call: what the budgets leave after this node's
        earlier calls and the prompt, and what the prompt and the tools' `schemas` leave of
        the window of `policy`, the session's, both estimated as the server counted this
        node's last prompt (`scale`) (at least 1: the check before the next node ends a
        session whose budget is spent)."""
        spent = self.head.model_copy(
            update={
                "tokens": self.head.tokens + self.tokens,
                "cost_usd": self.head.cost_usd + self.cost_usd,
            }
        )
        ahead = pricing.next_call(
            messages,
            last=None,
            price=self._price,
            window=None if policy is None else policy.window,
            tools=schemas,
            scale=self.scale,
        )
        # the tenant's day quota caps it too, this node's earlier calls (not saved yet) counted
        day = self.day
        if day is not None:
            day = day.model_copy(update={"spent_usd": day.spent_usd + self.cost_usd})
        return max(1, completion_cap(spent, ahead, day).tokens)

    def run_tool(self, name: str, **arguments: Any) -> ToolResult:
        """Run one of the kind's tools with this node's idempotency key; its errors come
        back as a result with `is_error`, as a model's tool call gets them."""
        tool = self.rt.jobs.tools(self.head.kind).get(name)
        context = ToolContext(
            session_id=self.session_id,
            call_id=self.node,
            step=self.step,
            idempotency_key=self.idempotency_key,
            config=self.config,
            timeout_s=min(tool.timeout_s, self.rt.settings.longest_call_s),
            stop=self.stop,
            sandbox=sandbox_of(self.rt.settings),
        )
        return run_tool(
            tool, arguments, context, max_output_chars=self.rt.settings.max_output_chars
        )


def node_key(session_id: str, step: int, node: str) -> str:
    return f"{session_id}:{step}:{node}"


def check_version(kind: GraphKind, head: Head) -> CompiledGraph:
    """The kind's graph if it is the version the session started on; else the tick is
    refused (GraphVersionMismatch) and the session is left as it is."""
    wanted = graph_of(head)
    name, version = (wanted.name, wanted.version) if wanted is not None else (None, None)
    if version != kind.graph.version or name != kind.graph.name:
        raise GraphVersionMismatch(
            f"session {head.id} runs graph {name!r} version {version!r}; this worker has "
            f"{kind.graph.name!r} version {kind.graph.version!r}. The tick is refused and the "
            "session kept for a worker that has its version (see `tickwork runbook graph "
            "version`)"
        )
    return kind.graph


class GraphRunner:
    """A graph session's tick (`tickwork.worker.tick.frame.Runner`): choose the first node,
    or run one node and record the next."""

    def phase(self, head: Head) -> Phase:
        return Phase.NODE

    def idempotent(self, tick: Tick) -> bool:
        head, calls = tick.head, tick.claimed.calls
        upcoming = calls[0] if calls else None
        if upcoming is not None and upcoming.state is CallState.STARTED:
            fanned_out = tick.rt.store.join(head.id, upcoming.call_id) is not None
            if fanned_out:
                return False  # so it ran: its branches did, or still do
        kind = tick.rt.jobs.graph(head.kind)
        graph = kind.graph if head.cancel_requested else check_version(kind, head)
        return _may_run_twice(graph, upcoming)

    def tree_full(self, tick: Tick, change: Change, refused: TreeFull) -> Change:
        """The node's fan-out (`change`) the store refused, its tree full: the session fails
        naming the node, the limit and what to do, as when the tick counted it full itself
        (`_fan_out`), its state and the node's model use kept
        (`graph_machine.fan_out_refused`)."""
        assert change.join is not None, "TreeFull refuses a fan-out: a change with its join"
        [call] = [c for c in tick.claimed.calls if c.call_id == change.join.call_id]
        why = trees.too_many(
            refused.held, refused.adding, limit=refused.limit, worded=trees.FAN_OUTS
        )
        where = f"the branches of node {call.name!r}"
        tick.files.discard()  # as a node that failed (`_failed`): nothing of its run is kept
        return graph_machine.fan_out_refused(
            change, call, f"{where}: {why or refused}", now=tick.rt.clock()
        )

    def advance(self, tick: Tick) -> Change:
        rt, claimed = tick.rt, tick.claimed
        head = claimed.head
        kind = rt.jobs.graph(head.kind)
        graph = kind.graph if head.cancel_requested else check_version(kind, head)
        trace = uuid.uuid4().hex
        # the tenant's day quota, read once a tick: checked with the budgets before each next
        # node, and capping the node's model calls (`NodeContext.day`)
        day = rt.tenant_day(head)
        if head.status is Status.READY:
            return graph_machine.start(head, graph, now=rt.clock(), trace_id=trace, day=day)
        upcoming = claimed.calls[0] if claimed.calls else None
        if upcoming is not None and upcoming.state is CallState.STARTED:
            # a node that fanned out stays started while its branches run: the join that
            # woke the session is found, and the branches' updates are merged
            join = rt.store.join(head.id, upcoming.call_id)
            if join is not None:
                if not join.complete:  # woken by hand, or by a repair that raced: wait again
                    return Change(head=trees.waiting_again(head, now=rt.clock()))
                return graph_machine.branches_joined(
                    head,
                    graph,
                    upcoming,
                    rt.store.children(head.id, upcoming.call_id),
                    cost_usd=join.cost_usd,
                    tokens=join.tokens,
                    now=rt.clock(),
                    trace_id=trace,
                    day=day,
                )
        plan = graph_machine.start_node(
            head,
            claimed.calls,
            claimed.decisions,
            idempotent=_may_run_twice(graph, upcoming),
            now=rt.clock(),
        )
        if isinstance(plan, Change):
            return plan
        state = graph_machine.state_of(head)
        if isinstance(plan, Decided):
            if plan.decision.kind is DecisionKind.REJECT:
                return graph_machine.node_rejected(
                    head, graph, plan.call, plan.decision, now=rt.clock(), trace_id=trace, day=day
                )
            # an update given by hand for a node run in doubt: its output is the update
            delta = given_update(plan.decision.output, plan.call.name)
            by = f"the output given for node {plan.call.name!r}"
            return graph_machine.node_finished(
                head,
                graph,
                plan.call,
                state=graph.update(state, delta, by=by),
                delta=delta,
                now=rt.clock(),
                observed=True,
                trace_id=trace,
                day=day,
            )
        return _run(tick, graph, plan, state, trace, day)


def _may_run_twice(graph: CompiledGraph, call: ToolCall | None) -> bool:
    """Whether the step's node, found started, runs again (`graph_machine.start_node`), so
    that a tick ending the session closes it as not run: the node's `idempotent`; a node
    the graph lacks is refused, never run."""
    node = graph.nodes.get(call.name) if call is not None else None
    return node.idempotent if node is not None else True


def _run(
    tick: Tick,
    graph: CompiledGraph,
    plan: RunNode,
    state: dict[str, Any],
    trace: str,
    day: TenantDay | None = None,
) -> Change:
    rt, claimed = tick.rt, tick.claimed
    head, call = claimed.head, plan.call
    node = graph.node(call.name)
    if graph_machine.is_proposal(call):
        # a proposed update a person approved (or edited: the edit is the update)
        delta = plan.patch or dict(call.arguments or {})
        return graph_machine.node_finished(
            head,
            graph,
            call,
            state=graph.update(state, delta, by=f"the update of node {node.name!r}"),
            delta=delta,
            now=rt.clock(),
            trace_id=trace,
            day=day,
        )
    if plan.patch:
        state = graph.update(state, plan.patch, by=f"the edit before node {node.name!r}")
    typed = graph.typed(state)
    contexts: list[NodeContext] = []

    def run(stop: Stop) -> Mapping[str, Any] | None:
        ctx = NodeContext(
            session_id=head.id,
            step=call.step,
            node=node.name,
            idempotency_key=node_key(head.id, call.step, node.name),
            config=head.config,
            rt=rt,
            head=head,
            stop=stop,
            day=day,
            # what the server counted of the earlier nodes' prompts: the first call's too
            scale=context.learned_scale(head),
        )
        contexts.append(ctx)
        # only the node's own code fails the session: the frame's store calls around it
        # (the start of the call, the stop watch) raise as they are, so a database blip or
        # a lost lease leaves the tick to run again instead of failing the session
        try:
            return node.run(typed, ctx)
        except ContextTooLong:
            raise
        except Exception as exc:
            raise NodeFailed(f"node {node.name!r} raised {type(exc).__name__}: {exc}") from exc

    try:
        returned, duration = run_call(tick, call, run, rerun=plan.rerun, arguments=state)
    except ContextTooLong as exc:
        ctx = contexts[0] if contexts else None
        return _with_use(_too_long(tick, call, exc, ctx, _ran_for(tick)), call, ctx)
    except NodeFailed as exc:
        return _failed(tick, call, exc, contexts[0] if contexts else None, _ran_for(tick))
    finally:
        if contexts:
            tick.report.model = contexts[0].model_call
    ctx = contexts[0]
    if day is not None:  # what this node's calls spent, not saved yet
        day = day.model_copy(update={"spent_usd": day.spent_usd + ctx.cost_usd})
    try:
        ran = _ran(tick, graph, plan, state, trace, ctx, returned, duration, day)
    except (StoreError, ArtifactsUnavailable):
        raise  # a fan-out's count of its tree not read: the tick runs again, as above
    except Exception as exc:
        # what the node returned is refused (an update of fields not in the state, branches
        # of a node the graph lacks): failed as if it raised (an `approve_update` that
        # raises asks a person, `approval_reason`)
        return _failed(tick, call, exc, ctx, duration)
    return _with_calls(ran, ctx)


def _with_calls(change: Change, ctx: NodeContext | None) -> Change:
    """`change` with the events of the node's model calls before its own (they came first)."""
    if ctx is None or not ctx.events:
        return change
    return change.model_copy(update={"events": (*ctx.events, *change.events)})


def _with_use(change: Change, call: ToolCall, ctx: NodeContext | None) -> Change:
    """`change`, which ends the session on the run of `call`'s node, with the model calls the
    node made (`ctx`): their events, and their tokens and cost on the bill
    (`graph_machine.node_use`), as a node's that finished has them."""
    if ctx is None:
        return change
    used = graph_machine.node_use(
        change, call, tokens=ctx.tokens, cost_usd=ctx.cost_usd, usage=ctx.usage
    )
    return _with_calls(used, ctx)


def _ran_for(tick: Tick) -> float:
    """How many milliseconds the node of the tick's call ran before it raised (`run_call`
    reports it)."""
    ran = tick.report.tool
    return 0.0 if ran is None else (ran.ended_ns - ran.started_ns) / 1e6


def _failed(
    tick: Tick, call: ToolCall, exc: Exception, ctx: NodeContext | None, duration: float
) -> Change:
    """The node of `call` raised `exc` (`NodeFailed`) after `duration` milliseconds, or what
    it returned was refused: the session fails `INTERNAL`, as a tick that raises does
    (`advance`), or `MODEL_ERROR` when the node raised a model's error (permanent, or
    transient past its retries), and the call reads as failed with the error, not as not
    run (`graph_machine.node_failed`), keeping the model calls the node made (`_with_use`)
    and the window a refusal of one of them stated. The message names the node and what
    went wrong (`_why`), not tickwork's own exception class."""
    rt, claimed = tick.rt, tick.claimed
    head = claimed.head
    tick_log.error("tick of session %s v%d failed", head.id, head.version, exc_info=exc)
    tick.files.discard()  # what the node's tools may have half done is not saved with a failure
    if ctx is not None and ctx.stated_window is not None:
        head = head.model_copy(
            update={"result": {**head.result, context.STATED_WINDOW: ctx.stated_window}}
        )
    change = graph_machine.node_failed(
        head,
        call,
        ErrorCode.MODEL_ERROR if isinstance(exc.__cause__, ModelError) else ErrorCode.INTERNAL,
        _why(call, exc),
        now=rt.clock(),
        duration_ms=duration,
    )
    return _with_use(change, call, ctx)


def _why(call: ToolCall, exc: Exception) -> str:
    """Why the node of `call` failed, as its session's message says: a node that raised (or
    whose branches were refused) and an update the state refused say so naming the node
    ("node 'charge' raised LookupError: ..."); anything else is named with the node."""
    if isinstance(exc, (NodeFailed, InvalidStateUpdate)):
        return str(exc)
    return f"node {call.name!r} failed: {type(exc).__name__}: {exc}"


def _ran(
    tick: Tick,
    graph: CompiledGraph,
    plan: RunNode,
    state: dict[str, Any],
    trace: str,
    ctx: NodeContext,
    returned: Any,
    duration: float,
    day: TenantDay | None = None,
) -> Change:
    """The change of a node that ran (with `ctx`) and returned `returned` in `duration`
    milliseconds; `day`: its tenant's day quota, this node's calls counted."""
    rt, head, call = tick.rt, tick.claimed.head, plan.call
    node = graph.node(call.name)
    learned: dict[str, Any] = {}
    if ctx.stated_window is not None:
        # recorded on the card as an agent's is: the session's later nodes, and a fork or a
        # retry of it, are planned under it (`context.policy_for`)
        learned[context.STATED_WINDOW] = ctx.stated_window
    if ctx.usage.prompt_tokens > 0:
        # the next node's first call is fitted as the server counted this node's last one
        learned[context.LEARNED_SCALE] = ctx.scale
    if learned:
        head = head.model_copy(update={"result": {**head.result, **learned}})
    if isinstance(returned, Branches):
        return _fan_out(tick, head, graph, call, state, returned, ctx)
    new_state = graph.update(state, returned, by=f"node {node.name!r}")
    delta = {**plan.patch, **dict(returned or {})}
    reason = approval_reason(
        ApprovalRule(policy=node.approve_update),
        dict(returned or {}),
        of=f"the update of node {node.name!r}",
        policy=f"the `approve_update` of node {node.name!r}",
    )
    if reason is not None:
        return graph_machine.update_proposed(
            head,
            call,
            delta=dict(returned or {}),
            reason=reason,
            now=rt.clock(),
            duration_ms=duration,
            tokens=ctx.tokens,
            cost_usd=ctx.cost_usd,
            trace_id=trace,
            usage=ctx.usage,
        )
    return graph_machine.node_finished(
        head,
        graph,
        call,
        state=new_state,
        delta=delta,
        now=rt.clock(),
        duration_ms=duration,
        tokens=ctx.tokens,
        cost_usd=ctx.cost_usd,
        trace_id=trace,
        usage=ctx.usage,
        day=day,
    )


def _too_long(
    tick: Tick, call: ToolCall, exc: ContextTooLong, ctx: NodeContext | None, duration: float
) -> Change:
    """A node's prompt the model refused as too long (fitted under the window it stated, if
    it stated one below the session's): the session fails `CONTEXT`, the window the model
    stated recorded on the card and named in the message with what to do; the node's call
    closed as failed, as a node's that raised is (`_failed`)."""
    rt, head, node = tick.rt, tick.claimed.head, call.name
    policy = context.policy_for(head)
    stated = context.stated_window(str(exc))
    if stated is None and ctx is not None:
        stated = ctx.stated_window
    why = f"node {node!r}: the model refused its prompt as too long: {exc}"
    if stated is not None:
        if policy is None or stated < policy.window:
            learned = {**head.result, context.STATED_WINDOW: stated}
            head = head.model_copy(update={"result": learned})
        why += (
            f"; the model states a context window of {stated:,} tokens"
            + ("" if policy is None else f" (the session's is {policy.window:,})")
            + "; fork it with the model's real window (`context_window`) or have the node "
            "send less"
        )
    else:
        why += "; fork it with a larger window (`context_window`) or have the node send less"
    return graph_machine.node_failed(
        head, call, ErrorCode.CONTEXT, why, now=rt.clock(), duration_ms=duration
    )


def _fan_out(
    tick: Tick,
    head: Head,
    graph: CompiledGraph,
    call: ToolCall,
    state: dict[str, Any],
    branches: Branches,
    ctx: NodeContext,
) -> Change:
    """The node returned branches: one child session per input runs `branches.node` on the
    state with that input, each with an equal share of what the session has left after the
    node's own model calls (`ctx`, charged to the node's step); the session (`head`, as the
    node left it: with a window its model stated) waits for them all (docs/DESIGN.md
    section 16). The branches run the session's model: they start under the window it
    stated and with the scale its nodes learned, as the session goes on with them."""
    rt = tick.rt
    head = graph_machine.spent(head, tokens=ctx.tokens, cost_usd=ctx.cost_usd)
    now = rt.clock()
    where = f"the branches of node {call.name!r}"
    target = graph.nodes.get(branches.node)
    if target is None or not target.branch:
        raise NodeFailed(
            f"{where} name {branches.node!r}, not a branch node of the graph "
            "(add_node(..., branch=True))"
        )
    if not 0 < len(branches.inputs) <= MAX_BRANCHES:
        raise NodeFailed(f"{where}: give 1 to {MAX_BRANCHES} inputs, not {len(branches.inputs)}")
    # the branches join the session's tree: counted as an agent's spawn is, and again by
    # the store as it inserts them (`GraphRunner.tree_full`)
    place = rt.store.place(head.id)
    if why := trees.no_room(place, len(branches.inputs), worded=trees.FAN_OUTS):
        raise NodeFailed(f"{where}: {why}")
    prefix = uuid.uuid4().hex[:29]
    share = 1 / len(branches.inputs)
    keys = (context.STATED_WINDOW, context.LEARNED_SCALE)
    learned = {k: head.result[k] for k in keys if head.result.get(k) is not None}
    children = []
    for n, given in enumerate(branches.inputs):
        first = graph.update(state, given, by=f"input {n} of {where}")
        config = {**head.config, "initial_state": first, graph_machine.BRANCH: branches.node}
        children.append(
            Head(
                id=f"{prefix}-{n:03d}",  # sorts in input order
                kind=head.kind,
                created_at=now,
                updated_at=now,
                model=head.model,
                budgets=trees.child_budgets(head, share, now=now, base=head.budgets),
                input=dict(given),
                config=config,
                result=dict(learned),
                **trees.lineage(head, call, branches.node),
            )
        )
    join = Join(parent_id=head.id, call_id=call.call_id, expected=len(children))
    return graph_machine.fanned_out(
        head,
        call,
        join,
        children,
        now=now,
        cost_usd=ctx.cost_usd,
        usage=ctx.usage,
        limit=trees.MAX_TREE_SESSIONS,
    )


#: the most branches one node may fan out to
MAX_BRANCHES = 256


class NodeFailed(Exception):
    """A node raised, or the branches it returned were refused; the session fails (INTERNAL)
    with this message, which names the node, and can be forked."""
