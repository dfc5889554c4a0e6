"""Session trees (docs/DESIGN.md section 16): what a spawn asks for, what each child may
spend, how the parent moves into and out of `waiting_children`, and what the join tells it.

A session's `spawn_agents` call starts children, each an ordinary session that records
its parent, its root and the call that spawned it. The parent waits in `waiting_children`
(holding no worker) until the join wakes it: the store counts the children's ends on the
join's row in the transaction of each child's last save, and the end that completes the
join moves the parent back to `executing` (`tickwork.store.trees`). The parent's next
EXECUTE tick then records the spawn call's observation: every child's outcome (`joined`).
A join `each` delivers the outcomes one observation at a time instead
(`tickwork.fsm.deliveries`). Nothing here does I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tickwork.fsm import transitions
from tickwork.fsm.errors import InvalidToolArguments
from tickwork.fsm.joins import Join, JoinMode
from tickwork.fsm.outcomes import outcome_of
from tickwork.fsm.transitions import Change
from tickwork.fsm.values import (
    RUNTIME_LEVEL,
    Budgets,
    Event,
    EventKind,
    Head,
    Status,
    ToolCall,
    Value,
)

#: the tool a job kind offers its sessions to start children
SPAWN_AGENTS = "spawn_agents"
#: the most children one spawn may start
MAX_CHILDREN = 64
#: the longest role name
MAX_ROLE = 64
#: the deepest level that may spawn: a root is at depth 0, its children at 1; a tree's
#: children start at once, past the tenant's quotas, so depth and size bound what a model
#: can start, with the budgets
MAX_DEPTH = 5
#: the most sessions one tree may hold, its root included
MAX_TREE_SESSIONS = 1_000
#: the most characters of a child's answer shown in the parent's observation
ANSWER_CHARS = 4000


class ChildSpec(Value):
    """One child a spawn asks for."""

    role: str
    #: the child's input, as a job of its kind is submitted (e.g. `{"goal": ...}`)
    input: dict[str, Any] = {}
    #: its model; None: its role's, else the parent's
    model: str | None = None
    #: the share of what the parent has left (cost, tokens) it may spend; None: an equal
    #: part of what the shares given leave
    share: float | None = None


class Spawn(Value):
    """A parsed `spawn_agents` call."""

    children: tuple[ChildSpec, ...]
    join: JoinMode = JoinMode.ALL


class ChildEnd(Value):
    """What a child left when it ended, as the parent's observation reports it."""

    id: str
    role: str
    status: Status
    outcome: str | None = None
    error_code: str | None = None
    error_message: str = ""
    final_answer: str | None = None
    result: dict[str, Any] = {}
    cost_usd: float = 0.0
    tokens: int = 0
    steps: int = 0


def child_ends(children: Sequence[Head]) -> list[ChildEnd]:
    """What the ended ones of `children` left, for their parent's observation."""
    return [
        ChildEnd(
            id=c.id,
            role=c.role,
            status=c.status,
            outcome=_outcome(c),
            error_code=c.error_code.value if c.error_code else None,
            error_message=c.error_message,
            final_answer=c.final_answer,
            result=dict(c.result),
            cost_usd=c.cost_usd,
            tokens=c.tokens,
            steps=c.step,
        )
        for c in children
        if c.status.terminal
    ]


def _outcome(head: Head) -> str | None:
    found = outcome_of(head.result)
    return None if found is None else found.value


def _fail(message: str) -> InvalidToolArguments:
    return InvalidToolArguments(f"{SPAWN_AGENTS}: {message}")


