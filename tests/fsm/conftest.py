"""Builders for the fsm tests: heads, calls, replies and decisions on a fixed clock.

Tests reach the helpers through the `build` fixture instead of importing this module:
tests/fsm has no `__init__.py`, so this conftest is a module named `conftest` like
other folders' ones, and `from conftest import ...` would find whichever loaded last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tickwork.fsm.approvals import ApprovalRule
from tickwork.fsm.budgets import Exhausted
from tickwork.fsm.fingerprints import call_fingerprint
from tickwork.fsm.loops import HISTORY
from tickwork.fsm.machine import (
    CallModel,
    Change,
    RunTool,
    decide,
    parse_arguments,
    start_execute,
    start_think,
    think,
    tool_finished,
)
from tickwork.fsm.values import (
    Budgets,
    CallState,
    Decision,
    DecisionKind,
    Event,
    Head,
    ModelReply,
    Observation,
    ProposedCall,
    Session,
    Status,
    Step,
    ToolCall,
    Usage,
)

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
SESSION_ID = "sess-1"


def _destructive(arguments: Mapping[str, Any]) -> bool:
    command = str(arguments["cmd"])
    if command == "boom":
        raise RuntimeError("policy crashed")
    return command.startswith(("rm", "sudo"))


#: write_file always needs a person; run_command when destructive (and "boom" makes it raise)
RULES: dict[str, ApprovalRule] = {
    "write_file": ApprovalRule(always=True),
    "run_command": ApprovalRule(policy=_destructive),
}


class Store:
    """The in-memory store the fsm expects: applies each `Change` the way the real one must.

    It also checks what every change must respect: the fsm never touches `version`, a
    recorded step is numbered `head.step + 1`, and a call gets at most one observation.
    """

    def __init__(self, head: Head) -> None:
        self.head = head
        self.steps: list[Step] = []
        self.calls: dict[str, ToolCall] = {}
        self.observations: dict[str, list[Observation]] = {}
        self.decisions: list[Decision] = []
        self.events: list[Event] = []

    def apply(self, change: Change) -> None:
        before = self.head
        assert change.head.version == before.version, "the fsm must not touch version"
        if change.step is not None:
            assert change.step.step == before.step + 1 == change.head.step
            self.steps.append(change.step)
            self.calls.update((c.call_id, c) for c in change.step.calls)
        else:
            assert change.head.step == before.step
        for call_id, state in change.call_states:
            assert call_id in self.calls, f"state change for unknown call {call_id}"
            self.calls[call_id] = self.calls[call_id].model_copy(update={"state": state})
        for observation in change.observations:
            seen = self.observations.setdefault(observation.call_id, [])
            assert not seen, f"a second observation for {observation.call_id}"
            seen.append(observation)
        self.decisions.extend(change.decisions)
        self.events.extend(change.events)
        self.head = change.head.model_copy(update={"version": before.version + 1})

    def mark_started(self, call_id: str) -> None:
        """What the worker commits before it runs a tool."""
        self.calls[call_id] = self.calls[call_id].model_copy(update={"state": CallState.STARTED})

    def step_calls(self) -> list[ToolCall]:
        """The current step's calls in their present states, in order."""
        return sorted(
            (c for c in self.calls.values() if c.step == self.head.step), key=lambda c: c.index
        )

    def all_calls(self) -> list[ToolCall]:
        return sorted(self.calls.values(), key=lambda c: (c.step, c.index))

    def decision(self, call_id: str) -> Decision | None:
        """The call's latest decision (a call in doubt may be decided again)."""
        return self.decision_map().get(call_id)

    def decision_map(self) -> dict[str, Decision]:
        return {d.call_id: d for d in self.decisions}

    def observation(self, call_id: str) -> Observation | None:
        seen = self.observations.get(call_id, [])
        return seen[0] if seen else None

    def recent(self) -> tuple[str, ...]:
        return tuple(s.fingerprint for s in self.steps)[-HISTORY:]

    def session(self) -> Session:
        steps = tuple(
            s.model_copy(update={"calls": tuple(self.calls[c.call_id] for c in s.calls)})
            for s in self.steps
        )
        return Session(
            head=self.head,
            steps=steps,
            observations=tuple(o for seen in self.observations.values() for o in seen),
            decisions=tuple(self.decisions),
            events=tuple(self.events),
        )


