"""Random sessions driven through the machine keep its invariants (docs/DESIGN.md sections 2 and 5).

A driver plays random actions against an in-memory store (`Store` in conftest.py):
ticks (the model replies or fails; a tool succeeds, fails, or its worker dies),
decisions on any call, cancels and internal failures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from tickwork.fsm.errors import (
    CallNotFound,
    IllegalTransition,
    InvalidDecision,
    SessionFinished,
)
from tickwork.fsm.machine import (
    CallModel,
    Change,
    RunTool,
    decide,
    fail,
    model_failed,
    request_cancel,
    start_execute,
    start_think,
    think,
    tool_finished,
)
from tickwork.fsm.values import Budgets, CallState, DecisionKind, ErrorCode, EventKind, Status

TOOLS = ["read_file", "write_file", "run_command", "search"]
ARGUMENTS: list[Any] = [
    {"path": "a.py"},
    {"path": "b.py"},
    {"cmd": "ls"},
    {"cmd": "rm -rf x"},
    {"cmd": "boom"},
    '{"path": ',
    "[1]",
    "",
    '{"path": "a.py"}',
]
EDITS: list[Any] = [None, {"path": "c.py"}, {"cmd": "echo hi"}, {"path": "d.py"}]

some_calls = st.lists(
    st.tuples(st.sampled_from(TOOLS), st.sampled_from(ARGUMENTS)), min_size=1, max_size=3
)
#: one reply in twenty has no calls (and completes the session)
calls = st.integers(0, 19).flatmap(lambda n: st.just([]) if n == 0 else some_calls)


@dataclass(frozen=True)
class Tick:
    """What the next tick meets: the model's answer, or a tool's outcome."""

    reply: list[tuple[str, Any]]
    #: reply | repeat (the last reply again) | previous (the one before) | transient | permanent
    model: str
    #: ok | error | died (the worker died while the tool ran)
    tool: str
    idempotent: bool


@dataclass(frozen=True)
class Decide:
    #: pick among the calls the head awaits, or among all calls (and one unknown)
    awaited: bool
    pick: int
    kind: DecisionKind
    fingerprint_ok: bool
    approver: str
    edit: Any


@dataclass(frozen=True)
class Cancel:
    pass


@dataclass(frozen=True)
class Fail:
    pass


ticks = st.builds(
    Tick,
    reply=calls,
    model=st.sampled_from(
        ["reply"] * 4 + ["repeat"] * 3 + ["previous", "transient", "transient", "permanent"]
    ),
    tool=st.sampled_from(["ok", "ok", "error", "died"]),
    idempotent=st.booleans(),
)
decides = st.builds(
    Decide,
    awaited=st.sampled_from([True, True, True, False]),
    pick=st.integers(0, 30),
    kind=st.sampled_from(DecisionKind),
    fingerprint_ok=st.sampled_from([True] * 7 + [False]),
    approver=st.sampled_from(["alice", "bob"] * 3 + [" "]),
    edit=st.sampled_from(EDITS),
)
#: mostly ticks, some decisions, rarely a cancel or an internal failure
actions = st.integers(0, 99).flatmap(
    lambda n: (
        ticks if n < 70 else decides if n < 98 else st.just(Cancel()) if n < 99 else st.just(Fail())
    )
)
budgets = st.builds(
    Budgets,
    max_steps=st.integers(2, 8),
    max_tokens=st.integers(300, 3000),
    max_cost_usd=st.sampled_from([0.05, 1.0]),
    deadline_s=st.integers(1800, 20000),
    max_consecutive_repeats=st.integers(2, 3),
    max_loop_interventions=st.integers(1, 3),
    max_model_retries=st.integers(1, 3),
    max_calls_per_step=st.integers(1, 3),
)

#: NotWaiting, AlreadyDecided and StaleDecision are IllegalTransitions too
REFUSALS = (CallNotFound, IllegalTransition, InvalidDecision)


class Driver:
    def __init__(self, build: Any, budgets: Budgets) -> None:
        self.build = build
        self.store = build.store(build.head(budgets=budgets))
        self.seconds = 0.0
        self.replies: list[Any] = []
        self.frozen: dict[str, Any] | None = None
        self.applied = 0

    @property
    def now(self) -> Any:
        return self.build.at(self.seconds)

    def apply(self, change: Change) -> None:
        before = self.store.head
        self.store.apply(change)
        self.applied += 1
        for happened in change.events:
            event(f"event {happened.kind.value}")
        if any(state is CallState.IN_DOUBT for _, state in change.call_states):
            event("in doubt")
        assert change.dead_letter is (change.head.status is Status.FAILED)
        if change.head.status is not before.status and change.head.status.terminal:
            closing = [e.kind for e in change.events]
            assert {
                Status.COMPLETED: EventKind.COMPLETED,
                Status.FAILED: EventKind.FAILED,
                Status.CANCELLED: EventKind.CANCELLED,
            }[change.head.status] in closing
        self.check()

    def act(self, action: Any, elapsed: int) -> None:
        self.seconds += elapsed
        if self.store.head.status.terminal:
            self.check_finished()
            return
        if isinstance(action, Tick):
            self.tick(action)
        elif isinstance(action, Decide):
            self.decide(action)
        elif isinstance(action, Cancel):
            self.apply(
                request_cancel(self.store.head, self.store.step_calls(), now=self.now, by="carol")
            )
        else:
            self.apply(
                fail(
                    self.store.head,
                    ErrorCode.INTERNAL,
                    "broken job",
                    now=self.now,
                    open_calls=self.store.step_calls(),
                )
            )
        if self.store.head.status.terminal and self.frozen is None:
            self.frozen = self.store.session().model_dump()

    def tick(self, tick: Tick) -> None:
        head = self.store.head
        if head.status is Status.READY:
            self.think(tick)
        elif head.status is Status.EXECUTING:
            self.execute(tick)
        else:
            with pytest.raises(IllegalTransition) as raised:
                start_think(head, now=self.now)
            assert not isinstance(raised.value, SessionFinished)
            with pytest.raises(IllegalTransition):
                start_execute(head, self.store.step_calls(), {}, idempotent=True, now=self.now)

    def think(self, tick: Tick) -> None:
        began = start_think(self.store.head, now=self.now)
        if isinstance(began, Change):
            self.apply(began)
            return
        assert began == CallModel()
        if tick.model in ("transient", "permanent"):
            self.apply(
                model_failed(
                    self.store.head,
                    error="HTTP 503",
                    transient=tick.model == "transient",
                    now=self.now,
                    jitter=0.5,
                )
            )
            return
        reply = tick.reply
        if tick.model == "repeat" and self.replies:
            reply = self.replies[-1]
        elif tick.model == "previous" and len(self.replies) > 1:
            reply = self.replies[-2]
        self.replies.append(reply)
        self.apply(
            self.build.think(
                self.store.head,
                self.build.reply(*reply),
                at_s=self.seconds,
                recent=self.store.recent(),
            )
        )

    def execute(self, tick: Tick) -> None:
        store = self.store
        todo = start_execute(
            store.head,
            store.step_calls(),
            store.decision_map(),
            idempotent=tick.idempotent,
            now=self.now,
        )
        if isinstance(todo, Change):
            self.apply(todo)
            return
        self.check_may_run(todo)
        store.mark_started(todo.call.call_id)
        event("rerun" if todo.rerun else "run")
        if tick.tool == "died":
            return
        self.apply(
            tool_finished(
                store.head,
                store.step_calls(),
                todo.call,
                output="ran" if tick.tool == "ok" else "Traceback...",
                is_error=tick.tool == "error",
                now=self.now,
            )
        )

    def check_may_run(self, run: RunTool) -> None:
        """A call runs only once a person allowed it where needed, never after a reject."""
        call = self.store.calls[run.call.call_id]
        assert call.step == self.store.head.step and call.state.open
        assert run.rerun is (call.state is CallState.STARTED)
        decisions = [d for d in self.store.decisions if d.call_id == call.call_id]
        assert all(d.kind is not DecisionKind.REJECT for d in decisions)
        assert call.state is not CallState.REJECTED
        if call.needs_approval:
            assert decisions and decisions[-1].kind in (DecisionKind.APPROVE, DecisionKind.EDIT)
        decision = self.store.decision_map().get(call.call_id)
        if decision is not None and decision.kind is DecisionKind.EDIT:
            assert run.arguments == decision.arguments
        else:
            assert call.arguments is not None
            assert run.arguments == call.arguments

    def decide(self, action: Decide) -> None:
        store = self.store
        known = store.all_calls()
        awaited = [store.calls[i] for i in store.head.awaiting]
        choices = awaited if action.awaited and awaited else [*known, self.build.call(step=99)]
        target = choices[action.pick % len(choices)]
        fields: dict[str, Any] = {
            DecisionKind.EDIT: {"arguments": action.edit},
            DecisionKind.REJECT: {"feedback": "not this"},
            DecisionKind.PROVIDE_OUTPUT: {"output": "done by hand"},
        }.get(action.kind, {})
        decision = self.build.decision(
            target,
            action.kind,
            approver=action.approver,
            at_s=self.seconds,
            fingerprint=target.fingerprint if action.fingerprint_ok else "f" * 64,
            **fields,
        )
        existing = store.decision(target.call_id)
        allowed = (
            store.head.status is Status.WAITING_APPROVAL
            and target.call_id in store.calls
            and target.state.awaits_person
            and existing is None
            and bool(action.fingerprint_ok)
            and bool(action.approver.strip())
            and not (action.kind is DecisionKind.EDIT and action.edit is None)
            and not (
                action.kind is DecisionKind.PROVIDE_OUTPUT
                and target.state is not CallState.IN_DOUBT
            )
        )
        # an in-doubt call approved before it ran is decided again
        unsettled = existing is not None and target.state is CallState.IN_DOUBT
        try:
            change = decide(store.head, known, decision, existing, now=self.now)
        except REFUSALS as refused:
            assert not isinstance(refused, SessionFinished)
            assert unsettled or not allowed, refused
            event(f"decision refused: {type(refused).__name__}")
            return
        assert unsettled or allowed
        event(f"decided: {action.kind.value} on {target.state.value}")
        self.apply(change)

    def check(self) -> None:
        store, head = self.store, self.store.head
        assert head.step == len(store.steps)
        assert [s.step for s in store.steps] == list(range(1, head.step + 1))
        for call in store.all_calls():
            observed = len(store.observations.get(call.call_id, []))
            assert observed <= 1
            assert (observed == 1) is (call.state is CallState.DONE), call
            if (
                head.status in (Status.READY, *[s for s in Status if s.terminal])
                or call.step < head.step
            ):
                assert observed == 1, f"{call.call_id} not closed while {head.status}"
        awaited = {c.call_id for c in store.step_calls() if c.state.awaits_person}
        assert set(head.awaiting) == awaited
        assert (head.status is Status.WAITING_APPROVAL) is bool(awaited)
        if head.status is Status.FAILED:
            assert head.error_code is not None
            assert EventKind.DEAD_LETTERED in [e.kind for e in store.events]
        if head.status is Status.COMPLETED:
            assert head.final_answer is not None

    def check_finished(self) -> None:
        """A finished session refuses every transition and does not change."""
        store, head, now = self.store, self.store.head, self.now
        call = store.all_calls()[-1] if store.calls else self.build.call()
        attempts: list[Callable[[], object]] = [
            lambda: start_think(head, now=now),
            lambda: think(
                head, self.build.reply(), now=now, cost_usd=0.0, trace_id="t", recent=(), rules={}
            ),
            lambda: model_failed(head, error="x", transient=True, now=now),
            lambda: start_execute(head, store.step_calls(), {}, idempotent=True, now=now),
            lambda: tool_finished(head, [call], call, output="x", is_error=False, now=now),
            lambda: decide(head, [call], self.build.decision(call), None, now=now),
            lambda: request_cancel(head, store.step_calls(), now=now),
            lambda: fail(head, ErrorCode.INTERNAL, "x", now=now),
        ]
        for attempt in attempts:
            with pytest.raises(SessionFinished):
                attempt()
        assert store.session().model_dump() == self.frozen


@settings(max_examples=200, deadline=None)
@given(
    budgets=budgets,
    script=st.lists(st.tuples(actions, st.integers(0, 900)), min_size=10, max_size=80),
)
def test_random_sessions_keep_the_invariants(
    build: Any, budgets: Budgets, script: list[tuple[Any, int]]
) -> None:
    driver = Driver(build, budgets)
    for action, elapsed in script:
        driver.act(action, elapsed)
    head = driver.store.head
    event(f"status {head.status.value} {head.error_code or ''}".strip())
    if head.status.terminal:
        driver.check_finished()
    assert head.version == driver.applied
