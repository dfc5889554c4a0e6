"""Graph job kinds and the tick that runs one of their nodes (docs/DESIGN.md section 12).

    from tickwork.fsm.graph import END, START, Graph

    graph = Graph("refund", version="1", state=Refund)
    graph.add_node("draft", draft)
    ...
    KIND = graph_kind(graph.compile())   # name it in TICKWORK_IMPORTS: module:KIND

A node is `fn(state, ctx) -> dict`: `state` is the state model, the dict the fields it
changes. `ctx` (`NodeContext`) gives what an agent's tick has: the model, the kind's tools,
the idempotency key `"{session_id}:{step}:{node}"`, the session's config and a stop flag.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tickwork.fsm import context, graph_machine, machine
from tickwork.fsm.approvals import ApprovalRule, approval_reason
from tickwork.fsm.budgets import completion_cap
from tickwork.fsm.errors import (
    ContextTooLong,
    GraphVersionMismatch,
    InvalidInput,
    InvalidStateUpdate,
)
from tickwork.fsm.graph import CompiledGraph, Graph
from tickwork.fsm.graph_machine import Decided, RunNode
from tickwork.fsm.machine import Change
from tickwork.fsm.values import DecisionKind, ErrorCode, Head, ModelReply, Status, Usage
from tickwork.store import Claimed
from tickwork.worker.jobs import JobKind
from tickwork.worker.models import ModelSettings, pricing
from tickwork.worker.models.base import Message, estimate_prompt
from tickwork.worker.sandbox.runner import sandbox_of
from tickwork.worker.tick.runtime import Runtime, Stops
from tickwork.worker.tools.registry import ToolContext, ToolRegistry, ToolResult, run_tool

log = logging.getLogger("tickwork.graph")


@dataclass(frozen=True)
class GraphKind(JobKind):
    """A job kind whose sessions run a graph; made by `graph_kind`."""

    graph: CompiledGraph | None = None

    def validate_patch(self, head: Head, patch: Mapping[str, Any], *, by: str) -> dict[str, Any]:
        """A person's patch of the session's state (an edit before a node, a fork's), checked
        against the schema; InvalidInput naming `by` and what is wrong."""
        assert self.graph is not None
        try:
            self.graph.update(graph_machine.state_of(head), patch, by=by)
        except InvalidStateUpdate as exc:
            raise InvalidInput(exc.message) from None
        return dict(patch)

    def validate_output(self, head: Head, node: str, text: str) -> None:
        """The update a person gives by hand for a node run in doubt: a JSON object of state
        fields, checked against the schema; InvalidInput otherwise."""
        try:
            delta = _given_update(text, node)
        except InvalidStateUpdate as exc:
            raise InvalidInput(exc.message) from None
        self.validate_patch(head, delta, by=f"the output given for node {node!r}")


def graph_kind(
    graph: Graph | CompiledGraph,
    *,
    tools: Callable[[], ToolRegistry] | Iterable[Any] = (),
    default_model: str | None = None,
    budgets: Mapping[str, Any] | None = None,
    system_prompt: str = "",
) -> GraphKind:
    """A job kind running `graph`; `tools` (a registry factory or `@tool`s) are what its
    nodes may run with `ctx.run_tool`; `default_model` is the model `ctx.generate` calls
    when the submission names none."""
    compiled = graph.compile() if isinstance(graph, Graph) else graph
    if callable(tools):
        make_tools = tools
    else:
        listed = tuple(tools)

        def make_tools() -> ToolRegistry:
            return ToolRegistry(listed)

    def prepare(data: Mapping[str, Any]) -> dict[str, Any]:
        given = data.get("state", data) if isinstance(data, Mapping) else data
        if not isinstance(given, Mapping):
            raise InvalidInput(
                f"the input of graph {compiled.name!r} is its first state: a JSON object"
            )
        try:
            initial = compiled.initial(given)
        except InvalidStateUpdate as exc:
            raise InvalidInput(exc.message) from None
        config: dict[str, Any] = {
            "user_prompt": f"graph {compiled.name} v{compiled.version}",
            "graph": {"name": compiled.name, "version": compiled.version},
            "initial_state": initial,
        }
        if default_model:
            config["default_model"] = default_model
        return config

    return GraphKind(
        name=compiled.name,
        system_prompt=system_prompt,
        tools=make_tools,
        prepare=prepare,
        budgets=dict(budgets or {}),
        graph=compiled,
    )


def is_graph(head: Head) -> bool:
    return isinstance(head.config.get("graph"), Mapping)


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
    tokens: int = 0
    cost_usd: float = 0.0
    #: the model use of this node's `generate` calls, charged to the node's step
    usage: Usage = field(default_factory=Usage)

    def generate(self, messages: list[Message], tools: Iterable[str] | None = None) -> ModelReply:
        """Call the session's model (`messages` as the agent sends them; `tools` names the
        kind's tools to offer). Its tokens and cost count in the session's budgets and on
        the node's step. Under the session's context policy, old tool outputs in `messages`
        are elided when they pass its target (`tickwork.fsm.context.fit`); a prompt the model still
        refuses as too long raises `ContextTooLong`, which fails the session with `CONTEXT`
        unless the node handles it."""
        model = self.rt.model(self.head.model)
        registry = self.rt.jobs.tools(self.head.kind)
        schemas = registry.schemas(list(tools)) if tools is not None else []
        sent = context.fit(messages, context.policy_of(self.head.config), estimate=estimate_prompt)
        reply = model.generate(
            sent,
            schemas,
            ModelSettings(timeout_s=self.rt.settings.model_timeout_s, max_tokens=self._cap(sent)),
        )
        self.tokens += reply.usage.total
        self.usage = Usage(
            prompt_tokens=self.usage.prompt_tokens + reply.usage.prompt_tokens,
            completion_tokens=self.usage.completion_tokens + reply.usage.completion_tokens,
            cached_prompt_tokens=self.usage.cached_prompt_tokens + reply.usage.cached_prompt_tokens,
            cache_creation_tokens=(
                self.usage.cache_creation_tokens + reply.usage.cache_creation_tokens
            ),
        )
        self.cost_usd += pricing.call_cost(
            self.head.model,
            self.head.config,
            reply.model,
            reply.usage,
            self.rt.settings.prices,
            providers=self.rt.providers,
        )
        return reply

    def _cap(self, messages: list[Message]) -> int:
        """The completion cap of a node's call: what the budgets leave after this node's
        earlier calls and the prompt (at least 1: the check before the next node ends a
        session whose budget is spent)."""
        price = pricing.session_price(
            self.head.model, self.head.config, self.rt.settings.prices, providers=self.rt.providers
        )
        spent = self.head.model_copy(
            update={
                "tokens": self.head.tokens + self.tokens,
                "cost_usd": self.head.cost_usd + self.cost_usd,
            }
        )
        ahead = pricing.next_call(messages, last=None, price=price)
        return max(1, completion_cap(spent, ahead).tokens)

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
    assert kind.graph is not None
    wanted = head.config.get("graph", {})
    if str(wanted.get("version")) != kind.graph.version or wanted.get("name") != kind.graph.name:
        raise GraphVersionMismatch(
            f"session {head.id} runs graph {wanted.get('name')!r} version "
            f"{wanted.get('version')!r}; this worker has {kind.graph.name!r} version "
            f"{kind.graph.version!r}. The tick is refused and the session kept for a worker "
            "that has its version (see ops/RUNBOOK.md, rolling out a new graph version)"
        )
    return kind.graph


def tick(rt: Runtime, claimed: Claimed) -> Change:
    """One micro-phase of a graph session: choose the first node, or run one node and
    record the next."""
    head = claimed.head
    kind = rt.jobs.get(head.kind)
    if not isinstance(kind, GraphKind):
        raise InvalidInput(f"session {head.id} is a graph session but {head.kind!r} is no graph")
    if head.cancel_requested:
        graph = kind.graph
        assert graph is not None
    else:
        graph = check_version(kind, head)
    trace = uuid.uuid4().hex
    if head.status is Status.READY:
        return graph_machine.start(head, graph, now=rt.clock(), trace_id=trace)
    upcoming = claimed.calls[0] if claimed.calls else None
    node = graph.nodes.get(upcoming.name) if upcoming else None
    plan = graph_machine.start_node(
        head,
        claimed.calls,
        claimed.decisions,
        idempotent=node.idempotent if node else True,
        now=rt.clock(),
    )
    if isinstance(plan, Change):
        return plan
    state = graph_machine.state_of(head)
    if isinstance(plan, Decided):
        if plan.decision.kind is DecisionKind.REJECT:
            return graph_machine.node_rejected(
                head, graph, plan.call, plan.decision, now=rt.clock(), trace_id=trace
            )
        # an update given by hand for a node run in doubt: its output is the update
        delta = _given_update(plan.decision.output, plan.call.name)
        return graph_machine.node_finished(
            head,
            graph,
            plan.call,
            state=graph.update(state, delta, by=f"the output given for node {plan.call.name!r}"),
            delta=delta,
            now=rt.clock(),
            observed=True,
            trace_id=trace,
        )
    return _run(rt, claimed, graph, plan, state, trace)


def _given_update(text: str, node: str) -> dict[str, Any]:
    try:
        delta = json.loads(text) if text.strip() else {}
    except ValueError:
        raise InvalidStateUpdate(
            f"the output given for node {node!r} is not JSON; give the node's state update "
            "as a JSON object"
        ) from None
    if not isinstance(delta, dict):
        raise InvalidStateUpdate(f"the output given for node {node!r} is not a JSON object")
    return delta


def _run(
    rt: Runtime,
    claimed: Claimed,
    graph: CompiledGraph,
    plan: RunNode,
    state: dict[str, Any],
    trace: str,
) -> Change:
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
        )
    if plan.patch:
        state = graph.update(state, plan.patch, by=f"the edit before node {node.name!r}")
    rt.store.start_call(
        head.id, head.version, call, owner=claimed.owner, now=rt.clock(), rerun=plan.rerun
    )
    started = time.perf_counter()
    lease = functools.partial(rt.leases.lost, head.id, head.version)
    with Stops(
        rt.store, head.id, every_s=rt.settings.stop_poll_s, clock=rt.clock, lease=lease
    ) as stop:
        ctx = NodeContext(
            session_id=head.id,
            step=call.step,
            node=node.name,
            idempotency_key=node_key(head.id, call.step, node.name),
            config=head.config,
            rt=rt,
            head=head,
            stop=stop,
        )
        typed = graph.typed(state)
        try:
            returned = node.fn(typed, ctx) if node.takes_context() else node.fn(typed)
        except ContextTooLong as exc:
            why = f"node {node.name!r}: the model refused its prompt as too long: {exc}"
            return machine.fail(
                head, ErrorCode.CONTEXT, why, now=rt.clock(), open_calls=claimed.calls
            )
        except Exception as exc:
            raise NodeFailed(f"node {node.name!r} raised {type(exc).__name__}: {exc}") from exc
    duration = (time.perf_counter() - started) * 1000
    new_state = graph.update(state, returned, by=f"node {node.name!r}")
    delta = {**plan.patch, **dict(returned or {})}
    reason = approval_reason(ApprovalRule(policy=node.approve_update), dict(returned or {}))
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
    )


class NodeFailed(Exception):
    """A node raised; the session fails (INTERNAL) naming the node, and can be forked."""