def parse_spawn(arguments: Mapping[str, Any]) -> Spawn:
    """The spawn `arguments` ask for; InvalidToolArguments names what is wrong (the model
    is told, as an error observation)."""
    children = arguments.get("children")
    if isinstance(children, list) and not children:  # not "give children" as if none given
        raise _fail(
            '"children" is empty: nothing to start; give 1 to '
            f'{MAX_CHILDREN} of {{"role", "input", "model"?, "share"?}}, or do the work yourself'
        )
    if not isinstance(children, list):
        raise _fail('give "children": a list of {"role", "input", "model"?, "share"?}')
    if len(children) > MAX_CHILDREN:
        raise _fail(f"at most {MAX_CHILDREN} children a spawn, not {len(children)}")
    specs = []
    for n, child in enumerate(children):
        if not isinstance(child, Mapping):
            raise _fail(f"child {n} is not an object")
        unknown = sorted(set(child) - {"role", "input", "model", "share"})
        if unknown:
            raise _fail(f"child {n} has unknown keys {', '.join(unknown)}")
        role = child.get("role")
        if not isinstance(role, str) or not 0 < len(role.strip()) <= MAX_ROLE:
            raise _fail(f"child {n}: role must be a name of 1-{MAX_ROLE} characters")
        given = child.get("input", {})
        if not isinstance(given, Mapping):
            raise _fail(f"child {n}: input must be an object")
        model = child.get("model")
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise _fail(f"child {n}: model must be a model spec such as openai:gpt-4o")
        share = child.get("share")
        if share is not None and (
            isinstance(share, bool)
            or not isinstance(share, int | float)
            or not math.isfinite(share)
            or not 0 < share <= 1
        ):
            raise _fail(f"child {n}: share must be a number in (0, 1], not {share!r}")
        specs.append(ChildSpec(role=role.strip(), input=dict(given), model=model, share=share))
    given_shares = sum(s.share or 0.0 for s in specs)
    if given_shares > 1 + 1e-9:
        raise _fail(f"the children's shares add up to {given_shares:g}; they may add up to 1")
    mode = arguments.get("join", JoinMode.ALL.value)
    if mode not in {m.value for m in JoinMode}:
        raise _fail(f"join must be one of {', '.join(m.value for m in JoinMode)}, not {mode!r}")
    return Spawn(children=tuple(specs), join=JoinMode(mode))


class Place(Value):
    """Where a session stands in its tree, which a spawn from it is checked against
    (`no_room`): the store counts it (`Store.place`), never reading the tree."""

    #: how many spawns below its root it is (the root at 0, its children at 1)
    depth: int
    #: the sessions its tree holds, its root included
    held: int


class Worded(Value):
    """How a refusal for want of room in the tree reads to whoever asked for the children:
    how they start them, and what to do instead."""

    #: how children are started ("spawn")
    verb: str
    #: what to do instead of starting too many, `{room}` the most that still fit
    fewer: str
    #: what to do instead of starting any, at the deepest level
    instead: str


#: a model's `spawn_agents`, told as its call's error observation
SPAWNS = Worded(
    verb="spawn",
    fewer="spawn at most {room}, or do the work yourself",
    instead="do the work yourself",
)
#: a graph node's fan-out (`tickwork.fsm.graph.fan_out`), told in its session's failure
FAN_OUTS = Worded(
    verb="fan out",
    fewer="fan out to at most {room} branches, or give each branch more of the work",
    instead="do the branches' work in this node",
)


def check_room(place: Place, adding: int) -> None:
    """InvalidToolArguments if a session at `place` may not spawn `adding` children
    (`no_room`)."""
    if why := no_room(place, adding):
        raise _fail(why)


def no_room(place: Place, adding: int, *, worded: Worded = SPAWNS) -> str | None:
    """Why a session at `place` may not start `adding` children, or None: it is at
    `MAX_DEPTH` of its tree, or they would take the tree past `MAX_TREE_SESSIONS`. Every
    kind of child (an agent's spawn, a graph's branches) is counted here. The store counts
    the tree again as it inserts them (`Change.tree_limit`): two spawns in one tree may
    pass here at the same moment."""
    if place.depth >= MAX_DEPTH:
        return (
            f"this session is at depth {place.depth} of its tree (its root at 0), and "
            f"sessions {worded.verb} at most {MAX_DEPTH} levels deep: {worded.instead}"
        )
    return too_many(place.held, adding, limit=MAX_TREE_SESSIONS, worded=worded)


def too_many(held: int, adding: int, *, limit: int, worded: Worded = SPAWNS) -> str | None:
    """Why `adding` more sessions may not join a tree that holds `held` (its root
    included) and may hold at most `limit`, for whoever asked (`worded`); None if they fit."""
    if held + adding <= limit:
        return None
    return (
        f"the tree holds {held} sessions, and {adding} more would pass its limit of at "
        f"most {limit}: " + worded.fewer.format(room=max(0, limit - held))
    )


