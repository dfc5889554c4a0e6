"""Forking a session from a chosen step with a declared patch (docs/DESIGN.md section 6)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from tickwork.fsm import context
from tickwork.fsm.admission import check_concurrency, check_priority
from tickwork.fsm.budgets import PROMPT_AHEAD
from tickwork.fsm.context import MODEL_SINCE, STATED_WINDOW, Estimate, Policy, policy_of
from tickwork.fsm.errors import ForkOutOfRange, InvalidBudget, InvalidInput
from tickwork.fsm.graph import PROPOSAL, START
from tickwork.fsm.graph_machine import PROPOSED, fork_state
from tickwork.fsm.kinds import SessionKind, graph_config, graph_of, kind_of
from tickwork.fsm.loops import HISTORY
from tickwork.fsm.values import (
    RUNTIME_LEVEL,
    Budgets,
    CallState,
    Event,
    EventKind,
    Head,
    Observation,
    Session,
    Status,
    Step,
    StepKind,
    ToolCall,
    Value,
)
from tickwork.fsm.wording import dollars, plain

#: the longest instruction a fork may append (`append_instruction`, the CLI's --append-instruction)
MAX_INSTRUCTION_CHARS = 20_000


def check_instruction(text: str | None) -> None:
    """Refuse an instruction to append that is empty or longer than MAX_INSTRUCTION_CHARS
    (InvalidInput); None is no instruction."""
    if text is None:
        return
    if not text.strip():
        raise InvalidInput(
            "`append_instruction` is empty: give the instruction's text, or leave it out"
        )
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise InvalidInput(
            f"`append_instruction` is {len(text):,} characters "
            f"long; at most {MAX_INSTRUCTION_CHARS:,} are taken: give a shorter one"
        )


#: the longest system prompt a fork may set (`system_prompt`, the CLI's --system-prompt)
MAX_SYSTEM_PROMPT_CHARS = 100_000


def check_system_prompt(text: str | None) -> None:
    """Refuse a system prompt that is empty (or only whitespace) or longer than
    MAX_SYSTEM_PROMPT_CHARS (InvalidInput); None is the parent's."""
    if text is None:
        return
    if not text.strip():
        # a model told nothing of its role, tools or rules: never what a fork meant
        raise InvalidInput(
            "`system_prompt` is empty: give the new prompt's text, or "
            "leave it out to keep the parent's"
        )
    if len(text) > MAX_SYSTEM_PROMPT_CHARS:
        raise InvalidInput(
            f"`system_prompt` is {len(text):,} characters long; at most "
            f"{MAX_SYSTEM_PROMPT_CHARS:,} are taken: give a shorter one"
        )


class ForkPatch(Value):
    """What a fork changes; the parent is never touched."""

    system_prompt: str | None = None
    append_instruction: str | None = None
    #: call id -> the output to use instead of the recorded one
    tool_outputs: dict[str, str] = {}
    #: budget fields to raise (or lower) for the fork
    budgets: dict[str, Any] = {}
    #: a graph session: state fields to set in the fork (`tickwork.fsm.graph_machine`)
    state: dict[str, Any] = {}
    #: a graph session: the graph version the fork runs on (None: the parent's)
    graph_version: str | None = None
    #: the model spec the fork runs on (None: the parent's); the client checks it as a
    #: submit's (`tickwork.worker.models.check_spec`): the fork keeps no price given for the
    #: parent's model, no window the parent's model stated, and no scale its counts gave
    #: (`tickwork.fsm.context.model_since`)
    model: str | None = None
    #: the price of the fork's model by rate in USD per million tokens, as a submit stores
    #: it (`config["price"]`), checked by the client as a submit's (None: the parent's for
    #: its model, none for another)
    price: dict[str, float] | None = None
    #: the model's context window in tokens for the fork's context policy (None: the
    #: parent's, or the smaller one its model stated when it refused a prompt; with another
    #: `model` the client gives that model's, as a submit takes it)
    context_window: int | None = None
    #: admission (docs/DESIGN.md section 15): the fork's priority, concurrency key and
    #: its limit (None: the parent's; a new key without a limit allows one at a time)
    priority: int | None = None
    concurrency_key: str | None = None
    max_per_key: int | None = None


