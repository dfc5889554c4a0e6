"""A graph session on the session machine: one node run per tick (docs/DESIGN.md section 12).

A graph session is an agent session whose steps are node runs: step N holds one call, named
for the node, whose fingerprint is the node's name and its input state; the call's
observation is the node's state update (a delta, JSON). The head's `result` holds the state
as it stands (`state`), the node run last (`node`) and the latest step fingerprints
(`recent`, for loop detection), so a tick reads and writes O(1) rows whatever the length.

- `ready` (the first tick, or a fork whose kept steps all ran): choose the first node.
- `executing`: run the step's node, save its update, choose and record the next node, in
  the same tick; a node with `interrupt_before` (or an approval policy that asks) is
  recorded awaiting approval: `waiting_approval`, decided like a tool call (approve, edit =
  a patch of the state, reject = go to the node's `on_reject`).
- END reached: `completed`, the final state as the answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tickwork.fsm import context, transitions, trees
from tickwork.fsm.approvals import ApprovalRule, approval_reason, rejection
from tickwork.fsm.budgets import TenantDay, exhausted_budget
from tickwork.fsm.fingerprints import call_fingerprint, step_fingerprint
from tickwork.fsm.graph import END, PROPOSAL, START, CompiledGraph, delta_text, state_fingerprint
from tickwork.fsm.joins import Join
from tickwork.fsm.loops import HISTORY, detect_loop
from tickwork.fsm.machine import stopped
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
    Status,
    Step,
    ToolCall,
    Usage,
    Value,
    call_id_for,
)

#: how the observation of a node run whose update waits for a person begins
PROPOSED = "proposed an update"
#: the config key of a branch session (a child that runs one node of its parent's fan-out,
#: docs/DESIGN.md section 16): the node it runs
BRANCH = "branch"


def branch_of(head: Head) -> str | None:
    """The node a branch session runs, or None for a graph session of its own."""
    node = head.config.get(BRANCH)
    return node if isinstance(node, str) else None


class RunNode(Value):
    """Run `call`'s node on the state with `patch` (a person's edit) applied; `rerun` if it
    had started before and is idempotent."""

    call: ToolCall
    patch: dict[str, Any] = {}
    rerun: bool = False


class Decided(Value):
    """The node will not run: a person rejected it, or gave its update by hand (in doubt)."""

    call: ToolCall
    decision: Decision


def state_of(head: Head) -> dict[str, Any]:
    """The graph session's state as it stands."""
    state = head.result.get("state")
    if isinstance(state, dict):
        return state
    initial = head.config.get("initial_state")
    return dict(initial) if isinstance(initial, dict) else {}


def last_node(head: Head) -> str:
    node = head.result.get("node")
    return node if isinstance(node, str) else START


