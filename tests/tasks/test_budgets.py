"""Budgets and loops end sessions in `failed`, dead-lettered with a message on the queue."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis as redis_lib
from tickwork.fsm.values import ErrorCode, Status

from tests.tasks.conftest import Deployment

ECHO = {"content": "again", "tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]}


def varied(n: int) -> list[dict[str, Any]]:
    return [
        {"content": f"s{i}", "tool_calls": [{"name": "echo", "arguments": {"text": f"{i}"}}]}
        for i in range(n)
    ]


def dead_letter_messages(deployment: Deployment) -> list[list[Any]]:
    """The bodies' args of the messages on the dead-letter queue, read off the broker."""
    queue = deployment.settings.dead_letter_queue
    if deployment.settings.broker_url.startswith("amqp"):
        return [
            json.loads(body)[0] for body in _rabbitmq_bodies(deployment.settings.broker_url, queue)
        ]
    if deployment.name == "embedded":
        folder = deployment.settings.broker_folder
        raw = [p.read_text() for p in sorted(folder.glob(f"*.{queue}.msg"))]
    else:
        client = redis_lib.Redis.from_url(deployment.settings.broker_url)
        raw = [m.decode() for m in client.lrange(queue, 0, -1)]
        client.close()
    out = []
    for text in raw:
        message = json.loads(text)
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            import base64

            body = base64.b64decode(body).decode()
        out.append(json.loads(body)[0])
    return out


def _rabbitmq_bodies(url: str, queue: str) -> list[bytes]:
    """The bodies on a RabbitMQ queue, left there (taken unacknowledged, then given back)."""
    from kombu import Connection

    bodies = []
    with Connection(url) as conn:
        channel = conn.channel()
        while (message := channel.basic_get(queue, no_ack=False)) is not None:
            bodies.append(message.body)
        channel.close()  # gives back what was taken
    return bodies


CASES = [
    pytest.param(varied(5), {"max_steps": 3}, ErrorCode.BUDGET_STEPS, id="steps"),
    pytest.param(varied(5), {"max_tokens": 40}, ErrorCode.BUDGET_TOKENS, id="tokens"),
    pytest.param(varied(5), {"max_cost_usd": 0.000001}, ErrorCode.BUDGET_COST, id="cost"),
    pytest.param(varied(5), {"deadline_s": 0.001}, ErrorCode.DEADLINE, id="deadline"),
    pytest.param([ECHO] * 12, {"max_loop_interventions": 2}, ErrorCode.LOOP, id="loop"),
    pytest.param(
        [{"content": "x", "error": {"transient": False, "message": "401 bad key"}}],
        {},
        ErrorCode.MODEL_ERROR,
        id="model-permanent",
    ),
]


@pytest.mark.parametrize(("replies", "budgets", "code"), CASES)
def test_exhausted_sessions_are_dead_lettered(
    deployment: Deployment, replies: list[dict[str, Any]], budgets: dict[str, Any], code: ErrorCode
) -> None:
    model = deployment.script(replies)
    head = deployment.client.submit("tests.jobs:TEST", {}, model=model, budgets=budgets)
    if code is ErrorCode.BUDGET_COST:
        deployment.settings.prices = {"scripted": (1000.0, 1000.0)}
    with deployment.worker():
        done = deployment.client.wait(head.id, timeout=60)
    assert done.status is Status.FAILED
    assert done.error_code is code, done.error_message
    letter = deployment.client.dead_letter(head.id)
    assert letter.code == code.value
    assert letter.session() == deployment.client.load(head.id)
    assert [head.id, code.value] == dead_letter_messages(deployment)[0][:2]


def test_transient_model_errors_past_the_retry_budget_fail_with_model_error(
    deployment: Deployment,
) -> None:
    replies = [{"content": "x", "error": {"transient": True, "message": "503 overloaded"}}]
    head = deployment.client.submit(
        "tests.jobs:TEST", {}, model=deployment.script(replies), budgets={"max_model_retries": 2}
    )
    with deployment.worker():
        done = deployment.client.wait(head.id, timeout=60)
    assert done.error_code is ErrorCode.MODEL_ERROR
    assert "after 3 attempts" in done.error_message
    retries = [e for e in deployment.client.load(head.id).events if e.kind == "model_retry"]
    assert [e.data["attempt"] for e in retries] == [1, 2]


def test_transient_model_errors_are_retried_with_backoff_and_counted_once(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collections import Counter

    from tests.fakes import FakeModel, fake_model_server

    replies = [
        {"content": "look", "tool_calls": [{"name": "echo", "arguments": {"text": "a"}}]},
        {"content": "done"},
    ]
    with fake_model_server(FakeModel(replies, fail={1: [500, 429]})) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        head = deployment.client.submit("tests.jobs:TEST", {}, model="openai:fake", price=(0, 0))
        with deployment.worker():
            done = deployment.client.wait(head.id, timeout=60)
        assert fake.requests == Counter({0: 1, 1: 3})
    assert done.status is Status.COMPLETED
    session = deployment.client.load(head.id)
    retries = [e for e in session.events if e.kind == "model_retry"]
    assert [e.data["attempt"] for e in retries] == [1, 2]
    assert retries[1].data["delay_s"] >= retries[0].data["delay_s"] / 2
    assert done.tokens == 2 * 15, "only the two answered calls count"
    assert done.model_attempts == 0