def fork_admission(parent: Head, patch: ForkPatch) -> tuple[int, str | None, int | None]:
    """The fork's priority, concurrency key and per-key limit: the parent's, but for what
    `patch` gives (InvalidInput for a value a submit would refuse, or a limit with no key
    to limit). A fork is more of the parent's work: else it jumped or escaped the queue
    its parent waited in, its key's one-at-a-time with it."""
    priority = parent.priority if patch.priority is None else check_priority(patch.priority)
    key = parent.concurrency_key if patch.concurrency_key is None else patch.concurrency_key
    per_key = patch.max_per_key
    if per_key is None and key == parent.concurrency_key:
        per_key = parent.max_per_key
    if key is None and per_key is not None:
        raise InvalidInput(
            f"`max_per_key` needs a concurrency key and session {parent.id} has none: give "
            "`concurrency_key` with it"
        )
    key, per_key = check_concurrency(key, per_key)
    return priority, key, per_key


@dataclass(frozen=True)
class KeptUsage:
    """What a fork's kept steps used: they count against its budgets and counters, but
    were spent by its parent."""

    steps: int
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class TokenPrice:
    """What a token of the fork's model costs in USD, the prompt's and the completion's
    (0: unpriced), for the budget check of its next model call."""

    prompt_usd: float = 0.0
    completion_usd: float = 0.0


#: no price: the cost budget counts what the kept steps spent only
UNPRICED = TokenPrice()


def next_prompt(
    head: Head,
    steps: Sequence[Step],
    observations: Sequence[Observation],
    *,
    estimate: Estimate | None = None,
) -> int:
    """The tokens the next model call of the session `head` with `steps` and `observations`
    (a fork's) reads, as its THINK estimates them before the call
    (`tickwork.worker.tick.agent.think`, `tickwork.worker.models.pricing.next_call`): the
    prompt its context policy plans (its system prompt, the kept transcript with its
    outputs and instructions, or the request of the compaction it makes first) by
    `estimate`, scaled as the server counted the last, and at least what the last reply
    read and wrote while that prompt grew from it on the model that made it (another
    model's tokenizer counts its own). Without `estimate`, that floor alone; 0 for a graph
    session, whose nodes build their own prompts."""
    if not steps or kind_of(head) is SessionKind.GRAPH:
        return 0
    last = steps[-1]
    floor = (
        last.usage.total
        if last.kind is StepKind.REPLY and last.step > context.model_since(head)
        else 0
    )
    if estimate is None:
        return floor
    seen = {o.call_id: o for o in observations}
    stored = context.stored_view(steps)
    by = context.scale(head, steps, seen, estimate=estimate)
    plan = context.plan(head, steps, seen, estimate=estimate, by=by, stored=stored)
    tokens = math.ceil(plan.unscaled * by)
    return max(tokens, floor) if plan.view == stored else tokens


def kept_usage(steps: Sequence[Step]) -> KeptUsage:
    """The steps, tokens and cost of `steps`, the steps a fork keeps of its parent."""
    return KeptUsage(
        steps=len(steps),
        tokens=sum(s.usage.total for s in steps),
        cost_usd=sum(s.cost_usd for s in steps),
    )


