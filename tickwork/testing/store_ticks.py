"""Ticks by hand on a store: sessions, scripted model replies, and a tick as the worker
runs it without its I/O (claim, run the machine, save). The store contract
(`tickwork.testing.store_contract`) is written with these; use them in checks of your own
store or of anything that reads one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tickwork.fsm import machine
from tickwork.fsm.approvals import ApprovalRule
from tickwork.fsm.machine import Change, RunTool
from tickwork.fsm.values import (
    Budgets,
    CallState,
    Decision,
    DecisionKind,
    Head,
    ModelReply,
    ProposedCall,
    Session,
    Status,
    ToolCall,
    Usage,
)
from tickwork.store.port import Store
from tickwork.store.ticks import Claimed, Idempotent

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    """A clock the tests move by hand."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


#: `danger` always asks a person first; every other tool runs as proposed
RULES = {"danger": ApprovalRule(always=True)}

#: the idempotent tools of `new_session`'s kind, as a worker passes them to `Store.claim`
IDEMPOTENT: Idempotent = {"repair": {"read_file"}}

LEASE_S = 30.0


def new_session(
    session_id: str = "sess-1",
    *,
    now: datetime,
    kind: str = "repair",
    model: str = "gpt-test",
    budgets: Budgets | None = None,
    status: Status = Status.READY,
) -> Session:
    head = Head(
        id=session_id,
        kind=kind,
        status=status,
        created_at=now,
        updated_at=now,
        model=model,
        budgets=budgets or Budgets(),
        input={"task": "fix the bug"},
        config={"system_prompt": "You repair code.", "user_prompt": "fix it"},
    )
    return Session(head=head)


def reply(
    *calls: tuple[str, dict[str, Any] | str],
    content: str = "let me look",
    prompt_tokens: int = 100,
    completion_tokens: int = 20,
) -> ModelReply:
    """A model reply proposing `calls`, each `(tool name, arguments)`."""
    return ModelReply(
        content=content,
        calls=tuple(ProposedCall(name=n, arguments=a) for n, a in calls),
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
        latency_ms=12.5,
    )


def claim(
    store: Store,
    session_id: str,
    *,
    now: datetime,
    owner: str = "worker-1",
    version: int | None = None,
    idempotent: Idempotent | None = None,
) -> Claimed:
    """A claim that must succeed; with `idempotent` (e.g. `IDEMPOTENT`) as a worker claims."""
    if version is None:
        version = store.get(session_id).version
    claimed = store.claim(
        session_id, version, owner=owner, now=now, lease_s=LEASE_S, idempotent=idempotent
    )
    assert claimed is not None, f"claim of {session_id} at v{version} failed"
    return claimed


def think_change(
    claimed: Claimed, answer: ModelReply, *, now: datetime, prompt_estimate: int | None = None
) -> Change:
    """What a THINK tick saves after claiming: a cancel or spent budget, else the step
    (with the estimate of the prompt it answered, `prompt_estimate`, if given)."""
    started = machine.start_think(claimed.head, now=now)
    if isinstance(started, Change):
        return started
    return machine.think(
        claimed.head,
        answer,
        now=now,
        cost_usd=0.01,
        trace_id=f"trace-{claimed.head.step + 1:04d}",
        recent=claimed.recent,
        rules=RULES,
        prompt_estimate=prompt_estimate,
    )


def think(
    store: Store,
    session_id: str,
    answer: ModelReply,
    *,
    now: datetime,
    owner: str = "worker-1",
    prompt_estimate: int | None = None,
) -> Head:
    """One THINK tick: claim, start_think + think, save."""
    claimed = claim(store, session_id, now=now, owner=owner)
    change = think_change(claimed, answer, now=now, prompt_estimate=prompt_estimate)
    return store.save(change, version=claimed.head.version, owner=owner, now=now)


def execute_change(
    store: Store, claimed: Claimed, *, now: datetime, output: str = "ok", idempotent: bool = False
) -> Change:
    """What an EXECUTE tick saves after claiming, marking the call started if one runs
    (unless the claim did)."""
    todo = machine.start_execute(
        claimed.head, claimed.calls, claimed.decisions, idempotent=idempotent, now=now
    )
    if isinstance(todo, RunTool):
        if claimed.started != todo.call.call_id:
            store.start_call(
                claimed.head.id,
                claimed.head.version,
                todo.call,
                owner=claimed.owner,
                now=now,
                rerun=todo.rerun,
            )
        return machine.tool_finished(
            claimed.head,
            claimed.calls,
            todo.call,
            output=output,
            is_error=False,
            now=now,
            duration_ms=3.0,
        )
    return todo


def execute(
    store: Store,
    session_id: str,
    *,
    now: datetime,
    owner: str = "worker-1",
    output: str = "ok",
    idempotent: bool = False,
) -> Head:
    """One EXECUTE tick: claim, start_execute, start_call + tool_finished, save."""
    claimed = claim(store, session_id, now=now, owner=owner)
    change = execute_change(store, claimed, now=now, output=output, idempotent=idempotent)
    return store.save(change, version=claimed.head.version, owner=owner, now=now)


def run_step(
    store: Store, session_id: str, number: int, *, now: datetime, tool: str = "read_file"
) -> Head:
    """Think with one call whose arguments differ per step (no loop), then execute it."""
    head = think(
        store,
        session_id,
        reply((tool, {"path": f"src/f{number:04d}.py"}), content=f"step {number:04d}"),
        now=now,
    )
    while head.status is Status.EXECUTING:
        head = execute(store, session_id, now=now, output=f"contents of f{number:04d}")
    return head


def decision(
    call: ToolCall,
    kind: DecisionKind = DecisionKind.APPROVE,
    *,
    approver: str = "alice",
    now: datetime,
    **fields: Any,
) -> Decision:
    """A decision bound to the call as the approver saw it."""
    return Decision(
        call_id=call.call_id,
        kind=kind,
        approver=approver,
        at=now,
        fingerprint=call.fingerprint,
        **fields,
    )


def awaiting_calls(store: Store, session_id: str) -> list[ToolCall]:
    session = store.load(session_id)
    found = [session.call(c) for c in session.head.awaiting]
    return [c for c in found if c is not None]


def wait_for_approval(store: Store, session_id: str, clock: Clock, *tools: str) -> list[ToolCall]:
    """Think a step whose calls are `tools`; return the ones waiting for a person."""
    head = think(
        store, session_id, reply(*((t, {"n": i}) for i, t in enumerate(tools))), now=clock()
    )
    assert head.status is Status.WAITING_APPROVAL
    return awaiting_calls(store, session_id)


def in_doubt_call(store: Store, session_id: str, clock: Clock) -> ToolCall:
    """A call that started, whose worker then died: the next tick asks a person."""
    think(store, session_id, reply(("write_file", {"path": "a"})), now=clock())
    claimed = claim(store, session_id, now=clock(), owner="dead")
    store.start_call(session_id, claimed.head.version, claimed.calls[0], owner="dead", now=clock())
    later = claim(store, session_id, now=clock.advance(LEASE_S + 1), owner="w2")
    change = machine.start_execute(
        later.head, later.calls, later.decisions, idempotent=False, now=clock()
    )
    assert isinstance(change, Change)
    store.save(change, version=later.head.version, owner="w2", now=clock())
    [call] = awaiting_calls(store, session_id)
    assert call.state is CallState.IN_DOUBT
    return call