def schedule(
    head: Head,
    graph: CompiledGraph,
    state: Mapping[str, Any],
    *,
    after: str,
    now: datetime,
    target: str | None = None,
    events: Sequence[Event] = (),
    closing: Mapping[str, Any] | None = None,
    trace_id: str = "",
    day: TenantDay | None = None,
) -> Change:
    """Record the node that follows `after` (or `target`) as the next step, or end the
    session: at END, on a cancel, a spent budget (its tenant's day quota too: `day`, what
    the tenant spent with this tick's calls) or a loop. `closing` holds what the tick
    already changed (the finished node's call state and observation)."""
    update = dict(closing or {})
    # as many fingerprints as detection looks at (a stagnation's run, a ping-pong's four)
    window = min(HISTORY, max(4, head.budgets.max_consecutive_repeats))
    recent = [str(f) for f in head.result.get("recent", ())][-window:]
    result = {**head.result, "state": dict(state), "node": after, "recent": recent}
    head = transitions.moved(head, now, result=result)

    def ended(status: Status, **fields: Any) -> Change:
        return transitions.ended(head, status, now, events, **fields).model_copy(update=update)

    if head.cancel_requested:
        return ended(Status.CANCELLED)
    chosen = target or graph.next(after, state)
    if chosen == END:
        answer = json.dumps(dict(state), indent=2, sort_keys=True, ensure_ascii=False)
        return ended(Status.COMPLETED, final_answer=answer)
    spent = exhausted_budget(head, now=now, day=day)
    if spent is not None:
        return ended(Status.FAILED, error_code=spent.code, error_message=spent.message)
    node = graph.node(chosen)
    number = head.step + 1
    fingerprint = state_fingerprint(chosen, state)
    step_print = step_fingerprint([fingerprint])
    loop = detect_loop(
        (*recent, step_print), max_consecutive_repeats=head.budgets.max_consecutive_repeats
    )
    if loop is not None:
        message = (
            f"{loop.kind.value} loop at step {number}: node {chosen!r} would run on the same "
            f"state {loop.repeats} times in a row"
            if loop.kind.value == "stagnation"
            else f"{loop.kind.value} loop at step {number}: node {chosen!r} and the node "
            "before it alternate on the same states"
        )
        loop_event = Event(
            kind=EventKind.LOOP_INTERVENTION,
            at=now,
            data={"step": number, "loop": loop.kind.value, "node": chosen, "interventions": 1},
        )
        events = (*events, loop_event)
        return ended(Status.FAILED, error_code=ErrorCode.LOOP, error_message=message)
    rule = ApprovalRule(always=node.interrupt_before, policy=node.approval_policy)
    reason = approval_reason(rule, state, of=f"node {chosen!r}")
    if reason and node.interrupt_before:
        reason = f"node {chosen!r} is interrupted before it runs"
    # the state goes in the call only when a person must see it: it is in the head anyway
    shown = dict(state) if reason else {}
    call = ToolCall(
        call_id=call_id_for(number, 0),
        step=number,
        index=0,
        name=chosen,
        arguments=shown,
        raw_arguments=json.dumps(shown, ensure_ascii=False),
        fingerprint=fingerprint,
        needs_approval=reason is not None,
        approval_reason=reason,
        state=CallState.AWAITING_APPROVAL if reason else CallState.PENDING,
    )
    step = Step(
        step=number,
        thought=f"node {chosen}",
        calls=(call,),
        fingerprint=step_print,
        trace_id=trace_id,
        at=now,
    )
    recorded = Event(
        kind=EventKind.STEP_RECORDED,
        at=now,
        data={"step": number, "calls": [call.call_id], "node": chosen, "dropped_calls": 0},
    )
    events = (*events, recorded)
    moved = head.model_copy(
        update={"step": number, "result": {**result, "recent": [*recent, step_print][-window:]}}
    )
    if reason:
        asked = Event(
            kind=EventKind.APPROVAL_REQUESTED,
            at=now,
            data={"step": number, "calls": [call.call_id], "node": chosen},
        )
        moved = moved.model_copy(
            update={"status": Status.WAITING_APPROVAL, "awaiting": (call.call_id,)}
        )
        return Change(head=moved, step=step, events=(*events, asked), **update)
    moved = moved.model_copy(update={"status": Status.EXECUTING, "awaiting": ()})
    return Change(head=moved, step=step, events=events, **update)


def start(
    head: Head,
    graph: CompiledGraph,
    *,
    now: datetime,
    trace_id: str = "",
    day: TenantDay | None = None,
) -> Change:
    """A `ready` graph session: choose the node after the last one run (START at first)."""
    transitions.require(head, Status.READY)
    after = last_node(head)
    # a branch runs its one node, then ends
    branch = branch_of(head)
    target = None if branch is None else (branch if after == START else END)
    return schedule(
        head, graph, state_of(head), after=after, target=target, now=now, trace_id=trace_id, day=day
    )


def start_node(
    head: Head,
    calls: Sequence[ToolCall],
    decisions: Mapping[str, Decision],
    *,
    idempotent: bool,
    now: datetime,
) -> Change | RunNode | Decided:
    """What the `executing` tick does with the step's node: run it, or not (a cancel, a
    rejection, an update given by hand, a run in doubt that a person must decide on). Past
    the deadline no node runs: the session fails `DEADLINE` (`machine.start_execute`). A
    cancel or the deadline closes a node found started as not run if it may run twice
    (`idempotent`), as interrupted otherwise (`transitions.close_calls`)."""
    transitions.require(head, Status.EXECUTING)
    if (ended := stopped(head, calls, decisions, idempotent=idempotent, now=now)) is not None:
        return ended
    call = next((c for c in calls if c.index == 0), None)
    if call is None:
        return Change(head=transitions.moved(head, now, status=Status.READY))
    decision = decisions.get(call.call_id)
    if call.state is CallState.DONE or call.state is CallState.REJECTED:
        if decision is None:  # its update is in the head already: go on from it
            return Change(head=transitions.moved(head, now, status=Status.READY))
        return Decided(call=call, decision=decision)
    patch = (
        dict(decision.arguments or {})
        if decision is not None and decision.kind is DecisionKind.EDIT
        else {}
    )
    if call.state is CallState.STARTED:
        if idempotent:
            return RunNode(call=call, patch=patch, rerun=True)
        return in_doubt(head, call, now=now)
    return RunNode(call=call, patch=patch)


