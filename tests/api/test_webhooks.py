"""The approval webhook through a running stack: a card per session that starts waiting,
sent from the outbox by the worker's dispatcher, retried, never blocking. The dispatcher's
own cases (concurrent dispatchers, backoff, moved-on sessions) are in
tests/worker/test_dispatcher.py; a card that survives a killed worker in
tests/tasks/test_webhook_outbox.py."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import REGISTRY
from tickwork.fsm.values import Status
from tickwork.store import deliveries
from tickwork.worker.observers.webhooks import masked_url, sign

from tests.api.conftest import WEBHOOK_PATH, WEBHOOK_SECRET, Stack, until


def failed_cards() -> float:
    return (
        REGISTRY.get_sample_value("tickwork_webhook_deliveries_total", {"outcome": "failed"}) or 0.0
    )


def test_a_session_waiting_for_approval_posts_a_signed_card(stack: Stack) -> None:
    session_id = stack.waiting(prefix="hook")
    headers, card = until(lambda: stack.receiver.card(session_id), timeout=20, what="the card")
    assert card["type"] == "tickwork.approval_requested"
    assert card["session"]["id"] == session_id and card["session"]["status"] == "waiting_approval"
    assert card["calls"] == [
        {
            "call_id": "s1c0",
            "name": "danger",
            "arguments": '{"value": "prod-db"}',
            "fingerprint": stack.fingerprint(session_id),
            "in_doubt": False,
            "as_edited": None,
        }
    ]
    assert card["links"]["page"] == f"{stack.url}/#/approvals/{session_id}"
    assert card["links"]["session"] == f"{stack.url}/api/v1/sessions/{session_id}"
    assert headers["x-tickwork-signature"] == sign(WEBHOOK_SECRET, card["_body"].encode())
    assert headers["x-tickwork-delivery"] == headers["idempotency-key"] == card["id"]
    assert card["id"] == f"{session_id}:{stack.deployment.client.get(session_id).version}"
    # delivered once, and recorded so: no other pass or worker sends it again
    engine = stack.deployment.client.store.engine
    version = stack.deployment.client.get(session_id).version
    state = until(
        lambda: (s := deliveries.state(engine, session_id, version)) and s["delivered_at"] and s,
        timeout=10,
        what="the delivery recorded",
    )
    assert state["attempts"] == 1 and stack.receiver.attempts[session_id] == 1
    # the link the card gives is the API's, and works with an approver's token
    shown = stack.http("alice").get(card["links"]["session"].removeprefix(stack.url))
    assert shown.json()["head"]["awaiting"] == ["s1c0"]


def test_the_card_masks_what_the_stored_text_masks(stack: Stack) -> None:
    # the runtime's masker, not a weaker copy: URL passwords, secret query parameters, patterns
    url = "https://ops:pw-hunter2@db.example/x?access_token=tok-0451&page=2"
    replies = [
        {
            "content": "delete it",
            "tool_calls": [{"name": "danger", "arguments": {"value": f"{url} sk-proj-abcdef123"}}],
        },
        {"content": "done"},
    ]
    session_id = stack.waiting(replies, prefix="hook")
    _, card = until(lambda: stack.receiver.card(session_id), timeout=20, what="the card")
    assert card["calls"][0]["arguments"] == (
        '{"value": "https://ops:****@db.example/x?access_token=****&page=2 ****"}'
    )
    for secret in ("hunter2", "tok-0451", "abcdef123"):
        assert secret not in card["_body"]


def test_a_failing_receiver_gets_the_card_again_under_the_same_key(stack: Stack) -> None:
    session_id = stack.waiting(prefix="flaky")
    _, card = until(
        lambda: stack.receiver.card(session_id), timeout=20, what="the card after retries"
    )
    assert stack.receiver.attempts[session_id] == 3  # two HTTP 500s, then delivered
    assert stack.receiver.keys[session_id] == [card["id"]] * 3


def test_an_undeliverable_card_never_blocks_the_session(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tickwork.webhooks")
    before = failed_cards()
    session_id = stack.waiting(prefix="refuse")
    until(lambda: failed_cards() > before, timeout=20, what="the card to be given up")
    assert stack.receiver.attempts[session_id] == 4
    assert stack.receiver.card(session_id) is None
    version = stack.deployment.client.get(session_id).version
    state = deliveries.state(stack.deployment.client.store.engine, session_id, version)
    assert state is not None and state["delivered_at"] is None
    assert (state["attempts"], state["next_attempt_at"], state["last_error"]) == (
        4,
        None,
        "HTTP 503",
    )
    # the session waits for its person regardless, who decides as always
    answer = stack.http("alice").post(
        f"/api/v1/sessions/{session_id}/calls/s1c0/decision",
        json={"kind": "approve", "fingerprint": stack.fingerprint(session_id)},
    )
    assert answer.status_code == 200
    assert stack.wait(session_id, Status.COMPLETED)["status"] == "completed"
    # the failure is logged with the receiver's host, never the secret in its path
    logged = [r.getMessage() for r in caplog.records if r.name == "tickwork.webhooks"]
    assert any("not delivered" in m for m in logged), logged
    host = stack.receiver.url.removesuffix(WEBHOOK_PATH)
    assert any(f"{host}/****" in m for m in logged), logged
    assert not any("path-secret-xyz" in m or "T0001" in m for m in logged), logged


def test_a_webhook_url_is_logged_without_its_path_query_or_password() -> None:
    assert (
        masked_url("https://hooks.slack.com/services/T0/B0/XYZ") == "https://hooks.slack.com/****"
    )
    assert masked_url("http://user:pw@h:8080/x?token=1") == "http://h:8080/****"
    assert masked_url("http://h:8080") == "http://h:8080"
    assert masked_url("http://[::1") == "<webhook URL>"
