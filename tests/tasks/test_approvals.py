"""Approvals through real workers: wait, approve, edit, reject, stale and racing decisions."""

from __future__ import annotations

import threading

import pytest
from tickwork.fsm.errors import AlreadyDecided, InvalidToolArguments, StaleDecision
from tickwork.fsm.values import CallState, DecisionKind, Status

from tests.tasks.conftest import Deployment

DANGER = [
    {
        "content": "delete it",
        "tool_calls": [
            {"name": "danger", "arguments": {"value": "prod-db"}},
            {"name": "echo", "arguments": {"text": "after"}},
        ],
    },
    {"content": "done"},
]


def waiting(deployment: Deployment) -> str:
    session_id = deployment.submit(DANGER)
    head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.WAITING_APPROVAL
    assert head.awaiting == ("s1c0",)
    assert deployment.sink_lines("danger.log") == []
    return session_id


def test_approve_runs_the_call_as_proposed(deployment: Deployment) -> None:
    with deployment.worker():
        session_id = waiting(deployment)
        deployment.client.approve(session_id, "s1c0", approver="alice", comment="ok")
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED
    assert deployment.sink_lines("danger.log") == [f"{session_id}:1:s1c0 prod-db"]
    session = deployment.client.load(session_id)
    decision = session.decision("s1c0")
    assert decision is not None and decision.approver == "alice" and decision.comment == "ok"
    assert session.observation("s1c0").content == "destroyed prod-db"  # type: ignore[union-attr]


def test_edit_runs_the_call_with_the_edited_arguments(deployment: Deployment) -> None:
    with deployment.worker():
        session_id = waiting(deployment)
        with pytest.raises(InvalidToolArguments):
            deployment.client.edit(session_id, "s1c0", {"value": 3}, approver="bob")
        deployment.client.edit(session_id, "s1c0", {"value": "staging-db"}, approver="bob")
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED
    assert deployment.sink_lines("danger.log") == [f"{session_id}:1:s1c0 staging-db"]
    session = deployment.client.load(session_id)
    assert session.call("s1c0").state is CallState.DONE  # type: ignore[union-attr]
    # the model's transcript shows its own call: the output says what ran instead
    assert session.observation("s1c0").content == (  # type: ignore[union-attr]
        'bob edited this call before it ran; it ran with {"value": "staging-db"}\n'
        "destroyed staging-db"
    )
    assert session.observation("s1c1").content == "after"  # type: ignore[union-attr]


def test_reject_runs_nothing_and_tells_the_model(deployment: Deployment) -> None:
    with deployment.worker():
        session_id = waiting(deployment)
        deployment.client.reject(session_id, "s1c0", "never touch prod", approver="carol")
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED
    assert deployment.sink_lines("danger.log") == []
    seen = deployment.client.load(session_id).observation("s1c0")
    assert seen is not None and seen.is_error
    assert seen.content == "rejected by carol: never touch prod"


def test_a_decision_for_other_arguments_is_refused(deployment: Deployment) -> None:
    with deployment.worker():
        session_id = waiting(deployment)
        with pytest.raises(StaleDecision, match="look at the call again"):
            deployment.client.approve(session_id, "s1c0", approver="dave", fingerprint="0" * 64)
        assert deployment.client.get(session_id).status is Status.WAITING_APPROVAL
        assert deployment.client.load(session_id).decision("s1c0") is None


def test_fifty_concurrent_decisions_one_wins(deployment: Deployment) -> None:
    with deployment.worker():
        session_id = waiting(deployment)
        barrier = threading.Barrier(50)
        won: list[str] = []
        refused: list[str] = []

        def decide(i: int) -> None:
            barrier.wait()
            try:
                deployment.client.decide(
                    session_id, "s1c0", DecisionKind.APPROVE, approver=f"approver-{i}"
                )
                won.append(f"approver-{i}")
            except AlreadyDecided as exc:
                refused.append(str(exc))

        threads = [threading.Thread(target=decide, args=(i,)) for i in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(won) == 1 and len(refused) == 49
        assert all(won[0] in message for message in refused)
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED
    assert len(deployment.sink_lines("danger.log")) == 1