class Build:
    """Values for tests; every time is `T0` plus explicit seconds."""

    t0 = T0
    session_id = SESSION_ID
    rules = RULES

    def at(self, seconds: float = 0.0) -> datetime:
        return T0 + timedelta(seconds=seconds)

    def head(
        self,
        status: Status = Status.READY,
        *,
        budgets: Budgets | Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> Head:
        if budgets is not None and not isinstance(budgets, Budgets):
            budgets = Budgets(**budgets)
        fields.setdefault(
            "config", {"system_prompt": "You repair code.", "user_prompt": "Fix the bug."}
        )
        return Head(
            id=SESSION_ID,
            kind="repair",
            status=status,
            created_at=T0,
            updated_at=T0,
            model="test-model",
            budgets=budgets or Budgets(),
            **fields,
        )

    def call(
        self,
        name: str = "read_file",
        arguments: str | dict[str, Any] | None = None,
        *,
        step: int = 1,
        index: int = 0,
        state: CallState = CallState.PENDING,
        needs_approval: bool = False,
    ) -> ToolCall:
        """A call as `think` records it (same parsing and fingerprint)."""
        parsed, raw = parse_arguments({"path": "a.py"} if arguments is None else arguments)
        return ToolCall(
            call_id=f"s{step}c{index}",
            step=step,
            index=index,
            name=name,
            arguments=parsed,
            raw_arguments=raw,
            fingerprint=call_fingerprint(name, parsed if parsed is not None else raw),
            state=state,
            needs_approval=needs_approval,
        )

    def reply(
        self,
        *calls: tuple[str, str | dict[str, Any]],
        content: str = "thinking",
        prompt_tokens: int = 100,
        completion_tokens: int = 20,
    ) -> ModelReply:
        return ModelReply(
            content=content,
            calls=tuple(ProposedCall(name=n, arguments=a) for n, a in calls),
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
            model="test-model",
            latency_ms=250.0,
        )

    def decision(
        self,
        call: ToolCall,
        kind: DecisionKind = DecisionKind.APPROVE,
        *,
        approver: str = "alice",
        at_s: float = 60.0,
        **fields: Any,
    ) -> Decision:
        fields.setdefault("fingerprint", call.fingerprint)
        return Decision(
            call_id=call.call_id, kind=kind, approver=approver, at=self.at(at_s), **fields
        )

    def think(
        self,
        head: Head,
        reply: ModelReply,
        *,
        at_s: float = 10.0,
        recent: Sequence[str] = (),
        rules: Mapping[str, ApprovalRule] | None = None,
        cost_usd: float = 0.01,
        cut: Exhausted | None = None,
    ) -> Change:
        return think(
            head,
            reply,
            now=self.at(at_s),
            cost_usd=cost_usd,
            trace_id="trace-1",
            recent=recent,
            rules=RULES if rules is None else rules,
            cut=cut,
        )

    def store(self, head: Head | None = None) -> Store:
        return Store(head or self.head())

    def drive(
        self,
        store: Store,
        reply: ModelReply,
        outputs: Sequence[tuple[str, bool]] = (),
        *,
        at_s: float,
        decide_all: bool = True,
    ) -> None:
        """One THINK, then (unless told to stop at approval) every EXECUTE of the step.

        Awaited calls are approved by alice; `outputs` are (output, is_error) for each run.
        """
        assert start_think(store.head, now=self.at(at_s)) == CallModel()
        store.apply(self.think(store.head, reply, at_s=at_s, recent=store.recent()))
        if store.head.status is Status.WAITING_APPROVAL and decide_all:
            for call_id in store.head.awaiting:
                call = store.calls[call_id]
                store.apply(
                    decide(
                        store.head,
                        store.step_calls(),
                        self.decision(call),
                        None,
                        now=self.at(at_s + 1),
                    )
                )
        results = iter(outputs)
        while store.head.status is Status.EXECUTING:
            todo = start_execute(
                store.head,
                store.step_calls(),
                store.decision_map(),
                idempotent=False,
                now=self.at(at_s + 2),
            )
            if isinstance(todo, RunTool):
                store.mark_started(todo.call.call_id)
                output, is_error = next(results)
                todo = tool_finished(
                    store.head,
                    store.step_calls(),
                    todo.call,
                    output=output,
                    is_error=is_error,
                    now=self.at(at_s + 3),
                    duration_ms=5.0,
                )
            store.apply(todo)

    def failed_session(self) -> Session:
        """Read a file, write it (approved by alice), run the failing tests; then out of steps."""
        store = self.store(self.head(budgets={"max_steps": 3}))
        self.drive(
            store,
            self.reply(
                ("read_file", {"path": "a.py"}),
                content="read it",
                prompt_tokens=100,
                completion_tokens=10,
            ),
            [("def f(): return 1", False)],
            at_s=10,
        )
        self.drive(
            store,
            self.reply(
                ("write_file", {"path": "a.py", "text": "return 2"}),
                content="fix it",
                prompt_tokens=200,
                completion_tokens=20,
            ),
            [("wrote 8 bytes", False)],
            at_s=20,
        )
        self.drive(
            store,
            self.reply(
                ("run_tests", {}), content="test it", prompt_tokens=300, completion_tokens=30
            ),
            [("1 failed", True)],
            at_s=30,
        )
        spent = start_think(store.head, now=self.at(40))
        assert isinstance(spent, Change) and spent.head.status is Status.FAILED
        store.apply(spent)
        return store.session()


@pytest.fixture(scope="session")
def build() -> Build:
    return Build()