def shares(specs: Sequence[ChildSpec]) -> list[float]:
    """Each child's share of what the parent has left: its own, or an equal part of what
    the given shares leave."""
    given = sum(s.share or 0.0 for s in specs)
    unset = [s for s in specs if s.share is None]
    rest = max(0.0, 1.0 - given) / len(unset) if unset else 0.0
    return [s.share if s.share is not None else rest for s in specs]


class Held(Value):
    """What a parent's children not yet charged to it may still spend, or have spent:
    the parent cannot give it again (`held_back`)."""

    tokens: int = 0
    cost_usd: float = 0.0


def held_back(joins: Sequence[Join], children: Sequence[Head]) -> Held:
    """What the parent's children of its open `each` joins hold: a running child its
    budgets, an ended one not yet delivered what it spent. (A join `all` or `first` has
    charged every child before its parent can spawn again.)"""
    tokens, cost = 0, 0.0
    for join in joins:
        if not join.open:
            continue
        taken = set(join.ends[: join.delivered])
        for child in children:
            if child.spawn_call != join.call_id or child.id in taken:
                continue
            if child.status.terminal:
                tokens, cost = tokens + child.tokens, cost + child.cost_usd
            else:
                b = child.budgets
                tokens += b.max_tokens
                cost += b.max_cost_usd if b.limits_cost else 0.0
    return Held(tokens=tokens, cost_usd=cost)


def child_budgets(
    parent: Head, share: float, *, now: datetime, base: Budgets, held: Held | None = None
) -> Budgets:
    """A child's budgets: its share of the cost and tokens its parent has left, the
    parent's deadline, and its own steps and loop limits from `base` (its role's or
    kind's). The tree never spends more than the root's budgets: each child draws from
    what its parent has left, less what its children still running hold (`held`, with
    join `each` the parent spawns again while they run), and its spending is charged to
    the parent at the join. A parent without a cost budget gives its children none
    either."""
    b = parent.budgets
    held = held or Held()
    tokens = max(1, math.floor(max(0, b.max_tokens - parent.tokens - held.tokens) * share))
    cost = base.max_cost_usd
    if b.limits_cost:
        # no cost left still gives a positive budget: the child's first check stops it
        cost = max(1e-9, (b.max_cost_usd - parent.cost_usd - held.cost_usd) * share)
        if base.limits_cost:
            cost = min(base.max_cost_usd, cost)
    deadline = parent.created_at.timestamp() + b.deadline_s - now.timestamp()
    return base.model_copy(
        update={
            "max_tokens": min(base.max_tokens, tokens),
            "max_cost_usd": cost,
            "deadline_s": max(1e-3, min(base.deadline_s, deadline)),
        }
    )


def lineage(parent: Head, call: ToolCall, role: str) -> dict[str, Any]:
    """The fields that make a head a child of `parent`, spawned by `call` as `role`: where
    it sits in the tree, who submitted it, the tenant it belongs to (a child is never seen
    outside its parent's tenant) and the runtime level (at least the level trees came
    with, for a parent from before them: no older worker may end a child, whose end must
    count on its join). Every kind of child (an agent's spawn, a graph's branch) takes
    them from here, so they cannot drift apart."""
    return {
        "parent_id": parent.id,
        "root_id": parent.root_id or parent.id,
        "spawn_call": call.call_id,
        "role": role,
        "submitted_by": parent.submitted_by,
        "tenant": parent.tenant,
        "runtime_level": max(parent.runtime_level, RUNTIME_LEVEL),
    }


def spawned(
    head: Head,
    call: ToolCall,
    join: Join,
    children: Sequence[Head],
    *,
    now: datetime,
    limit: int | None = None,
) -> Change:
    """The parent's change that starts `children` for `call`: it waits for them in
    `waiting_children`, and the store inserts the children (each with its first tick) and
    the join's row with it, in one transaction. An `each` join is inserted waited on by
    `call` itself: the first end wakes it. With `limit`, the store inserts them only if
    their tree then holds at most `limit` sessions (`Change.tree_limit`), else TreeFull."""
    transitions.require(head, Status.EXECUTING)
    if join.mode is JoinMode.EACH:
        join = join.model_copy(update={"waiting": call.call_id})
    event = Event(
        kind=EventKind.CHILDREN_SPAWNED,
        at=now,
        data={
            "call_id": call.call_id,
            "join": join.mode.value,
            "children": [{"id": c.id, "role": c.role} for c in children],
        },
    )
    return Change(
        head=transitions.moved(head, now, status=Status.WAITING_CHILDREN),
        events=(event,),
        children=tuple(children),
        join=join,
        tree_limit=limit,
    )