def node_finished(
    head: Head,
    graph: CompiledGraph,
    call: ToolCall,
    *,
    state: Mapping[str, Any],
    delta: Mapping[str, Any],
    now: datetime,
    duration_ms: float = 0.0,
    tokens: int = 0,
    cost_usd: float = 0.0,
    observed: bool = False,
    trace_id: str = "",
    usage: Usage | None = None,
    day: TenantDay | None = None,
) -> Change:
    """The node of `call` ran and changed the state by `delta` (its update, with a person's
    edit; or a proposal's call: the update a person approved): save the update, then record
    the next node, in one change. `observed`: the update is recorded already (a person gave
    it by hand)."""
    text = delta_text(delta)
    event = transitions.call_finished(call, text, is_error=False, now=now, duration_ms=duration_ms)
    closing = transitions.observed(call, text, is_error=False, now=now, duration_ms=duration_ms)
    if observed:
        closing["observations"] = ()
    head = head.model_copy(
        update={"tokens": head.tokens + tokens, "cost_usd": head.cost_usd + cost_usd}
    )
    target = None
    if branch_of(head) is not None:
        # a branch ends after its node; its update is what its parent merges
        head = head.model_copy(update={"result": {**head.result, "update": dict(delta)}})
        target = END
    scheduled = schedule(
        head,
        graph,
        state,
        after=call.name.removesuffix(PROPOSAL),
        target=target,
        now=now,
        events=(event,),
        closing=closing,
        trace_id=trace_id,
        day=day,
    )
    return _charged(scheduled, call, usage, cost_usd)


def branches_joined(
    head: Head,
    graph: CompiledGraph,
    call: ToolCall,
    branches: Sequence[Head],
    *,
    cost_usd: float,
    tokens: int,
    now: datetime,
    trace_id: str = "",
    day: TenantDay | None = None,
) -> Change:
    """The branches of `call`'s fan-out have all ended (the join woke the session): their
    updates merge into the state through the graph's reducers, in the branches' order, and
    the graph goes on from the node that fanned out; their cost and tokens are charged to
    the session. A branch that did not complete fails the session as a node that raises
    does (`node_failed`), naming it; it can be forked."""
    failed = [b for b in branches if b.status is not Status.COMPLETED]
    # the charge's record, as an agent's join has it (the tenant's day spend subtracts it)
    event = Event(
        kind=EventKind.CHILDREN_JOINED,
        at=now,
        data={
            "call_id": call.call_id,
            "ended": len(branches),
            "completed": len(branches) - len(failed),
            "cost_usd": cost_usd,
            "tokens": tokens,
        },
    )
    if failed or not branches:
        first = failed[0] if failed else None
        why = (
            f"branch {first.id} of node {call.name!r} {first.status.value}"
            + (f": {first.error_code.value}: {first.error_message}" if first.error_code else "")
            if first is not None
            else f"the fan-out of node {call.name!r} has no branches"
        )
        charged = transitions.moved(
            head, now, tokens=head.tokens + tokens, cost_usd=head.cost_usd + cost_usd
        )
        return node_failed(charged, call, ErrorCode.INTERNAL, why, now=now, events=(event,))
    updates = []
    for b in branches:
        update = b.result.get("update")
        updates.append(update if isinstance(update, dict) else {})
    state, delta = graph.merge(state_of(head), updates)
    change = node_finished(
        head,
        graph,
        call,
        state=state,
        delta=delta,
        now=now,
        tokens=tokens,
        cost_usd=cost_usd,
        trace_id=trace_id,
        # the branches' cost counts in the day as theirs already: `day` as read
        day=day,
    )
    return change.model_copy(update={"events": (event, *change.events)})