def fork(
    parent: Session,
    *,
    new_id: str,
    from_step: int,
    patch: ForkPatch,
    by: str,
    now: datetime,
    price: TokenPrice = UNPRICED,
    estimate: Estimate | None = None,
) -> Session:
    """A new session holding the parent's steps 1..`from_step`, with `patch` applied.

    Calls of the kept steps that never got an observation run again (asking a person
    first where the call needed approval). Counters are recomputed from the kept steps
    and count against the fork's budgets (InvalidBudget if they, with the next model
    call's prompt at `price`, leave its answer no room: `next_prompt`, by `estimate`);
    the deadline counts from the fork.
    """
    last = parent.head.step
    if not 0 <= from_step <= last:
        if last == 0:  # "steps 1..0" and "between 0 and 0" read as a fault of their own
            raise ForkOutOfRange(
                f"session {parent.head.id} has no steps; fork it from step 0 (`from_step` 0), "
                f"not {from_step}"
            )
        raise ForkOutOfRange(
            f"session {parent.head.id} has steps 1..{last}; "
            f"choose `from_step` between 0 and {last}, not {from_step}"
        )
    check_instruction(patch.append_instruction)
    check_system_prompt(patch.system_prompt)
    steps = parent.steps[:from_step]
    kept = {c.call_id: c for s in steps for c in s.calls}
    unknown = sorted(set(patch.tool_outputs) - set(kept))
    if unknown:
        raise InvalidInput(_unpatchable(parent, from_step, unknown, kept))
    if (unread := _summarised(patch, steps)) is not None:
        raise InvalidInput(f"session {parent.head.id}: {unread}")
    try:
        budgets = Budgets(**{**parent.head.budgets.model_dump(), **patch.budgets})
    except ValueError as exc:
        raise InvalidInput(f"invalid budget in the fork patch: {exc}") from exc
    priority, concurrency_key, max_per_key = fork_admission(parent.head, patch)
    usage = kept_usage(steps)

    observations: list[Observation] = []
    for call_id in kept:
        if call_id in patch.tool_outputs:
            observations.append(
                Observation(call_id=call_id, content=patch.tool_outputs[call_id], at=now)
            )
        elif (seen := parent.observation(call_id)) is not None:
            observations.append(seen)
    if kind_of(parent.head) is SessionKind.GRAPH and steps and steps[-1].calls:
        # a node run whose proposed update is not kept runs again (and proposes again)
        final = steps[-1].calls[0].call_id
        observations = [
            o for o in observations if not (o.call_id == final and o.content.startswith(PROPOSED))
        ]
    observed = {o.call_id for o in observations}
    decisions = tuple(d for d in parent.decisions if d.call_id in observed)

    def reset(call: ToolCall) -> CallState:
        if call.call_id in observed:
            return CallState.DONE
        if call.state in (CallState.STARTED, CallState.IN_DOUBT):
            return CallState.IN_DOUBT  # it may have run: a person decides, as in the parent
        return CallState.AWAITING_APPROVAL if call.needs_approval else CallState.PENDING

    new_steps = tuple(
        s.model_copy(
            update={"calls": tuple(c.model_copy(update={"state": reset(c)}) for c in s.calls)}
        )
        for s in steps
    )
    open_calls = [c for s in new_steps for c in s.calls if c.state is not CallState.DONE]
    awaiting = tuple(c.call_id for c in open_calls if c.state.awaits_person)
    status = (
        Status.WAITING_APPROVAL if awaiting else Status.EXECUTING if open_calls else Status.READY
    )

    config = dict(parent.head.config)
    if "instructions" in config:
        # an instruction after a step the fork does not keep (a fork of a fork, from before
        # its instruction) belongs to that history: else it came after the fork's new step
        config["instructions"] = [
            i for i in config["instructions"] if int(i["after_step"]) <= from_step
        ]
        if not config["instructions"]:
            del config["instructions"]
    if patch.system_prompt is not None:
        config["system_prompt"] = patch.system_prompt
    if patch.append_instruction:
        config["instructions"] = [
            *config.get("instructions", []),
            {"after_step": from_step, "text": patch.append_instruction},
        ]
    model = patch.model or parent.head.model
    if model != parent.head.model:
        # a price given at submit priced the parent's model, as a window it stated was its own
        config.pop("price", None)
        # the kept replies' prompts were counted by the parent's model's tokenizer
        config[MODEL_SINCE] = from_step
    if patch.price is not None:
        config["price"] = dict(patch.price)
    stated = parent.head.result.get(STATED_WINDOW) if model == parent.head.model else None
    window = patch.context_window or stated
    if isinstance(window, int) and not isinstance(window, bool):
        policy = policy_of(config)
        config["context"] = (
            Policy(window=window) if policy is None else replace(policy, window=window)
        ).to_config()
    graph = graph_of(config)
    if (patch.state or patch.graph_version) and graph is None:
        raise InvalidInput(
            f"session {parent.head.id} is not a graph session; only a graph's state is patched"
        )
    if graph is not None and (agents := _agent_patches(patch)):
        # a graph has no prompt, and a node run's output is its state update: what these
        # would change, nothing reads (or, a hand-written output, it breaks the state)
        raise InvalidInput(
            f"session {parent.head.id} is a graph session: a fork patches its state "
            f"(`state`), not {' or '.join(agents)}"
        )
    if graph is not None and patch.graph_version is not None:
        config.update(graph_config(graph.name, patch.graph_version))
    # the kept steps' cost counts against the fork's budget, but was spent by the parent:
    # a tenant's daily spend takes it off again (`store.quotas.spent_today`)
    head = Head(
        id=new_id,
        kind=parent.head.kind,
        status=status,
        version=0,
        created_at=now,
        updated_at=now,
        model=model,
        budgets=budgets,
        input=parent.head.input,
        config=config,
        step=from_step,
        tokens=usage.tokens,
        cost_usd=usage.cost_usd,
        parent_id=parent.head.id,
        fork_step=from_step,
        awaiting=awaiting,
        submitted_by=by,
        tenant=parent.head.tenant,
        priority=priority,
        concurrency_key=concurrency_key,
        max_per_key=max_per_key,
        # the fork is made by this code, so it needs at least this code's level
        runtime_level=max(parent.head.runtime_level, RUNTIME_LEVEL),
        result=_graph_result(config, new_steps, observations, patch) if graph is not None else {},
    )
    # the next prompt as the fork sends it: its own system prompt, outputs and instruction
    ahead = next_prompt(head, new_steps, observations, estimate=estimate)
    if (used_up := _used_up(budgets, usage, ahead=ahead, price=price)) is not None:
        raise InvalidBudget(f"session {parent.head.id}: {used_up}")
    event = Event(
        kind=EventKind.FORKED,
        at=now,
        data={
            "parent_id": parent.head.id,
            "from_step": from_step,
            "by": by,
            "patch": patch.model_dump(exclude_defaults=True),
            "inherited_cost_usd": usage.cost_usd,
        },
    )
    return Session(
        head=head,
        steps=new_steps,
        observations=tuple(observations),
        decisions=decisions,
        events=(event,),
    )


