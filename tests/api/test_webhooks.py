"""The approval webhook: a card per session that starts waiting, retried, never blocking."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import REGISTRY

from fsm.values import Status
from tests.api.conftest import WEBHOOK_PATH, WEBHOOK_SECRET, Stack, until
from worker.webhooks import deliver, masked_url, sign


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
        }
    ]
    assert card["links"]["page"] == f"{stack.url}/#/approvals/{session_id}"
    assert card["links"]["session"] == f"{stack.url}/api/v1/sessions/{session_id}"
    assert headers["x-tickwork-signature"] == sign(WEBHOOK_SECRET, card["_body"].encode())
    assert headers["x-tickwork-delivery"] == card["id"]
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


def test_a_failing_receiver_gets_the_card_again(stack: Stack) -> None:
    session_id = stack.waiting(prefix="flaky")
    until(lambda: stack.receiver.card(session_id), timeout=20, what="the card after retries")
    assert stack.receiver.attempts[session_id] == 3


def test_an_undeliverable_card_never_blocks_the_session(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tickwork.webhooks")
    before = failed_cards()
    session_id = stack.waiting(prefix="refuse")
    answer = stack.http("alice").post(
        f"/api/v1/sessions/{session_id}/calls/s1c0/decision",
        json={"kind": "approve", "fingerprint": stack.fingerprint(session_id)},
    )
    assert answer.status_code == 200
    assert stack.wait(session_id, Status.COMPLETED)["status"] == "completed"
    until(lambda: failed_cards() > before, timeout=20, what="the card to be given up")
    assert stack.receiver.attempts[session_id] == 4
    assert stack.receiver.card(session_id) is None
    # the failure is logged with the receiver's host, never the secret in its path
    logged = [r.getMessage() for r in caplog.records if r.name == "tickwork.webhooks"]
    assert any("not delivered" in m for m in logged), logged
    host = stack.receiver.url.removesuffix(WEBHOOK_PATH)
    assert any(f"{host}/****" in m for m in logged), logged
    assert not any("path-secret-xyz" in m or "T0001" in m for m in logged), logged


def test_deliver_gives_up_on_a_dead_receiver_and_on_a_refusal() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    assert not deliver(
        f"http://127.0.0.1:{port}/", {"id": "x"}, attempts=3, timeout_s=1, backoff_s=0.01
    )
    assert time.monotonic() - started < 5


class Refusing(BaseHTTPRequestHandler):
    """Answers every POST with 403 and keeps (headers, body) of each."""

    got: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def test_a_4xx_refusal_is_final() -> None:
    Refusing.got = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        document = {"id": "y", "text": "ünïcode"}
        assert not deliver(url, document, attempts=5, timeout_s=2, backoff_s=0.01, secret="k")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    # one attempt, no retries, and it carried the card as signed JSON
    assert len(Refusing.got) == 1
    headers, body = Refusing.got[0]
    assert json.loads(body) == document
    assert headers["content-type"] == "application/json"
    assert headers["x-tickwork-delivery"] == "y"
    assert headers["x-tickwork-signature"] == sign("k", body)


def test_a_webhook_url_is_logged_without_its_path_query_or_password() -> None:
    assert (
        masked_url("https://hooks.slack.com/services/T0/B0/XYZ") == "https://hooks.slack.com/****"
    )
    assert masked_url("http://user:pw@h:8080/x?token=1") == "http://h:8080/****"
    assert masked_url("http://h:8080") == "http://h:8080"
    assert masked_url("http://[::1") == "<webhook URL>"
