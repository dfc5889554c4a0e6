"""A graph session through the HTTP API: submitted, listed among the approvals with the
state it would run on, approved with the fingerprint, viewed node by node, forked with a
state patch."""

from __future__ import annotations

import uuid

from tickwork.fsm.values import Status

from tests.api.conftest import Stack

NOTE = [{"content": "Dear customer, your refund is on its way."}]


def test_a_graph_interrupt_is_approved_over_the_api(stack: Stack) -> None:
    ledger = stack.deployment.tmp / f"ledger-{uuid.uuid4().hex[:6]}.jsonl"
    body = {
        "kind": "refund",
        "input": {"order_id": "B-2", "amount": 80.0, "ledger": str(ledger)},
        "model": stack.deployment.script(NOTE),
    }
    answer = stack.http("sam").post("/api/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text
    session_id = answer.json()["id"]
    assert stack.wait(session_id)["status"] == "waiting_approval"
    waiting = stack.http("alice").get("/api/v1/approvals").json()
    mine = next(w for w in waiting if w["session"]["id"] == session_id)
    call = mine["calls"][0]
    assert (call["call_id"], call["name"]) == ("s3c0", "refund")
    assert call["arguments"]["amount"] == 80.0
    decided = stack.http("alice").post(
        f"/api/v1/sessions/{session_id}/calls/s3c0/decision",
        json={"kind": "approve", "fingerprint": call["fingerprint"]},
    )
    assert decided.status_code == 200, decided.text
    head = stack.wait(session_id, Status.COMPLETED)
    assert head["result"]["state"]["report"].startswith("refunded $80.00")
    assert len(ledger.read_text().splitlines()) == 1
    view = stack.http("olga").get(f"/api/v1/sessions/{session_id}").json()
    assert [s["calls"][0]["name"] for s in view["steps"]] == ["draft", "check", "refund", "report"]
    fork = stack.http("olga").post(
        f"/api/v1/sessions/{session_id}/fork",
        json={"from_step": 1, "state": {"amount": 9999.0}},
    )
    assert fork.status_code in (200, 201), fork.text
    child = stack.wait(fork.json()["id"], Status.COMPLETED)
    assert "over the $500 limit" in child["result"]["state"]["report"]
    bad = stack.http("olga").post(
        f"/api/v1/sessions/{session_id}/fork", json={"from_step": 1, "state": {"x": 1}}
    )
    assert bad.status_code == 422 and "gives x, which the state Refund does not have" in bad.text
    # what only an agent session reads is named as the body gives it, not as a flag
    for patch, named in (
        ({"system_prompt": "hi"}, "system_prompt"),
        ({"append_instruction": "be brief"}, "append_instruction"),
        ({"tool_outputs": {"s1c0": "x"}}, "tool_outputs"),
    ):
        agent = stack.http("olga").post(
            f"/api/v1/sessions/{session_id}/fork", json={"from_step": 2, **patch}
        )
        assert agent.status_code == 422, agent.text
        assert f"(`state`), not `{named}`" in agent.json()["message"], agent.text
        assert "--" not in agent.json()["message"], agent.text
