"""Graph sessions through real workers (SQLite + filesystem broker, Postgres + Redis): the
example refund graph with its interrupt approved, edited and rejected; loops and budgets
dead-lettered; a fork with a state patch; a worker killed while a node pays; a worker with
another version of the graph."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import CallState, ErrorCode, EventKind, Status

from tests.tasks.conftest import Deployment, kill, stop, until
from tickwork import views

REFUND = "tests.graphs:REFUND"
NOTE = [{"content": "Dear customer, your refund is on its way."}]


def submit(d: Deployment, kind: str = REFUND, **state: Any) -> str:
    ledger = d.tmp / f"ledger-{time.monotonic_ns()}.jsonl"
    first = {"order_id": "A-1", "amount": 42.5, "reason": "broken", "ledger": str(ledger)}
    head = d.client.submit(kind, {**first, **state}, model=d.script(NOTE))
    return head.id


def ledger(d: Deployment, session_id: str) -> list[dict[str, Any]]:
    path = Path(d.client.get(session_id).config["initial_state"]["ledger"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def waiting(d: Deployment, session_id: str) -> str:
    head = d.client.wait(session_id, timeout=60)
    assert head.status is Status.WAITING_APPROVAL, head
    assert head.awaiting == ("s3c0",)
    call = d.client.load(session_id).call("s3c0")
    assert call is not None and call.name == "refund"
    assert call.arguments is not None and call.arguments["amount"] == 42.5  # what is approved
    assert ledger(d, session_id) == []
    return "s3c0"


def test_the_refund_graph_runs_to_the_end_once_approved(deployment: Deployment) -> None:
    with deployment.worker():
        session_id = submit(deployment)
        call_id = waiting(deployment, session_id)
        deployment.client.approve(session_id, call_id, approver="alice")
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED, head
    state = head.result["state"]
    assert state["note"] == NOTE[0]["content"]
    paid = ledger(deployment, session_id)
    assert [p["key"] for p in paid] == [f"{session_id}:3:refund"]
    assert state["payment_id"] == paid[0]["payment_id"]
    assert state["report"].startswith("refunded $42.50 for order A-1")
    session = deployment.client.load(session_id)
    assert [s.calls[0].name for s in session.steps] == ["draft", "check", "refund", "report"]
    assert all(c.state is CallState.DONE for s in session.steps for c in s.calls)
    # each node's update is its observation, a delta of the state
    assert json.loads(session.observation("s2c0").content) == {"problems": []}  # type: ignore[union-attr]
    assert head.tokens > 0  # the draft's model call counts in the budgets


def test_ticks_delivered_many_times_run_each_node_once(deployment: Deployment) -> None:
    with deployment.worker(concurrency=4):
        session_id = submit(deployment)
        call_id = waiting(deployment, session_id)
        head = deployment.client.approve(session_id, call_id, approver="alice")
        for _ in range(5):  # the same tick, again and again, while it runs
            deployment.client.publish(session_id, head.version)
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED, head
    events = deployment.client.load(session_id).events
    started = [e.data["call_id"] for e in events if e.kind is EventKind.TOOL_STARTED]
    assert started == ["s1c0", "s2c0", "s3c0", "s4c0"]
    assert len(ledger(deployment, session_id)) == 1


@pytest.mark.parametrize("decide", ["approve", "edit", "reject"])
def test_an_update_a_node_proposes_waits_for_a_person(deployment: Deployment, decide: str) -> None:
    with deployment.worker():
        head = deployment.client.submit("tests.graphs:PROPOSING", {}, model=deployment.script(NOTE))
        session_id = head.id
        head = deployment.client.wait(session_id, timeout=60)
        assert head.status is Status.WAITING_APPROVAL and head.awaiting == ("s2c0",), head
        proposal = deployment.client.load(session_id).call("s2c0")
        assert proposal is not None and proposal.name == "offer#update"
        assert proposal.arguments == {"n": 100} and proposal.approval_reason == "a big offer"
        assert head.result["state"]["n"] == 0  # not in the state until a person says so
        if decide == "approve":
            deployment.client.approve(session_id, "s2c0", approver="fay")
        elif decide == "edit":
            deployment.client.edit(session_id, "s2c0", {"n": 10}, approver="fay")
        else:
            deployment.client.reject(session_id, "s2c0", "too much", approver="fay")
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED, head
    expected = {"approve": {"n": 100, "done": True}, "edit": {"n": 10, "done": True}}
    assert head.result["state"] == expected.get(decide, {"n": 0, "done": False})


def test_an_edit_patches_the_state_and_a_bad_one_is_refused(deployment: Deployment) -> None:
    with deployment.worker():
        session_id = submit(deployment)
        call_id = waiting(deployment, session_id)
        with pytest.raises(InvalidInput, match="amount"):
            deployment.client.edit(session_id, call_id, {"amount": "lots"}, approver="bob")
        with pytest.raises(InvalidInput, match="colour"):
            deployment.client.edit(session_id, call_id, {"colour": "red"}, approver="bob")
        deployment.client.edit(session_id, call_id, {"amount": 30.0}, approver="bob")
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED, head
    assert [p["amount"] for p in ledger(deployment, session_id)] == [30.0]
    assert head.result["state"]["amount"] == 30.0


def test_a_rejection_goes_to_the_nodes_on_reject(deployment: Deployment) -> None:
    with deployment.worker():
        session_id = submit(deployment)
        call_id = waiting(deployment, session_id)
        deployment.client.reject(session_id, call_id, "not this one", approver="carol")
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED, head
    assert ledger(deployment, session_id) == []
    assert "rejected" in head.result["state"]["report"]
    seen = deployment.client.load(session_id).observation(call_id)
    assert seen is not None and seen.is_error and "rejected by carol" in seen.content


def test_the_checks_route_past_the_refund(deployment: Deployment) -> None:
    with deployment.worker():
        session_id = submit(deployment, amount=9000.0)
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED, head
    assert "over the $500 limit" in head.result["state"]["report"]
    assert ledger(deployment, session_id) == []


@pytest.mark.parametrize(
    ("kind", "code"),
    [("tests.graphs:STUCK", ErrorCode.LOOP), ("tests.graphs:COUNTER", ErrorCode.BUDGET_STEPS)],
)
def test_an_endless_loop_is_stopped_and_dead_lettered(
    deployment: Deployment, kind: str, code: ErrorCode
) -> None:
    with deployment.worker():
        head = deployment.client.submit(kind, {}, model=deployment.script(NOTE))
        head = deployment.client.wait(head.id, timeout=60)
    assert head.status is Status.FAILED and head.error_code is code, head
    assert deployment.client.dead_letter(head.id).code == code.value
    assert head.step <= 6


def test_a_node_returning_a_key_not_in_the_state_fails_its_session_clearly(
    deployment: Deployment,
) -> None:
    with deployment.worker():
        head = deployment.client.submit("tests.graphs:SLOPPY", {}, model=deployment.script(NOTE))
        head = deployment.client.wait(head.id, timeout=60)
    assert head.status is Status.FAILED and head.error_code is ErrorCode.INTERNAL, head
    assert "node 'paint' of graph 'sloppy' gives colour, which the state Poll" in (
        head.error_message
    )
    assert deployment.client.dead_letter(head.id).code == "INTERNAL"


def test_a_fork_from_step_k_with_a_state_patch_runs_the_rest(deployment: Deployment) -> None:
    with deployment.worker():
        parent = submit(deployment, amount=9000.0)
        done = deployment.client.wait(parent, timeout=60)
        assert done.status is Status.COMPLETED and done.step == 3  # draft, check, report
        # from step 1 (the draft) with the amount lowered by hand: check runs again
        child = deployment.client.fork(parent, from_step=1, by="dave", state={"amount": 25.0}).id
        call_id = waiting_at(deployment, child, "s3c0")
        deployment.client.approve(child, call_id, approver="alice")
        head = deployment.client.wait(child, timeout=60)
    assert head.status is Status.COMPLETED, head
    assert head.result["state"]["amount"] == 25.0
    assert head.result["state"]["note"] == NOTE[0]["content"]  # step 1's update is kept
    assert [p["key"] for p in ledger(deployment, child)] == [f"{child}:3:refund"]
    assert deployment.client.get(parent).result["state"]["amount"] == 9000.0
    session = deployment.client.load(child)
    assert [s.calls[0].name for s in session.steps] == ["draft", "check", "refund", "report"]


def waiting_at(d: Deployment, session_id: str, call_id: str) -> str:
    head = d.client.wait(session_id, timeout=60)
    assert head.status is Status.WAITING_APPROVAL and head.awaiting == (call_id,), head
    return call_id


def test_a_worker_killed_while_a_node_pays_resumes_it_and_pays_once(
    deployment: Deployment,
) -> None:
    session_id = submit(deployment, kind="tests.graphs:SLOW_REFUND")
    slow = deployment.spawn(env={"TICKWORK_TEST_SLOW": "1"})
    try:
        call_id = waiting(deployment, session_id)
        deployment.client.approve(session_id, call_id, approver="alice")
        until(lambda: ledger(deployment, session_id), timeout=60, what="the payment")
        kill(slow)  # paid, its update not saved: the node's call is started, no observation
    finally:
        stop(slow)
    call = deployment.client.load(session_id).call(call_id)
    assert call is not None and call.state is CallState.STARTED
    with deployment.worker():
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED, head
    assert len(ledger(deployment, session_id)) == 1
    started = [
        e.data
        for e in deployment.client.load(session_id).events
        if e.kind is EventKind.TOOL_STARTED and e.data.get("call_id") == call_id
    ]
    assert [s["rerun"] for s in started] == [False, True]


def test_a_node_that_is_not_idempotent_waits_in_doubt_and_a_person_gives_its_update(
    deployment: Deployment,
) -> None:
    session_id = submit(deployment, kind="tests.graphs:CAREFUL_REFUND")
    slow = deployment.spawn(env={"TICKWORK_TEST_SLOW": "1"})
    try:
        until(lambda: ledger(deployment, session_id), timeout=60, what="the payment")
        kill(slow)
    finally:
        stop(slow)
    with deployment.worker():
        head = deployment.client.wait(session_id, timeout=60)
        assert head.status is Status.WAITING_APPROVAL and head.awaiting == ("s3c0",), head
        call = deployment.client.load(session_id).call("s3c0")
        assert call is not None and call.state is CallState.IN_DOUBT
        with pytest.raises(InvalidInput, match="the output given for node 'refund' is not JSON"):
            deployment.client.provide_output(session_id, "s3c0", "paid", approver="erin")
        with pytest.raises(InvalidInput, match="gives colour"):
            deployment.client.provide_output(session_id, "s3c0", '{"colour": 1}', approver="erin")
        paid = ledger(deployment, session_id)[0]["payment_id"]
        deployment.client.provide_output(
            session_id, "s3c0", json.dumps({"payment_id": paid}), approver="erin"
        )
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED, head
    assert len(ledger(deployment, session_id)) == 1  # the node did not run again
    assert head.result["state"]["payment_id"] == paid
    assert head.result["state"]["report"].startswith("refunded")


def test_a_worker_with_another_version_refuses_the_tick_and_keeps_the_session(
    deployment: Deployment, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    v1 = deployment.settings.model_copy(update={"imports": ["tests.graphs:REFUND"]})
    v2 = deployment.settings.model_copy(update={"imports": ["tests.graphs:REFUND_V2"]})
    deployment.client.close()
    from tickwork import Tickwork

    deployment.client = Tickwork(v1)
    session_id = submit(deployment, kind="refund")
    deployment.settings = v2
    with caplog.at_level("ERROR", logger="tickwork.tick"), deployment.worker():
        until(lambda: "version '2'" in caplog.text, timeout=30, what="the refusal in the log")
    assert f"session {session_id} runs graph 'refund' version '1'" in caplog.text
    head = deployment.client.get(session_id)
    assert head.status is Status.READY and head.step == 0 and head.version == 0
    # `show` says why it does not move, naming the worker that refused it
    (refused,) = views.session(deployment.client.load(session_id))["refused"]
    assert refused["reason"].startswith(f"session {session_id} runs graph 'refund' version '1'")
    # moved to version 2 by a fork made where version 2 is installed; the original still
    # runs on a worker that has version 1
    upgraded = Tickwork(v2)
    try:
        child = upgraded.fork(session_id, from_step=0, by="ops").id
    finally:
        upgraded.close()
    assert deployment.client.get(child).config["graph"]["version"] == "2"
    with deployment.worker():
        waiting(deployment, child)
    deployment.settings = v1
    with deployment.worker():
        waiting(deployment, session_id)