def _summarised(patch: ForkPatch, steps: tuple[Step, ...]) -> str | None:
    """Why outputs of `patch` would never reach the model, or None: a kept compaction's
    summary stands in the prompt for the steps it covers, their outputs with them (a masked
    output is still read back whole by `recall`, the patched one)."""
    compactions = [s for s in steps if s.kind is StepKind.COMPACTION]
    if not compactions or not patch.tool_outputs:
        return None
    step_of = {c.call_id: s.step for s in steps for c in s.calls}
    through = compactions[-1].compacted_through
    hidden = sorted(
        (c for c in patch.tool_outputs if step_of[c] <= through), key=step_of.__getitem__
    )
    if not hidden:
        return None
    # the first summary to take the earliest of them in: forking before it, the new output
    # is what the model reads, and what any later compaction summarises
    first = next(s for s in compactions if s.compacted_through >= step_of[hidden[0]])
    latest = compactions[-1]
    later = (
        f" (and in the summary of steps 1-{latest.compacted_through} made at step {latest.step})"
        if latest is not first
        else ""
    )
    return (
        f"cannot patch the output of {', '.join(hidden)}: the model reads it only through the "
        f"summary of steps 1-{first.compacted_through} made at step {first.step}{later}, "
        f"which the fork keeps, so it would never see the new output. Fork from before step "
        f"{first.step} (`from_step` {first.step - 1} or less), or say what it should know "
        "with `append_instruction`"
    )