def node_failed(
    head: Head,
    call: ToolCall,
    code: ErrorCode,
    why: str,
    *,
    now: datetime,
    duration_ms: float = 0.0,
    events: Sequence[Event] = (),
) -> Change:
    """The node of `call` ran and failed: it raised, what it returned was refused, or a
    branch it fanned out to did not complete. The session fails with `code` and `why` (cut
    as every failure's message is, `transitions.ended`); the node's call is closed as
    failed with the same words (a `tool_finished` error before the session's closing
    events), not as not run: it ran. `events` come first."""
    transitions.require(head, Status.EXECUTING)
    change = transitions.ended(head, Status.FAILED, now, events, error_code=code, error_message=why)
    text = f"failed: {change.head.error_message}"
    finished = transitions.call_finished(
        call, text, is_error=True, now=now, duration_ms=duration_ms
    )
    closing = change.events[len(events) :]
    return change.model_copy(
        update={
            "events": (*events, finished, *closing),
            **transitions.observed(call, text, is_error=True, now=now, duration_ms=duration_ms),
        }
    )


def node_model_called(
    head: Head, *, step: int, node: str, reply: ModelReply, cost_usd: float, now: datetime
) -> Event:
    """A node's model call (`ctx.generate`) of step `step`: the `model_called` event an
    agent's THINK records, naming the node (and the cap the call was asked again with, where
    the server refused the first for its window)."""
    return Event(
        kind=EventKind.MODEL_CALLED,
        at=now,
        data={
            "step": step,
            "node": node,
            "model": reply.model or head.model,
            "latency_ms": reply.latency_ms,
            "prompt_tokens": reply.usage.prompt_tokens,
            "completion_tokens": reply.usage.completion_tokens,
            "cached_prompt_tokens": reply.usage.cached_prompt_tokens,
            "cache_creation_tokens": reply.usage.cache_creation_tokens,
            "cost_usd": cost_usd,
            **({"cap_lowered_to": reply.cap_lowered_to} if reply.cap_lowered_to else {}),
        },
    )


def node_context_overflow(
    *, step: int, node: str, error: str, estimate: int, window: int | None, now: datetime
) -> Event:
    """The model refused a node's prompt of about `estimate` tokens as longer than its
    window (`window`: the node's policy's, None without one): the `context_overflow` event
    an agent's refused THINK records, naming the node and the window the refusal states."""
    return Event(
        kind=EventKind.CONTEXT_OVERFLOW,
        at=now,
        data={
            "step": step,
            "node": node,
            "prompt_tokens_estimate": estimate,
            "window": window,
            "stated_window": context.stated_window(error),
            "error": transitions.cap_error(error),
        },
    )


def spent(head: Head, *, tokens: int, cost_usd: float) -> Head:
    """`head` with a node's model use counted in the session's budgets."""
    return head.model_copy(
        update={"tokens": head.tokens + tokens, "cost_usd": head.cost_usd + cost_usd}
    )


def fanned_out(
    head: Head,
    call: ToolCall,
    join: Join,
    branches: Sequence[Head],
    *,
    now: datetime,
    cost_usd: float = 0.0,
    usage: Usage | None = None,
    limit: int | None = None,
) -> Change:
    """The node of `call` returned branches: the session (`head`, its model use already
    `spent`) waits for them (`trees.spawned`; with `limit`, the store inserts them only if
    their tree then holds at most `limit` sessions), and the node's model use (`usage`,
    `cost_usd`) is on the node's step, as a node's that returned an update is."""
    spawned = trees.spawned(head, call, join, branches, now=now, limit=limit)
    return _charged(spawned, call, usage, cost_usd)


def fan_out_refused(change: Change, call: ToolCall, why: str, *, now: datetime) -> Change:
    """The session's `fanned_out` `change`, which the store refused (the branches' tree is
    full: another fan-out or spawn in it saved since the tick counted): the session fails
    `INTERNAL` with `why`, as a node whose branches the tick refused does (`node_failed`),
    its state kept and nothing started; the node's model use (its events, the head's
    spending, its step's charge) is kept, as the change had it."""
    head = transitions.moved(change.head, now, status=Status.EXECUTING)
    kept = tuple(e for e in change.events if e.kind is not EventKind.CHILDREN_SPAWNED)
    failed = node_failed(head, call, ErrorCode.INTERNAL, why, now=now, events=kept)
    return failed.model_copy(update={"charged": change.charged})


def node_use(
    change: Change, call: ToolCall, *, tokens: int, cost_usd: float, usage: Usage
) -> Change:
    """`change`, which ends the session on the node of `call` without counting the model
    calls the node made (it raised, or the model refused a later prompt as too long), with
    them counted: the provider billed them whatever became of the node, so their tokens and
    cost are on the session's head and on the node's step, as a finished node's are."""
    assert change.charged is None, "the change charges the node's step already"
    if tokens == 0 and cost_usd == 0 and usage.total == 0:
        return change
    head = spent(change.head, tokens=tokens, cost_usd=cost_usd)
    return _charged(change.model_copy(update={"head": head}), call, usage, cost_usd)