def waiting_again(head: Head, *, now: datetime) -> Head:
    """The parent woken before its join is complete (by hand, or by a repair that raced)
    goes back to waiting: the join's last child wakes it again."""
    return head.model_copy(update={"status": Status.WAITING_CHILDREN, "updated_at": now})


def joined(
    head: Head,
    calls: Sequence[ToolCall],
    call: ToolCall,
    join: Join,
    ends: Sequence[ChildEnd],
    *,
    now: datetime,
    max_chars: int,
) -> Change:
    """The woken parent records the spawn call's observation: each child's outcome, and
    the children's cost and tokens are added to its own (the tree's spending, charged up
    at the join)."""
    body: dict[str, Any] = {"join": join.mode.value}
    if join.mode is JoinMode.FIRST and join.first is not None:
        body["first"] = join.first
    return observed_ends(
        head,
        calls,
        call,
        body,
        ends,
        cost_usd=join.cost_usd,
        tokens=join.tokens,
        now=now,
        max_chars=max_chars,
    )


def observed_ends(
    head: Head,
    calls: Sequence[ToolCall],
    call: ToolCall,
    body: dict[str, Any],
    ends: Sequence[ChildEnd],
    *,
    cost_usd: float,
    tokens: int,
    now: datetime,
    max_chars: int,
    **data: Any,
) -> Change:
    """The parent records `body` with each of `ends` (`reported`) as `call`'s observation
    and is charged `cost_usd` and `tokens`, with a `children_joined` event (`data` added
    to it). A failed or cancelled child is reported to the model, not a failure of the
    parent; the observation is an error only when none of `ends` completed. It is capped
    at `max_chars` as any tool's output is (`cap_output`)."""
    transitions.require(head, Status.EXECUTING)
    output = transitions.cap_output(
        json.dumps(
            {**body, "children": [reported(e) for e in ends]},
            ensure_ascii=False,
            indent=1,
            default=str,
        ),
        max_chars,
    )
    completed = [e for e in ends if e.status is Status.COMPLETED]
    event = Event(
        kind=EventKind.CHILDREN_JOINED,
        at=now,
        data={
            "call_id": call.call_id,
            **data,
            "ended": len(ends),
            "completed": len(completed),
            "cost_usd": cost_usd,
            "tokens": tokens,
        },
    )
    rest = [c for c in calls if c.call_id != call.call_id and c.state.open]
    charged = transitions.moved(
        head,
        now,
        status=Status.EXECUTING if rest else Status.READY,
        tokens=head.tokens + max(0, tokens),
        cost_usd=head.cost_usd + max(0.0, cost_usd),
    )
    is_error = not completed
    return Change(
        head=charged,
        events=(event, transitions.call_finished(call, output, is_error=is_error, now=now)),
        **transitions.observed(call, output, is_error=is_error, now=now),
    )


def reported(end: ChildEnd) -> dict[str, Any]:
    """One child's entry in the observation: never its whole `result` (a repair's patch
    can be megabytes; `adopt_patch` reads it through `ToolContext.children`), only a
    patch's size and the files it changes."""
    entry: dict[str, Any] = {"id": end.id, "role": end.role, "status": end.status.value}
    if end.outcome is not None:
        entry["outcome"] = end.outcome
    if end.status is Status.COMPLETED:
        entry["answer"] = _shortened(end.final_answer or "")
    else:
        entry["error"] = _shortened(
            f"{end.error_code}: {end.error_message}" if end.error_code else end.status.value
        )
    patch = end.result.get("patch")
    if isinstance(patch, str) and patch:
        changed = end.result.get("files_changed")
        entry["patch"] = {
            "chars": len(patch),
            "files_changed": [str(f) for f in changed] if isinstance(changed, list) else [],
        }
    elif isinstance(end.result.get("patch_error"), str):
        entry["patch_error"] = _shortened(end.result["patch_error"])
    entry.update(cost_usd=round(end.cost_usd, 6), tokens=end.tokens, steps=end.steps)
    return entry


def _shortened(text: str) -> str:
    if len(text) <= ANSWER_CHARS:
        return text
    return text[:ANSWER_CHARS] + f"... [{len(text) - ANSWER_CHARS} more characters]"
