"""Delayed ticks wait in the database, not in the broker (docs/DESIGN.md section 11).

On RabbitMQ a countdown message is delivered at once and held unacknowledged by a worker
until its time comes; past the broker's delivery timeout (30 minutes by default) the
broker closes the worker's channel. A model's Retry-After must therefore leave no message
on the queue: the tick is acknowledged, the session waits in the outbox with a due time,
and the relay publishes it when due.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from tickwork.fsm.values import EventKind, Status
from tickwork.store.schema import outbox
from tickwork.worker.config.settings import Settings
from tickwork.worker.tick.app import consumer_timeout_note

from tests.services import IN_CI, rabbitmq_url
from tests.tasks.conftest import TEST_KIND, Deployment, stop
from tests.worker.models.conftest import ChatServer, chat_server
from tickwork.testing import until

__all__ = ["chat_server"]  # the fixture, shared with tests/worker/models


def queues() -> dict[str, dict[str, Any]]:
    """RabbitMQ's own count of each queue's ready and unacknowledged messages."""
    if shutil.which("rabbitmqctl") is None:
        if IN_CI:
            pytest.fail("CI=true: rabbitmqctl is not installed", pytrace=False)
        pytest.skip("rabbitmqctl is not installed")
    listed = subprocess.run(
        [
            "rabbitmqctl",
            "-q",
            "list_queues",
            "--no-table-headers",
            "name",
            "messages_ready",
            "messages_unacknowledged",
            "type",
            "arguments",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    found = {}
    for line in listed.splitlines():
        name, ready, unacked, kind, arguments = line.split("\t", 4)
        found[name] = {
            "ready": int(ready),
            "unacked": int(unacked),
            "type": kind,
            "arguments": arguments,
        }
    return found


def _rabbitmqctl(*arguments: str) -> list[list[str]]:
    listed = subprocess.run(
        ["rabbitmqctl", "-q", *arguments, "--no-table-headers"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [line.split("\t") for line in listed.splitlines()]


def prefetch_counts() -> dict[str, list[int]]:
    """How many unacknowledged deliveries each queue's consumers may hold: the consumer's
    own prefetch (quorum queues) or else its channel's global one (classic queues)."""
    channels = {
        pid: int(global_count)
        for pid, global_count in _rabbitmqctl("list_channels", "pid", "global_prefetch_count")
    }
    found: dict[str, list[int]] = {}
    for name, pid, prefetch in _rabbitmqctl(
        "list_consumers", "queue_name", "channel_pid", "prefetch_count"
    ):
        found.setdefault(name, []).append(int(prefetch) or channels.get(pid, 0))
    return found


