"""At-least-once delivery, exactly-once advance: duplicates, reordering and lost messages."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, timedelta

import pytest
from celery.utils.saferepr import saferepr
from sqlalchemy import select
from tickwork.fsm.values import Status
from tickwork.store.schema import outbox
from tickwork.worker.tick.app import TICK, make_app, runtime
from tickwork.worker.tick.runtime import utc_now

from tests.fakes import FakeModel, fake_model_server
from tests.tasks.conftest import Deployment, on_every_broker
from tickwork.testing import call, until


def script(steps: int) -> list[dict[str, object]]:
    replies: list[dict[str, object]] = [
        {
            "content": f"step {i}",
            "tool_calls": [
                {"name": "idem_effect", "arguments": {"value": f"v{i}"}},
                {"name": "effect", "arguments": {"value": f"w{i}"}},
            ],
        }
        for i in range(steps)
    ]
    return [*replies, {"content": "done"}]


@on_every_broker
def test_every_tick_published_twice_and_out_of_order_advances_once(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = script(4)
    with fake_model_server(FakeModel(replies)) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        head = deployment.client.submit(
            "tests.jobs:TEST", {"sink": str(deployment.sink)}, model="openai:fake", price=(0, 0)
        )
        deployment.client.publish(head.id, 0)
        with deployment.worker(concurrency=4) as app:
            rt = runtime(app)
            publish = rt.publish_tick

            def twice(session_id: str, version: int, countdown: float) -> None:
                publish(session_id, version, countdown + 0.05)  # the duplicate arrives late
                publish(session_id, version, countdown)
                if version > 0:
                    publish(session_id, version - 1, 0)  # and a stale one

            rt.publish_tick = twice
            done = deployment.client.wait(head.id, timeout=90)
        assert done.status is Status.COMPLETED
        assert fake.requests == Counter({i: 1 for i in range(len(replies))})
    effects = deployment.sink_lines("effect.log")
    idem = deployment.sink_lines("idem.log")
    assert len(effects) == len(set(effects)) == 4
    assert len(idem) == len(set(idem)) == 4
    session = deployment.client.load(head.id)
    assert all(
        len([o for o in session.observations if o.call_id == c.call_id]) == 1
        for s in session.steps
        for c in s.calls
    )


@on_every_broker
def test_a_tick_lost_between_commit_and_publish_is_published_by_the_relay(
    deployment: Deployment,
) -> None:
    session_id = deployment.submit(script(2))
    deployment.settings.drop_publish_rate = 1.0  # every publish after a commit is lost
    with deployment.worker():
        head = deployment.client.wait(session_id, timeout=90)
    assert head.status is Status.COMPLETED
    assert len(deployment.sink_lines("effect.log")) == 2


@on_every_broker
def test_a_broker_that_is_down_at_submit_loses_nothing(deployment: Deployment) -> None:
    if deployment.name == "embedded":
        pytest.skip("the filesystem broker cannot be down")
    from tickwork import Tickwork

    # nothing listens there
    nowhere = "amqp://127.0.0.1:1//" if deployment.name == "rabbitmq" else "redis://127.0.0.1:1/0"
    offline = Tickwork(deployment.settings.model_copy(update={"broker_url": nowhere}))
    try:
        session_id = offline.submit(
            "tests.jobs:TEST",
            {"sink": str(deployment.sink)},
            model=deployment.script([{"content": "done"}]),
        ).id
    finally:
        offline.close()
    assert deployment.client.get(session_id).status is Status.READY
    # offered at once to the relays, not a threshold after the submit: the first relay pass
    # once the broker answers (`tickwork relay --once`) publishes it
    with deployment.client.store.engine.connect() as conn:
        (due_at,) = conn.execute(
            select(outbox.c.due_at).where(outbox.c.session_id == session_id)
        ).one()
    lag = timedelta(seconds=deployment.settings.relay_after_s)
    due_at = due_at if due_at.tzinfo else due_at.replace(tzinfo=UTC)  # SQLite's are naive
    assert due_at < utc_now() - lag
    with deployment.worker():  # the client's settings still name the live broker
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED


def _copies_in_redis(deployment: Deployment) -> int:
    """How many of this deployment's tick messages Redis keeps as delivered and not yet
    acknowledged (kombu's `unacked` hash; other tests' entries are told apart by queue)."""
    import redis

    client = redis.Redis.from_url(deployment.settings.broker_url)
    try:
        held = [json.loads(v) for v in client.hvals("unacked")]
    finally:
        client.close()
    return sum(1 for _, _, routing_key in held if routing_key == deployment.settings.queue)


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
@pytest.mark.parametrize("emulated", [False, True], ids=["default", "ack-emulation"])
def test_redis_keeps_a_copy_of_a_running_tick_only_with_ack_emulation(
    deployment: Deployment, emulated: bool
) -> None:
    """By default Redis keeps no copy of the tick a worker runs: the outbox and the relay
    bring back what a killed worker held. TICKWORK_REDIS_ACK_EMULATION=true keeps one until
    the tick's ack, as kombu does by default."""
    if not deployment.settings.broker_url.startswith("redis"):
        pytest.skip("the production deployment runs on RabbitMQ (TICKWORK_BROKER_URL)")
    if emulated:
        deployment.settings = deployment.settings.model_copy(update={"redis_ack_emulation": True})
    sleeps = [
        {"content": "act", "tool_calls": [call("idem_effect", value="x", sleep_s=3.0)]},
        {"content": "done"},
    ]
    session_id = deployment.submit(sleeps)
    # no relay: a republished duplicate of the first tick, held a moment, would count too
    with deployment.worker(relay=False):
        until(lambda: deployment.sink_lines("idem.log"), timeout=60, what="the tool to start")
        held = _copies_in_redis(deployment)  # the tool's tick is running
        done = deployment.client.wait(session_id, timeout=60)
    assert done.status is Status.COMPLETED
    assert held == (1 if emulated else 0)
    assert _copies_in_redis(deployment) == 0


def test_a_published_tick_carries_its_arguments_as_celery_writes_them(
    deployment: Deployment,
) -> None:
    """`celery inspect` and Flower show a tick's arguments from its message's `argsrepr`:
    the publish gives it (Celery's own repr of them cost a fifth of a publish's CPU)."""
    with make_app(deployment.settings, relay=False) as app:
        runtime(app).publish_tick("s-1", 7, 0)
        with app.connection_for_read() as conn:
            message = conn.SimpleQueue(deployment.settings.queue).get(timeout=10)
            message.ack()
    assert message.headers["task"] == TICK
    assert message.headers["argsrepr"] == saferepr(("s-1", 7)) == "('s-1', 7)"
    assert message.headers["kwargsrepr"] == saferepr({})
    assert message.decode()[0] == ["s-1", 7]
