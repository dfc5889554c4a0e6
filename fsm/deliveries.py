"""The `each` join's deliveries (docs/DESIGN.md section 16): the children's results reach
the parent one observation at a time, each exactly once.

The spawn call's observation carries the first end (and any that ended with it); each
`wait_children` call's, the ends since the last delivery. A call with nothing to deliver
yet suspends the parent in `waiting_children`, marking the join as waited on by it; the
next end wakes it (`tickwork.store.trees`). Each save that delivers moves the join's
`delivered` on in the same transaction as the observation (`JoinMark`). Nothing here
does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tickwork.fsm import transitions
from tickwork.fsm.errors import InvalidToolArguments
from tickwork.fsm.joins import Join, JoinMark, JoinMode
from tickwork.fsm.transitions import Change
from tickwork.fsm.trees import SPAWN_AGENTS, ChildEnd, child_ends, observed_ends
from tickwork.fsm.values import Head, Status, ToolCall

#: the tool that waits for the next child of an `each` join
WAIT_CHILDREN = "wait_children"


def waited_join(joins: Sequence[Join], arguments: Mapping[str, Any]) -> Join:
    """The join a `wait_children` call waits on: the one of the spawn call its
    `spawn_call` names, else the latest `each` join with results still to come.
    InvalidToolArguments says why there is none (the model is told, as an error
    observation)."""
    unknown = sorted(set(arguments) - {"spawn_call"})
    if unknown:
        raise _fail(f"unknown arguments {', '.join(unknown)}; it takes only spawn_call")
    named = arguments.get("spawn_call")
    if named is not None:
        if not isinstance(named, str) or not named.strip():
            raise _fail('"spawn_call" must be the id of a spawn_agents call, e.g. "s3c0"')
        found = next((j for j in joins if j.call_id == named.strip()), None)
        if found is None:
            raise _fail(f"no {SPAWN_AGENTS} call {named.strip()[:80]!r} started children here")
        if found.mode is not JoinMode.EACH:
            raise _fail(
                f"{SPAWN_AGENTS} call {found.call_id} joins {found.mode.value!r}: its "
                'results came with its own observation; only join "each" is waited on'
            )
        if not found.open:
            raise _fail(f"every child of {SPAWN_AGENTS} call {found.call_id} was delivered")
        return found
    found = next((j for j in reversed(joins) if j.open), None)
    if found is None:
        raise _fail(
            f'no children left to wait for: no {SPAWN_AGENTS} call with join "each" has '
            "results still to come (each child's result is delivered once)"
        )
    return found


def _fail(message: str) -> InvalidToolArguments:
    return InvalidToolArguments(f"{WAIT_CHILDREN}: {message}")


def take(
    head: Head,
    calls: Sequence[ToolCall],
    call: ToolCall,
    join: Join,
    children: Sequence[Head],
    *,
    now: datetime,
    max_chars: int,
) -> Change:
    """`call` on the `each` `join` (`children`: the join's, as stored after it was read)
    takes the results not delivered yet, in the order they ended, or waits for the next."""
    if not join.pending:
        return waiting(head, call, join, now=now)
    ended = {c.id: c for c in children}
    ends = child_ends([ended[i] for i in join.pending])
    return delivered(head, calls, call, join, ends, now=now, max_chars=max_chars)


def delivered(
    head: Head,
    calls: Sequence[ToolCall],
    call: ToolCall,
    join: Join,
    ends: Sequence[ChildEnd],
    *,
    now: datetime,
    max_chars: int,
) -> Change:
    """`call` (the spawn call, or a `wait_children`) records the `ends` of `join` not yet
    delivered, in the order they ended, and the parent is charged their cost and tokens;
    the join's mark moves `delivered` past them in the same save. The observation says
    how many results are still to come and how to get the next."""
    assert ends and [e.id for e in ends] == list(join.pending[: len(ends)])
    after = join.delivered + len(ends)
    left = join.expected - after
    body: dict[str, Any] = {
        "join": JoinMode.EACH.value,
        "spawn_call": join.call_id,
        "remaining": left,
        "next": (
            f"{left} more children's results are to come, one observation each: call "
            f"{WAIT_CHILDREN} to wait for the next"
            if left
            else "every child's result has been delivered"
        ),
    }
    change = observed_ends(
        head,
        calls,
        call,
        body,
        ends,
        cost_usd=sum(e.cost_usd for e in ends),
        tokens=sum(e.tokens for e in ends),
        now=now,
        max_chars=max_chars,
        spawn_call=join.call_id,
    )
    mark = JoinMark(
        parent_id=join.parent_id, call_id=join.call_id, seen=join.delivered, delivered=after
    )
    return change.model_copy(update={"mark": mark})


def waiting(head: Head, call: ToolCall, join: Join, *, now: datetime) -> Change:
    """`call` has nothing to deliver yet: the parent waits in `waiting_children`, and its
    save marks `join` as waited on by `call` (the store wakes it at once if a child ended
    meanwhile)."""
    transitions.require(head, Status.EXECUTING)
    mark = JoinMark(
        parent_id=join.parent_id,
        call_id=join.call_id,
        seen=join.delivered,
        delivered=join.delivered,
        waiting=call.call_id,
    )
    return Change(
        head=transitions.moved(head, now, status=Status.WAITING_CHILDREN),
        mark=mark,
    )