@pytest.fixture
def rabbit(
    tmp_path: Path, clean_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    """Postgres and RabbitMQ, with a 3 s cap on model retry delays."""
    broker = rabbitmq_url()
    queue = f"tickwork.ticks.{uuid.uuid4().hex[:8]}"
    settings = Settings(
        state_dir=tmp_path / "state",
        database_url=clean_postgres_url,
        broker_url=broker,
        queue=queue,
        dead_letter_queue=f"{queue}.dead",
        lease_s=3.0,
        relay_period_s=0.25,
        relay_after_s=30.0,  # far: only a delayed tick falling due is published promptly
        max_retry_delay_s=3.0,
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    d = Deployment("rabbitmq", settings, tmp_path)
    yield d
    d.close()
    from kombu import Connection

    with Connection(broker) as conn:
        channel = conn.channel()
        for name in (settings.queue, settings.dead_letter_queue):
            channel.queue_delete(name)
            channel.exchange_delete(name)


def test_a_retry_after_waits_in_the_outbox_not_unacknowledged_on_rabbitmq(
    rabbit: Deployment, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    chat_server.respond(
        429, {"error": {"message": "rate limited"}}, headers={"Retry-After": "1900"}
    )
    chat_server.answer("all done")
    head = rabbit.client.submit(TEST_KIND, {"sink": str(rabbit.sink)}, model="openai:gpt-4o")

    with rabbit.worker():
        waiting = until(
            lambda: (h := rabbit.client.get(head.id)).model_attempts == 1 and h,
            what="the 429 to be recorded",
        )
        with rabbit.client.store.engine.connect() as conn:
            rows = conn.execute(select(outbox).where(outbox.c.session_id == head.id)).all()
        queue = queues()[rabbit.settings.queue]
        done = rabbit.client.wait(head.id, timeout=30)

    assert waiting.status is Status.READY
    # the model asked for 1900 s; TICKWORK_MAX_RETRY_DELAY_S cut it to 3
    retry = next(e for e in rabbit.client.load(head.id).events if e.kind is EventKind.MODEL_RETRY)
    assert retry.data["delay_s"] == 3.0
    # the tick was acknowledged: the wait is a due outbox row, not a held message
    assert len(rows) == 1
    assert rows[0].version == waiting.version
    assert rows[0].published_at is None
    assert (rows[0].due_at - waiting.updated_at).total_seconds() == pytest.approx(3.0, abs=1.0)
    assert (queue["ready"], queue["unacked"]) == (0, 0)
    # the relay published it when due (long before its 30 s lost-message threshold)
    assert done.status is Status.COMPLETED
    assert len(chat_server.requests) == 2


@pytest.mark.parametrize("queue_type", ["quorum", "classic"])
def test_tickwork_queues_are_declared_as_documented_on_rabbitmq(
    rabbit: Deployment, queue_type: str
) -> None:
    from kombu import Connection

    with Connection(rabbit.settings.broker_url) as conn:
        conn.connect()
        server = str(conn.connection.server_properties["version"])
    delayed_before = {name for name in queues() if name.startswith("celery_delayed")}
    worker = rabbit.spawn(
        "--queues",
        f"{rabbit.settings.queue},{rabbit.settings.dead_letter_queue}",
        "--pool",
        "threads",
        "--concurrency",
        "2",
        env={"TICKWORK_RABBITMQ_QUEUE_TYPE": queue_type},
    )
    try:
        (log,) = rabbit.tmp.glob("worker-*.log")
        until(lambda: "ready." in log.read_text(), timeout=60, what="the worker to start")
        listed = queues()
        ticks, letters = listed[rabbit.settings.queue], listed[rabbit.settings.dead_letter_queue]
        prefetch = prefetch_counts()
    finally:
        stop(worker)

    for declared in (ticks, letters):
        assert declared["type"] == queue_type
        # a quorum queue drops a message given back 10 times (the relay republishes it)
        assert ("x-delivery-limit" in declared["arguments"]) is (queue_type == "quorum")
    # prefetch multiplier 1: one unacknowledged delivery per thread (a quorum queue has no
    # global prefetch, so Celery sets it per consumer)
    assert prefetch[rabbit.settings.queue] == [2]
    # Celery's delayed-delivery queues are not declared: tickwork sends no countdowns
    assert {name for name in listed if name.startswith("celery_delayed")} == delayed_before

    # a server that ignores the argument is named at start, with the setting to change
    expected = consumer_timeout_note(server, rabbit.settings.delivery_timeout_s)
    notes = [line for line in log.read_text().splitlines() if "x-consumer-timeout" in line]
    assert len(notes) == (1 if expected else 0)
    assert expected is None or expected in notes[0]
    for declared in (ticks, letters):
        assert "x-consumer-timeout" in declared["arguments"]
        assert str(int(rabbit.settings.delivery_timeout_s * 1000)) in declared["arguments"]


@pytest.mark.parametrize(
    ("server", "named"),
    [
        ("3.10.8", "consumer_timeout = 1800000"),
        ("3.11.28", "consumer_timeout = 1800000"),
        ("3.12.0", None),
        ("4.0.5", None),
        ("unknown", "check that it honours x-consumer-timeout"),
    ],
)
def test_a_server_that_ignores_the_queue_timeout_is_named(server: str, named: str | None) -> None:
    note = consumer_timeout_note(server, 1800.0)
    if named is None:
        assert note is None
    else:
        assert note is not None and named in note


def test_a_tool_call_ends_before_the_brokers_delivery_timeout(deployment: Deployment) -> None:
    # a broker that gives a delivery 301 s leaves a tick's calls 1 s (the rest is margin)
    deployment.settings = deployment.settings.model_copy(
        update={"delivery_timeout_s": 301.0, "model_timeout_s": 1.0}
    )
    sid = deployment.submit(
        [
            {
                "content": "act",
                "tool_calls": [{"name": "idem_effect", "arguments": {"value": "x", "sleep_s": 5}}],
            },
            {"content": "done"},
        ]
    )
    with deployment.worker():
        done = deployment.client.wait(sid, timeout=60)

    (observation,) = deployment.client.load(sid).observations
    assert done.status is Status.COMPLETED
    assert observation.is_error and "timed out after 1s" in observation.content
