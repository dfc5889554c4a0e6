"""Real deployments for the tick tests: SQLite + filesystem broker, Postgres + Redis, and
Postgres + RabbitMQ.

The in-process worker, scripts and waits are `tickwork.testing`'s, which users' tests share.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from tickwork.worker.config.settings import Settings

from tests.services import rabbitmq_url
from tickwork import Tickwork
from tickwork.testing import prepare_database, running_worker, write_script
from tickwork.testing import until as until  # still importable from here

ROOT = Path(__file__).resolve().parents[2]
TEST_KIND = "tests.jobs:TEST"


class Deployment:
    """A database, a broker and settings; workers come and go."""

    def __init__(self, name: str, settings: Settings, tmp: Path) -> None:
        self.name, self.settings, self.tmp = name, settings, tmp
        self.sink = tmp / "sink"
        self.sink.mkdir()
        self.client = Tickwork(settings)

    def script(self, replies: list[dict[str, Any]], name: str = "script") -> str:
        return write_script(replies, self.tmp, name=name)

    def submit(self, replies: list[dict[str, Any]], **kw: Any) -> str:
        head = self.client.submit(
            TEST_KIND, {"sink": str(self.sink)}, model=self.script(replies), **kw
        )
        return head.id

    def sink_lines(self, log: str) -> list[str]:
        path = self.sink / log
        return path.read_text().splitlines() if path.exists() else []

    def env(self) -> dict[str, str]:
        s = self.settings
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TICKWORK_DATABASE_URL": s.db_url,
            "TICKWORK_BROKER_URL": s.broker_url,
            "TICKWORK_STATE_DIR": str(s.state_dir),
            "TICKWORK_QUEUE": s.queue,
            "TICKWORK_DEAD_LETTER_QUEUE": s.dead_letter_queue,
            "TICKWORK_LEASE_S": str(s.lease_s),
            "TICKWORK_RELAY_PERIOD_S": str(s.relay_period_s),
            "TICKWORK_RELAY_AFTER_S": str(s.relay_after_s),
        }
        return env

    @contextmanager
    def worker(self, *, concurrency: int = 2, relay: bool = True) -> Iterator[Celery]:
        """A real Celery worker in a thread of this process, with the relay and (with
        TICKWORK_WEBHOOK_URL) the webhook dispatcher; it consumes the tick queue only (dead
        letters stay on their queue, to be read)."""
        with running_worker(
            self.settings, concurrency=concurrency, relay=relay, queues=[self.settings.queue]
        ) as app:
            yield app

    def spawn(self, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A `celery worker` subprocess (solo pool: SIGKILL takes its work with it); `env`
        adds to its environment (e.g. its own TICKWORK_WORKSPACES_DIR: another host)."""
        with open(self.tmp / f"worker-{uuid.uuid4().hex[:6]}.log", "wb") as log:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "tickwork.worker.tick.app",
                    "worker",
                    "--pool",
                    "solo",
                    "-Q",
                    self.settings.queue,
                    "--loglevel",
                    "INFO",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    *extra,
                ],
                cwd=ROOT,
                env={**self.env(), **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def close(self) -> None:
        self.client.close()


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def owner_pid(deployment: Deployment, session_id: str) -> int | None:
    """The pid of the worker process whose lease the session is under (`host:pid:thread@K`),
    or None if nobody holds it."""
    lease = deployment.client.store.lease(session_id)
    return None if lease is None else int(lease[0].split(":")[1])


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            kill(proc)


#: the deployments: SQLite + filesystem broker; Postgres + Redis (or the broker named by
#: TICKWORK_BROKER_URL, so `TICKWORK_BROKER_URL=amqp://... pytest tests/tasks` runs every
#: tick test on RabbitMQ); Postgres + RabbitMQ (chosen per test: `on_every_broker`)
DEPLOYMENTS = ("embedded", "production", "rabbitmq")
#: the delivery tests (end-to-end runs, kills, redelivery, the relay) run on every broker;
#: the rest on the first two deployments only, to keep CI short
on_every_broker = pytest.mark.parametrize("deployment", DEPLOYMENTS, indirect=True)


def production_broker(request: pytest.FixtureRequest) -> str:
    chosen = os.environ.get("TICKWORK_BROKER_URL", "")
    if chosen.startswith(("amqp", "pyamqp")):
        return rabbitmq_url(chosen)
    return str(request.getfixturevalue("redis"))


def _settings(name: str, tmp: Path, request: pytest.FixtureRequest, **kw: Any) -> Settings:
    queue = f"tickwork.ticks.{uuid.uuid4().hex[:8]}"
    common = dict(
        state_dir=tmp / "state",
        queue=queue,
        dead_letter_queue=f"{queue}.dead",
        lease_s=3.0,
        relay_period_s=0.25,
        relay_after_s=1.5,
        **kw,
    )
    if name == "embedded":
        return Settings(broker_url="", **common)  # not TICKWORK_BROKER_URL's
    url = str(request.getfixturevalue("clean_postgres_url"))
    broker = rabbitmq_url() if name == "rabbitmq" else production_broker(request)
    return Settings(database_url=url, broker_url=broker, **common)


def delete_queues(settings: Settings) -> None:
    """A RabbitMQ deployment's queues (and their exchanges), gone: each test declares its own."""
    if not settings.broker_url.startswith(("amqp", "pyamqp")):
        return
    from kombu import Connection

    with Connection(settings.broker_url) as conn:
        channel = conn.channel()
        for name in (settings.queue, settings.dead_letter_queue):
            channel.queue_delete(name)
            channel.exchange_delete(name)


@pytest.fixture(params=DEPLOYMENTS[:2])
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    """SQLite + filesystem broker, and Postgres + Redis; Postgres + RabbitMQ where a test
    asks for it (`on_every_broker`)."""
    settings = _settings(request.param, tmp_path, request)
    if request.param == "embedded":
        prepare_database(settings)
    d = Deployment(request.param, settings, tmp_path)
    yield d
    d.close()
    delete_queues(settings)
