"""The session state machine, transition by transition (docs/DESIGN.md section 2).

Decisions, cancel and approval rules are in test_decisions.py, budgets in test_budgets.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from tickwork.fsm import transitions
from tickwork.fsm.budgets import model_retry_delay
from tickwork.fsm.errors import IllegalTransition, SessionFinished
from tickwork.fsm.fingerprints import step_fingerprint
from tickwork.fsm.machine import (
    CallModel,
    Change,
    RunTool,
    context_overflow,
    decide,
    fail,
    model_failed,
    request_cancel,
    start_execute,
    start_think,
    think,
    tool_finished,
)
from tickwork.fsm.values import CallState, DecisionKind, ErrorCode, EventKind, Status

PENDING, DONE = CallState.PENDING, CallState.DONE


def kinds(change: Change) -> list[EventKind]:
    return [e.kind for e in change.events]


# THINK, before the model is called


@pytest.mark.parametrize(
    ("fields", "budgets", "at_s", "status", "code", "field"),
    [
        pytest.param(
            {"cancel_requested": True}, {}, 0, Status.CANCELLED, None, None, id="cancel_requested"
        ),
        pytest.param(
            {"cancel_requested": True, "step": 5},
            {"max_steps": 5},
            0,
            Status.CANCELLED,
            None,
            None,
            id="cancel_before_budgets",
        ),
        pytest.param(
            {"step": 5},
            {"max_steps": 5},
            0,
            Status.FAILED,
            ErrorCode.BUDGET_STEPS,
            "max_steps",
            id="steps",
        ),
        pytest.param(
            {"tokens": 1000},
            {"max_tokens": 1000},
            0,
            Status.FAILED,
            ErrorCode.BUDGET_TOKENS,
            "max_tokens",
            id="tokens",
        ),
        pytest.param(
            {"cost_usd": 2.0},
            {"max_cost_usd": 2.0},
            0,
            Status.FAILED,
            ErrorCode.BUDGET_COST,
            "max_cost_usd",
            id="cost",
        ),
        pytest.param(
            {},
            {"deadline_s": 60},
            60,
            Status.FAILED,
            ErrorCode.DEADLINE,
            "deadline_s",
            id="deadline",
        ),
        pytest.param(
            {"step": 9, "tokens": 5000},
            {"max_steps": 5, "max_tokens": 10},
            0,
            Status.FAILED,
            ErrorCode.BUDGET_STEPS,
            "max_steps",
            id="steps_checked_first",
        ),
    ],
)
def test_start_think_ends_the_session(
    build: Any,
    fields: dict[str, Any],
    budgets: dict[str, Any],
    at_s: float,
    status: Status,
    code: ErrorCode | None,
    field: str | None,
) -> None:
    head = build.head(budgets=budgets, **fields)
    change = start_think(head, now=build.at(at_s))
    assert isinstance(change, Change)
    assert change.head.status is status
    assert change.head.error_code is code
    assert change.head.updated_at == build.at(at_s)
    assert not change.enqueue
    if status is Status.FAILED:
        assert field in change.head.error_message
        assert change.dead_letter
        assert kinds(change) == [EventKind.FAILED, EventKind.DEAD_LETTERED]
        assert change.events[0].data["error_code"] == code
    else:
        assert not change.dead_letter
        assert kinds(change) == [EventKind.CANCELLED]


@pytest.mark.parametrize(
    ("fields", "budgets", "at_s"),
    [
        pytest.param({}, {}, 0, id="fresh"),
        pytest.param(
            {"step": 4, "tokens": 999, "cost_usd": 1.99},
            {"max_steps": 5, "max_tokens": 1000, "max_cost_usd": 2.0, "deadline_s": 60},
            59.9,
            id="just_within_every_budget",
        ),
    ],
)
def test_start_think_calls_the_model_within_budget(
    build: Any, fields: dict[str, Any], budgets: dict[str, Any], at_s: float
) -> None:
    assert start_think(build.head(budgets=budgets, **fields), now=build.at(at_s)) == CallModel()


# THINK, recording the model's reply


@pytest.mark.parametrize(
    ("calls", "status", "awaiting"),
    [
        pytest.param([], Status.COMPLETED, (), id="no_calls_completes"),
        pytest.param([("read_file", {"path": "a.py"})], Status.EXECUTING, (), id="calls_execute"),
        pytest.param(
            [("read_file", {"path": "a.py"}), ("write_file", {"path": "a.py", "text": ""})],
            Status.WAITING_APPROVAL,
            ("s1c1",),
            id="always_needs_approval",
        ),
        pytest.param(
            [("run_command", {"cmd": "rm -rf build"})],
            Status.WAITING_APPROVAL,
            ("s1c0",),
            id="policy_true",
        ),
        pytest.param([("run_command", {"cmd": "ls"})], Status.EXECUTING, (), id="policy_false"),
        pytest.param(
            [("run_command", {"cmd": "boom"})],
            Status.WAITING_APPROVAL,
            ("s1c0",),
            id="policy_raises",
        ),
        pytest.param(
            [("write_file", {"p": 1}), ("run_command", {"cmd": "sudo x"})],
            Status.WAITING_APPROVAL,
            ("s1c0", "s1c1"),
            id="all_need_approval",
        ),
        pytest.param([("read_file", '{"path": ')], Status.EXECUTING, (), id="malformed_arguments"),
    ],
)
def test_think_outcome(
    build: Any, calls: list[tuple[str, Any]], status: Status, awaiting: tuple[str, ...]
) -> None:
    change = build.think(build.head(), build.reply(*calls, content="the answer"))
    assert change.head.status is status
    assert change.head.awaiting == awaiting
    assert change.step is not None and change.step.step == 1
    states = {c.call_id: c.state for c in change.step.calls}
    assert {k for k, v in states.items() if v is CallState.AWAITING_APPROVAL} == set(awaiting)
    assert all(v is PENDING for k, v in states.items() if k not in awaiting)
    assert change.enqueue is status.runnable
    assert not change.dead_letter
    assert (EventKind.APPROVAL_REQUESTED in kinds(change)) is bool(awaiting)


def test_think_without_calls_completes_with_the_final_answer(build: Any) -> None:
    change = build.think(build.head(), build.reply(content="Fixed: off by one."))
    assert change.head.status is Status.COMPLETED
    assert change.head.final_answer == "Fixed: off by one."
    assert change.step is not None and change.step.calls == ()
    assert kinds(change) == [EventKind.MODEL_CALLED, EventKind.STEP_RECORDED, EventKind.COMPLETED]


def test_think_records_the_step(build: Any) -> None:
    head = build.head(step=3, tokens=1000, cost_usd=0.5, model_attempts=2)
    reply = build.reply(
        ("read_file", {"path": "a.py"}),
        ("search", {"q": "bug"}),
        content="look first",
        prompt_tokens=300,
        completion_tokens=40,
    )
    change = build.think(head, reply, at_s=42, cost_usd=0.25)
    step = change.step
    assert step is not None
    assert (step.step, step.thought, step.usage, step.cost_usd) == (
        4,
        "look first",
        reply.usage,
        0.25,
    )
    assert (step.latency_ms, step.trace_id, step.at, step.model) == (
        250.0,
        "trace-1",
        build.at(42),
        "test-model",
    )
    assert [c.call_id for c in step.calls] == ["s4c0", "s4c1"]
    assert [(c.step, c.index, c.name) for c in step.calls] == [
        (4, 0, "read_file"),
        (4, 1, "search"),
    ]
    assert step.fingerprint == step_fingerprint(c.fingerprint for c in step.calls)
    assert (change.head.step, change.head.tokens, change.head.cost_usd) == (4, 1340, 0.75)
    assert change.head.model_attempts == 0
    assert change.head.version == head.version
    assert change.events[1].data == {"step": 4, "calls": ["s4c0", "s4c1"], "dropped_calls": 0}


@pytest.mark.parametrize(
    ("raw", "arguments"),
    [
        pytest.param('{"path": ', None, id="truncated"),
        pytest.param("[1, 2]", None, id="array"),
        pytest.param('"a.py"', None, id="string"),
        pytest.param("not json", None, id="prose"),
        pytest.param("", {}, id="empty_means_no_arguments"),
        pytest.param('{"path": "a.py"}', {"path": "a.py"}, id="object"),
    ],
)
def test_think_records_malformed_arguments_as_none(
    build: Any, raw: str, arguments: dict[str, Any] | None
) -> None:
    change = build.think(build.head(), build.reply(("read_file", raw)))
    (call,) = change.step.calls
    assert call.arguments == arguments
    assert call.raw_arguments == raw
    assert change.head.status is Status.EXECUTING


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        pytest.param("read_file", '{"path": "\\ud800.py"}', id="in_a_value"),
        pytest.param("read_file", '{"\\udcff": 1}', id="in_a_key"),
        pytest.param("read_file", '{"path": "a.py", "x": "\ud800"}', id="in_the_text"),
        pytest.param("read\udcfffile", "{}", id="in_the_name"),
    ],
)
def test_a_lone_surrogate_in_a_call_is_recorded_as_u_fffd(build: Any, name: str, raw: str) -> None:
    # a JSON \ud800 decodes to a character no UTF-8 holds: the fingerprint could not be
    # taken (the tick failed INTERNAL), and no database stores it; it is kept as the store
    # keeps any such text
    change = build.think(build.head(), build.reply((name, raw)))
    (call,) = change.step.calls
    shown = json.dumps([call.name, call.arguments, call.raw_arguments], ensure_ascii=False)
    assert "\ufffd" in shown
    assert shown.encode()
    assert change.head.status is Status.EXECUTING


def test_think_drops_calls_beyond_max_calls_per_step(build: Any) -> None:
    head = build.head(budgets={"max_calls_per_step": 2})
    reply = build.reply(*[("read_file", {"path": f"{i}.py"}) for i in range(5)])
    change = build.think(head, reply)
    assert [c.call_id for c in change.step.calls] == ["s1c0", "s1c1"]
    recorded = next(e for e in change.events if e.kind is EventKind.STEP_RECORDED)
    assert recorded.data["dropped_calls"] == 3
    assert recorded.data["calls"] == ["s1c0", "s1c1"]


LOOPING = [("read_file", {"path": "a.py"}), ("write_file", {"path": "a.py", "text": "x"})]


@pytest.mark.parametrize(
    ("interventions", "status"),
    [
        pytest.param(0, Status.READY, id="first_intervention"),
        pytest.param(1, Status.READY, id="last_allowed_intervention"),
        pytest.param(2, Status.FAILED, id="one_more_than_max_fails"),
    ],
)
def test_loop_blocks_every_call(build: Any, interventions: int, status: Status) -> None:
    reply = build.reply(*LOOPING)
    fingerprint = build.think(build.head(), reply).step.fingerprint
    head = build.head(
        step=2, loop_interventions=interventions, budgets={"max_loop_interventions": 2}
    )
    change = build.think(head, reply, recent=(fingerprint, fingerprint))
    assert change.head.status is status
    assert change.head.loop_interventions == interventions + 1
    assert change.step is not None and change.step.step == 3
    ids = [c.call_id for c in change.step.calls]
    assert change.call_states == tuple((i, DONE) for i in ids)
    assert [o.call_id for o in change.observations] == ids
    assert all(o.is_error and o.content.startswith("Loop detected") for o in change.observations)
    assert change.head.awaiting == ()
    assert EventKind.APPROVAL_REQUESTED not in kinds(change)
    loop = next(e for e in change.events if e.kind is EventKind.LOOP_INTERVENTION)
    assert loop.data == {"step": 3, "loop": "stagnation", "interventions": interventions + 1}
    if status is Status.FAILED:
        assert change.head.error_code is ErrorCode.LOOP
        assert change.dead_letter
        assert kinds(change)[-2:] == [EventKind.FAILED, EventKind.DEAD_LETTERED]
    else:
        assert change.enqueue


def test_ping_pong_is_intervened(build: Any) -> None:
    a = build.reply(("read_file", {"path": "a.py"}))
    b = build.reply(("read_file", {"path": "b.py"}))
    fa, fb = (build.think(build.head(), r).step.fingerprint for r in (a, b))
    change = build.think(build.head(step=3), b, recent=(fa, fb, fa))
    assert change.head.status is Status.READY
    assert change.events[-1].data["loop"] == "ping_pong"
    assert "alternating" in change.observations[0].content


def test_loop_repeats_come_from_the_session_budgets(build: Any) -> None:
    reply = build.reply(("read_file", {"path": "a.py"}))
    fingerprint = build.think(build.head(), reply).step.fingerprint
    assert (
        build.think(build.head(step=1), reply, recent=(fingerprint,)).head.status
        is Status.EXECUTING
    )
    strict = build.head(step=1, budgets={"max_consecutive_repeats": 2})
    assert build.think(strict, reply, recent=(fingerprint,)).head.status is Status.READY


# a failed model call


@pytest.mark.parametrize(
    ("attempts", "transient", "retry_after", "jitter", "status", "delay"),
    [
        pytest.param(0, True, None, 0.0, Status.READY, model_retry_delay(1), id="transient_first"),
        pytest.param(
            0,
            True,
            None,
            1.0,
            Status.READY,
            model_retry_delay(1, jitter=1.0),
            id="transient_jitter",
        ),
        pytest.param(
            2, True, None, 0.0, Status.READY, model_retry_delay(3), id="transient_last_retry"
        ),
        pytest.param(3, True, None, 0.0, Status.FAILED, 0.0, id="transient_past_retries"),
        pytest.param(0, False, None, 0.0, Status.FAILED, 0.0, id="permanent_fails_at_once"),
        pytest.param(0, True, 30.0, 0.0, Status.READY, 30.0, id="retry_after_longer"),
        pytest.param(
            2,
            True,
            0.1,
            0.0,
            Status.READY,
            model_retry_delay(3),
            id="retry_after_shorter_than_backoff",
        ),
    ],
)
def test_model_failed(
    build: Any,
    attempts: int,
    transient: bool,
    retry_after: float | None,
    jitter: float,
    status: Status,
    delay: float,
) -> None:
    head = build.head(step=2, tokens=50, model_attempts=attempts, budgets={"max_model_retries": 3})
    change = model_failed(
        head,
        error="HTTP 503",
        transient=transient,
        now=build.at(5),
        jitter=jitter,
        retry_after_s=retry_after,
    )
    assert change.head.status is status
    assert change.head.model_attempts == attempts + 1
    assert change.step is None
    assert (change.head.step, change.head.tokens) == (2, 50)
    if status is Status.READY:
        assert change.delay_s == delay > 0
        assert change.enqueue
        assert kinds(change) == [EventKind.MODEL_RETRY]
        assert change.events[0].data["attempt"] == attempts + 1
    else:
        assert change.head.error_code is ErrorCode.MODEL_ERROR
        assert "HTTP 503" in change.head.error_message
        assert change.dead_letter
        assert kinds(change) == [EventKind.FAILED, EventKind.DEAD_LETTERED]


def test_a_model_error_of_any_size_is_kept_to_a_bound_in_its_retries_and_its_failure(
    build: Any,
) -> None:
    """A server's 100 KB error body: each retry's event and the failure keep its start and
    its end, with a note of the cut, within ERROR_CHARS."""
    error = "HTTP 503: " + "upstream overloaded; " * 5_000 + "request req_1"
    retried = model_failed(build.head(), error=error, transient=True, now=build.at(1))
    failed = model_failed(build.head(), error=error, transient=False, now=build.at(1))
    said = [retried.events[0].data["error"], failed.head.error_message]
    for text in said:
        assert len(text) < transitions.ERROR_CHARS + 100 < len(error)
        assert "HTTP 503: upstream" in text and text.endswith("request req_1")
        assert "characters cut from the middle of" in text


def test_model_retry_backoff_grows(build: Any) -> None:
    delays = [
        model_failed(
            build.head(model_attempts=n), error="timeout", transient=True, now=build.at(1)
        ).delay_s
        for n in range(4)
    ]
    assert delays == sorted(delays) and len(set(delays)) == 4


# EXECUTE


def executing(build: Any, **fields: Any) -> Any:
    return build.head(Status.EXECUTING, step=1, **fields)


def three_calls(build: Any, *states: CallState) -> list[Any]:
    return [
        build.call("read_file", {"path": f"{i}.py"}, index=i, state=s) for i, s in enumerate(states)
    ]


@pytest.mark.parametrize(
    ("states", "picked"),
    [
        pytest.param((PENDING, PENDING, PENDING), "s1c0", id="first"),
        pytest.param((DONE, PENDING, PENDING), "s1c1", id="after_done"),
        pytest.param((DONE, DONE, CallState.APPROVED), "s1c2", id="approved_last"),
        pytest.param((DONE, CallState.EDITED, PENDING), "s1c1", id="edited"),
    ],
)
def test_start_execute_takes_the_next_pending_call_in_order(
    build: Any, states: tuple[Any, ...], picked: str
) -> None:
    calls = three_calls(build, *states)
    decisions = {
        c.call_id: build.decision(c, DecisionKind.EDIT, arguments=c.arguments)
        for c in calls
        if c.state is CallState.EDITED
    }
    run = start_execute(
        executing(build), list(reversed(calls)), decisions, idempotent=False, now=build.at(1)
    )
    assert isinstance(run, RunTool)
    assert run.call.call_id == picked
    assert not run.rerun


def test_approved_call_runs_the_proposed_arguments(build: Any) -> None:
    call = build.call(
        "write_file", {"path": "a.py", "text": "x"}, state=CallState.APPROVED, needs_approval=True
    )
    run = start_execute(
        executing(build),
        [call],
        {call.call_id: build.decision(call)},
        idempotent=False,
        now=build.at(1),
    )
    assert run == RunTool(call=call, arguments={"path": "a.py", "text": "x"})


def test_edited_call_runs_the_decision_arguments(build: Any) -> None:
    call = build.call(
        "write_file", {"path": "a.py", "text": "x"}, state=CallState.EDITED, needs_approval=True
    )
    decision = build.decision(call, DecisionKind.EDIT, arguments={"path": "b.py", "text": "y"})
    run = start_execute(
        executing(build), [call], {call.call_id: decision}, idempotent=False, now=build.at(1)
    )
    assert isinstance(run, RunTool)
    assert run.arguments == {"path": "b.py", "text": "y"}


def test_edit_to_empty_arguments_runs_with_empty_arguments(build: Any) -> None:
    call = build.call("run_tests", {"only": "test_a"}, state=CallState.EDITED, needs_approval=True)
    decision = build.decision(call, DecisionKind.EDIT, arguments={})
    run = start_execute(
        executing(build), [call], {call.call_id: decision}, idempotent=False, now=build.at(1)
    )
    assert isinstance(run, RunTool)
    assert run.arguments == {}


def test_edit_replaces_unparsable_arguments(build: Any) -> None:
    call = build.call("write_file", '{"path": ', state=CallState.EDITED, needs_approval=True)
    decision = build.decision(call, DecisionKind.EDIT, arguments={"path": "a.py", "text": ""})
    run = start_execute(
        executing(build), [call], {call.call_id: decision}, idempotent=False, now=build.at(1)
    )
    assert isinstance(run, RunTool)
    assert run.arguments == {"path": "a.py", "text": ""}


@pytest.mark.parametrize(
    ("feedback", "text"),
    [
        pytest.param("too risky", "rejected by bob: too risky", id="with_feedback"),
        pytest.param(
            "",
            "rejected by bob, who gave no reason: write_file did not run; do not make the "
            "same call again: try another way, or say why you need it",
            id="without_feedback",
        ),
    ],
)
def test_rejected_call_gets_an_error_observation_and_never_runs(
    build: Any, feedback: str, text: str
) -> None:
    call = build.call("write_file", {"path": "a.py"}, state=CallState.REJECTED, needs_approval=True)
    decision = build.decision(call, DecisionKind.REJECT, approver="bob", feedback=feedback)
    change = start_execute(
        executing(build), [call], {call.call_id: decision}, idempotent=True, now=build.at(1)
    )
    assert isinstance(change, Change)
    (observation,) = change.observations
    assert (observation.call_id, observation.content, observation.is_error) == (
        call.call_id,
        text,
        True,
    )
    assert change.call_states == ((call.call_id, DONE),)
    assert change.head.status is Status.READY


def test_unparsable_arguments_get_an_error_observation(build: Any) -> None:
    calls = [
        build.call("read_file", '{"path": ', index=0),
        build.call("read_file", {"path": "b.py"}, index=1),
    ]
    change = start_execute(executing(build), calls, {}, idempotent=True, now=build.at(1))
    assert isinstance(change, Change)
    (observation,) = change.observations
    assert observation.is_error
    assert "read_file" in observation.content and "not a valid JSON object" in observation.content
    assert change.head.status is Status.EXECUTING


@pytest.mark.parametrize(
    ("states", "status"),
    [
        pytest.param((PENDING, PENDING), Status.EXECUTING, id="more_left"),
        pytest.param((PENDING, DONE), Status.READY, id="last_call"),
    ],
)
def test_tool_finished(build: Any, states: tuple[CallState, ...], status: Status) -> None:
    calls = three_calls(build, *states)
    change = tool_finished(
        executing(build),
        calls,
        calls[0],
        output="print('x')",
        is_error=False,
        now=build.at(3),
        duration_ms=12.5,
    )
    assert change.head.status is status
    assert change.call_states == (("s1c0", DONE),)
    (observation,) = change.observations
    assert (observation.content, observation.is_error, observation.duration_ms, observation.at) == (
        "print('x')",
        False,
        12.5,
        build.at(3),
    )
    assert kinds(change) == [EventKind.TOOL_FINISHED]
    assert change.enqueue


def test_tool_error_becomes_an_error_observation_not_a_failure(build: Any) -> None:
    calls = three_calls(build, PENDING)
    change = tool_finished(
        executing(build),
        calls,
        calls[0],
        output="Timeout after 30s",
        is_error=True,
        now=build.at(3),
    )
    assert change.observations[0].is_error
    assert change.head.status is Status.READY
    assert change.head.error_code is None


def test_no_open_call_left_closes_the_step(build: Any) -> None:
    change = start_execute(
        executing(build), three_calls(build, DONE, DONE), {}, idempotent=False, now=build.at(1)
    )
    assert isinstance(change, Change)
    assert change.head.status is Status.READY
    assert change.observations == () and change.call_states == ()


@pytest.mark.parametrize("kind", [None, DecisionKind.APPROVE, DecisionKind.EDIT])
def test_started_idempotent_call_runs_again(build: Any, kind: DecisionKind | None) -> None:
    call = build.call(state=CallState.STARTED, needs_approval=kind is not None)
    decisions = (
        {}
        if kind is None
        else {
            call.call_id: build.decision(
                call, kind, arguments={"path": "edited.py"} if kind is DecisionKind.EDIT else None
            )
        }
    )
    run = start_execute(executing(build), [call], decisions, idempotent=True, now=build.at(1))
    assert isinstance(run, RunTool)
    assert run.rerun
    assert run.arguments == (
        {"path": "edited.py"} if kind is DecisionKind.EDIT else {"path": "a.py"}
    )


def test_started_call_that_is_not_idempotent_is_in_doubt(build: Any) -> None:
    calls = [
        build.call(state=CallState.STARTED, index=0),
        build.call("read_file", {"path": "b"}, index=1),
    ]
    change = start_execute(executing(build), calls, {}, idempotent=False, now=build.at(1))
    assert isinstance(change, Change)
    assert change.head.status is Status.WAITING_APPROVAL
    assert change.head.awaiting == ("s1c0",)
    assert change.call_states == (("s1c0", CallState.IN_DOUBT),)
    assert change.observations == ()
    assert change.events[0].kind is EventKind.APPROVAL_REQUESTED
    assert change.events[0].data["in_doubt"] is True
    assert not change.enqueue


def test_cancel_requested_cancels_and_closes_open_calls(build: Any) -> None:
    calls = three_calls(build, DONE, CallState.STARTED, PENDING)
    change = start_execute(
        executing(build, cancel_requested=True), calls, {}, idempotent=True, now=build.at(1)
    )
    assert isinstance(change, Change)
    assert change.head.status is Status.CANCELLED
    assert change.call_states == (("s1c1", DONE), ("s1c2", DONE))
    assert [o.call_id for o in change.observations] == ["s1c1", "s1c2"]
    assert all(o.is_error and "cancelled" in o.content for o in change.observations)
    assert kinds(change) == [EventKind.CANCELLED]
    assert not change.enqueue and not change.dead_letter


def test_no_call_starts_once_the_deadline_has_passed(build: Any) -> None:
    """An approval given after the deadline does not run the call (a destructive command
    was started, then the session failed DEADLINE at its next THINK); the session fails
    DEADLINE now, its open calls closed, not run."""
    call = build.call("run_command", {"cmd": "rm -rf build"}, state=CallState.APPROVED)
    late = executing(build, budgets={"deadline_s": 10})
    decisions = {call.call_id: build.decision(call)}
    assert isinstance(
        start_execute(late, [call], decisions, idempotent=False, now=build.at(9)), RunTool
    )
    change = start_execute(late, [call], decisions, idempotent=False, now=build.at(11))
    assert isinstance(change, Change)
    assert change.head.status is Status.FAILED
    assert change.head.error_code is ErrorCode.DEADLINE
    assert "`deadline_s` is 10" in change.head.error_message
    assert change.call_states == ((call.call_id, DONE),)
    assert change.observations[0].is_error and "not run" in change.observations[0].content
    assert change.dead_letter


# fail()


@pytest.mark.parametrize("status", [s for s in Status if not s.terminal])
def test_fail_ends_a_live_session_and_closes_its_calls(build: Any, status: Status) -> None:
    calls = three_calls(build, DONE, CallState.AWAITING_APPROVAL, PENDING)
    change = fail(
        build.head(status),
        ErrorCode.INTERNAL,
        "tool registry missing",
        now=build.at(2),
        open_calls=calls,
    )
    assert change.head.status is Status.FAILED
    assert (change.head.error_code, change.head.error_message) == (
        ErrorCode.INTERNAL,
        "tool registry missing",
    )
    assert change.head.awaiting == ()
    assert change.call_states == (("s1c1", DONE), ("s1c2", DONE))
    assert change.dead_letter
    assert kinds(change) == [EventKind.FAILED, EventKind.DEAD_LETTERED]


# every transition refuses a status it does not accept


def _transitions(build: Any) -> dict[str, tuple[Callable[[Any], object], frozenset[Status]]]:
    now = build.at(10)
    awaited = build.call(
        "write_file", {"path": "a"}, state=CallState.AWAITING_APPROVAL, needs_approval=True
    )
    pending = build.call(state=PENDING)
    live = frozenset(s for s in Status if not s.terminal)
    return {
        "start_think": (lambda h: start_think(h, now=now), frozenset({Status.READY})),
        "think": (
            lambda h: think(
                h,
                build.reply(("read_file", {})),
                now=now,
                cost_usd=0.0,
                trace_id="t",
                recent=(),
                rules={},
            ),
            frozenset({Status.READY}),
        ),
        "model_failed": (
            lambda h: model_failed(h, error="x", transient=True, now=now),
            frozenset({Status.READY}),
        ),
        "start_execute": (
            lambda h: start_execute(h, [pending], {}, idempotent=True, now=now),
            frozenset({Status.EXECUTING}),
        ),
        "tool_finished": (
            lambda h: tool_finished(h, [pending], pending, output="ok", is_error=False, now=now),
            frozenset({Status.EXECUTING}),
        ),
        "decide": (
            lambda h: decide(h, [awaited], build.decision(awaited), None, now=now),
            frozenset({Status.WAITING_APPROVAL}),
        ),
        "request_cancel": (lambda h: request_cancel(h, [awaited], now=now), live),
        "fail": (lambda h: fail(h, ErrorCode.INTERNAL, "x", now=now), live),
    }


TRANSITIONS = [
    "start_think",
    "think",
    "model_failed",
    "start_execute",
    "tool_finished",
    "decide",
    "request_cancel",
    "fail",
]
ACCEPTS = {
    "start_think": {Status.READY},
    "think": {Status.READY},
    "model_failed": {Status.READY},
    "start_execute": {Status.EXECUTING},
    "tool_finished": {Status.EXECUTING},
    "decide": {Status.WAITING_APPROVAL},
    "request_cancel": {s for s in Status if not s.terminal},
    "fail": {s for s in Status if not s.terminal},
}


def _illegal_cases() -> list[Any]:
    cases = []
    for name in TRANSITIONS:
        for status in Status:
            if status in ACCEPTS[name]:
                continue
            cases.append(pytest.param(name, status, id=f"{name}-{status.value}"))
    return cases


@pytest.mark.parametrize(("name", "status"), _illegal_cases())
def test_transition_refuses_a_status_it_does_not_accept(
    build: Any, name: str, status: Status
) -> None:
    function, accepted = _transitions(build)[name]
    assert status not in accepted
    head = build.head(status)
    expected = SessionFinished if status.terminal else IllegalTransition
    with pytest.raises(expected) as raised:
        function(head)
    assert head.id in str(raised.value)
    if not status.terminal:
        assert not isinstance(raised.value, SessionFinished)


@pytest.mark.parametrize("name", TRANSITIONS)
def test_transition_accepts_its_statuses(build: Any, name: str) -> None:
    function, accepted = _transitions(build)[name]
    assert accepted == ACCEPTS[name]
    for status in accepted:
        result = function(build.head(status))
        assert isinstance(result, Change | CallModel | RunTool)


def test_a_context_overflow_event_keeps_a_huge_refusal_cut_as_a_failure_is(build: Any) -> None:
    """A model's refusal body can be any size: the `context_overflow` event keeps it cut to
    ERROR_CHARS with its start and end and a note of the cut, as a failed session's message."""
    error = "maximum context length is 8192 tokens " + "x" * 100_000 + " END"
    _, event = context_overflow(
        build.head(), error=error, estimate=9_000, window=None, now=build.at(1)
    )
    kept = event.data["error"]
    assert kept == transitions.cap_output(error, transitions.ERROR_CHARS)
    assert len(kept) < 2 * transitions.ERROR_CHARS and "characters cut" in kept
    assert kept.startswith("maximum context length is 8192") and kept.endswith(" END")