def _used_up(
    budgets: Budgets, usage: KeptUsage, *, ahead: int = 0, price: TokenPrice = UNPRICED
) -> str | None:
    """What budget of a fork its kept steps (`usage`) have used up, or leave no room for
    the answer of its next model call, whose prompt is `ahead` tokens at `price`, or None:
    a fork counts their steps, tokens and cost against its budgets, and the runtime stops
    a session before a call whose prompt leaves it no completion token
    (`tickwork.fsm.budgets.exhausted_budget`), so one at or below them fails at once."""
    if not usage.steps:
        return None
    kept = f"steps 1..{usage.steps} are kept"
    tokens = usage.tokens
    cost = usage.cost_usd
    if budgets.max_steps <= usage.steps:
        return (
            f"{kept} and count against `max_steps`, which is {budgets.max_steps}; "
            f"give `max_steps` above {usage.steps}"
        )
    prompt = (
        f", and {PROMPT_AHEAD.format(shown=f'{ahead:,}')} tokens (the transcript the fork sends it)"
        if ahead
        else ""
    )
    if budgets.max_tokens <= tokens + ahead:
        return (
            f"{kept} and used {tokens:,} tokens, which count against `max_tokens` "
            f"({budgets.max_tokens:,}){prompt}; give `max_tokens` above {tokens + ahead:,}"
        )
    ahead_usd = ahead * price.prompt_usd
    # the answer needs room for one completion token at least, as the runtime's cap does
    needed = cost + ahead_usd + price.completion_usd
    if budgets.limits_cost and (budgets.max_cost_usd <= cost or budgets.max_cost_usd < needed):
        more = f", and {PROMPT_AHEAD.format(shown=f'${dollars(ahead_usd)}')}" if ahead_usd else ""
        floor = max(needed, cost)
        return (
            f"{kept} and spent ${dollars(cost)}, which counts against `max_cost_usd` "
            f"(${plain(budgets.max_cost_usd)}){more}; "
            f"give `max_cost_usd` above {dollars(floor, up=True)}"
        )
    return None


def _agent_patches(patch: ForkPatch) -> list[str]:
    """The parts of `patch` only an agent session has a use for, by their fields in
    backticks (the command line says its flags: `tickwork.flags.in_flags`)."""
    given = {
        "`system_prompt`": patch.system_prompt is not None,
        "`append_instruction`": bool(patch.append_instruction),
        "`tool_outputs`": bool(patch.tool_outputs),
    }
    return [name for name, set_ in given.items() if set_]


def _graph_result(
    config: dict[str, Any],
    steps: tuple[Step, ...],
    observations: list[Observation],
    patch: ForkPatch,
) -> dict[str, Any]:
    """A graph fork's state: the parent's first state, the kept node runs' updates, the
    patch; its last node run, and its recent fingerprints (`tickwork.fsm.graph_machine`)."""
    seen = {o.call_id: o for o in observations}
    done = [c for s in steps for c in s.calls if c.call_id in seen]
    updates = [seen[c.call_id].content for c in done if not seen[c.call_id].is_error]
    initial = config.get("initial_state")
    state = fork_state(initial if isinstance(initial, dict) else {}, updates, patch.state)
    return {
        "state": state,
        "node": done[-1].name.removesuffix(PROPOSAL) if done else START,
        "recent": [s.fingerprint for s in steps][-HISTORY:],
    }


def _unpatchable(
    parent: Session, from_step: int, unknown: list[str], kept: Mapping[str, Any]
) -> str:
    """Why a fork from `from_step` cannot patch the outputs of `unknown`, and what can be."""
    later = {c.call_id: s.step for s in parent.steps for c in s.calls}
    why = [
        f"{call} is a call of step {later[call]}: fork from step {later[call]} or later "
        f"(`from_step` {later[call]})"
        if call in later
        else f"{call} is no call of session {parent.head.id}"
        for call in unknown
    ]
    steps = "step 1" if from_step == 1 else f"steps 1..{from_step}"
    calls = f"kept: {steps} ({', '.join(kept) or 'no calls'})" if from_step else "kept: no step"
    return f"cannot patch the output of {', '.join(unknown)}: {'; '.join(why)}; {calls}"