def _charged(change: Change, call: ToolCall, usage: Usage | None, cost_usd: float) -> Change:
    """`change` with the node's model use on the node's own step (`ctx.generate`)."""
    if usage is None or (usage.total == 0 and cost_usd == 0):
        return change
    charge = StepCharge(step=call.step, usage=usage, cost_usd=cost_usd)
    return change.model_copy(update={"charged": charge})


def is_proposal(call: ToolCall) -> bool:
    """Whether the call holds an update a node proposed (not a node's run)."""
    return call.name.endswith(PROPOSAL)


def update_proposed(
    head: Head,
    call: ToolCall,
    *,
    delta: Mapping[str, Any],
    reason: str,
    now: datetime,
    duration_ms: float = 0.0,
    tokens: int = 0,
    cost_usd: float = 0.0,
    trace_id: str = "",
    usage: Usage | None = None,
) -> Change:
    """The node of `call` proposed `delta` and its `approve_update` policy asks a person:
    close the node's run (its observation says so; the state is not changed) and record the
    proposal as the next step, a call awaiting approval whose arguments are the update."""
    number = head.step + 1
    name = call.name + PROPOSAL
    fingerprint = call_fingerprint(name, dict(delta))
    proposal = ToolCall(
        call_id=call_id_for(number, 0),
        step=number,
        index=0,
        name=name,
        arguments=dict(delta),
        raw_arguments=delta_text(delta),
        fingerprint=fingerprint,
        needs_approval=True,
        approval_reason=reason,
        state=CallState.AWAITING_APPROVAL,
    )
    step = Step(
        step=number,
        thought=f"node {call.name} proposes an update",
        calls=(proposal,),
        fingerprint=step_fingerprint([fingerprint]),
        trace_id=trace_id,
        at=now,
    )
    text = f"{PROPOSED} for a person to decide on (step {number}): {delta_text(delta)}"
    events = (
        transitions.call_finished(call, text, is_error=False, now=now, duration_ms=duration_ms),
        Event(
            kind=EventKind.STEP_RECORDED,
            at=now,
            data={"step": number, "calls": [proposal.call_id], "node": name, "dropped_calls": 0},
        ),
        Event(
            kind=EventKind.APPROVAL_REQUESTED,
            at=now,
            data={"step": number, "calls": [proposal.call_id], "node": name},
        ),
    )
    moved = transitions.moved(
        head,
        now,
        step=number,
        status=Status.WAITING_APPROVAL,
        awaiting=(proposal.call_id,),
        tokens=head.tokens + tokens,
        cost_usd=head.cost_usd + cost_usd,
    )
    proposed = Change(
        head=moved,
        step=step,
        events=events,
        **transitions.observed(call, text, is_error=False, now=now, duration_ms=duration_ms),
    )
    return _charged(proposed, call, usage, cost_usd)


def node_rejected(
    head: Head,
    graph: CompiledGraph,
    call: ToolCall,
    decision: Decision,
    *,
    now: datetime,
    trace_id: str = "",
    day: TenantDay | None = None,
) -> Change:
    """A person rejected the node: it does not run; the graph goes to its `on_reject`."""
    text = rejection(call, decision)
    closing = {
        "call_states": ((call.call_id, CallState.DONE),),
        "observations": (Observation(call_id=call.call_id, content=text, is_error=True, at=now),),
    }
    node = graph.node(call.name)
    return schedule(
        head,
        graph,
        state_of(head),
        after=node.name,
        target=node.on_reject,
        now=now,
        closing=closing,
        trace_id=trace_id,
        day=day,
    )


def fork_state(
    initial: Mapping[str, Any], updates: Sequence[str], patch: Mapping[str, Any]
) -> dict[str, Any]:
    """The state after the kept steps' updates (JSON texts; a rejection's text is none),
    then `patch`: what a fork of a graph session starts from (unchecked: the worker checks
    it against the schema)."""
    state = dict(initial)
    for text in updates:
        try:
            delta = json.loads(text)
        except ValueError:
            continue
        if isinstance(delta, dict):
            state.update(delta)
    state.update(patch)
    return state
