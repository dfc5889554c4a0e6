"""What an embedder's close lets go of: a runtime (or an app) built in a test or a
long-running service and closed leaves no thread of its own running, and a closed runtime
used again opens what it needs again, as an engine disposed or a Celery app closed does; a
worker that stops stops its own app's relay, not another app's in the same process."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, signals
from celery.contrib.testing.worker import TestWorkController, start_worker
from sqlalchemy import text
from tickwork.fsm.values import Status
from tickwork.store import Store
from tickwork.worker.config.settings import Settings
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.app import TICK, make_app, runtime
from tickwork.worker.tick.dispatcher import Dispatcher
from tickwork.worker.tick.runtime import Runtime

from tickwork.client import Tickwork
from tickwork.testing import prepare_database, until, write_script
from tickwork.testing.store_ticks import claim, new_session

#: a short lease, renewed every 0.5 s: one not renewed is lost within seconds
LEASE_S = 1.5
#: the threads a runtime starts beside its ticks
THREADS = {"tickwork-leases", "tickwork-stops", "tickwork-liveness"}


def _now() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def rt(database_url: str, store: Store, tmp_path: Path) -> Iterator[Runtime]:
    settings = Settings(
        database_url=database_url, state_dir=tmp_path, lease_s=LEASE_S, stop_poll_s=0.05
    )
    made = Runtime(settings=settings, store=store, jobs=Jobs(), publish_tick=lambda *_: None)
    made.liveness.enabled = True  # as a worker's: a sign of life from its first lease
    yield made
    made.close()


def _tick(rt: Runtime, store: Store, session_id: str) -> tuple[str | None, str | None]:
    """What a tick of `session_id` holds: its lease and a watched tool call. Why the lease
    is lost, and why the call must stop, after two leases' time and a cancel."""
    store.create(new_session(session_id, now=_now()), now=_now())
    owner = rt.owner()
    version = claim(store, session_id, now=_now(), owner=owner).head.version

    def lease() -> str | None:
        return rt.leases.lost(session_id, version)

    with (
        rt.leases.hold(session_id, version, owner),
        rt.watches.watch(session_id, lease=lease) as stop,
    ):
        time.sleep(2 * LEASE_S)  # renewed meanwhile, or lost
        lost = lease()
        store.request_cancel(session_id, now=_now())
        until(stop, timeout=10, what="the cancel seen by the watch")
        return lost, stop()


def _started_since(before: set[threading.Thread]) -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t not in before}


def test_a_closed_runtime_leaves_no_thread_and_starts_them_again_when_used(
    rt: Runtime, store: Store
) -> None:
    before = set(threading.enumerate())
    assert _tick(rt, store, "s-1") == (None, "the session was cancelled")
    started = _started_since(before)
    named = {t.name for t in started}
    assert {"tickwork-leases", "tickwork-stops"} <= named <= THREADS

    rt.close()
    assert [t.name for t in started if t.is_alive()] == []

    # used again: a new tick's lease is renewed and its call watched, by new threads
    assert _tick(rt, store, "s-2") == (None, "the session was cancelled")
    again = _started_since(before)
    assert {"tickwork-leases", "tickwork-stops"} <= {t.name for t in again if t.is_alive()}
    rt.close()
    assert [t.name for t in again if t.is_alive()] == []


@dataclass(eq=False)
class Consumer:
    """What Celery sends `worker_ready` from: it knows its app."""

    app: Celery


def _backends(store: Store, pids: set[int]) -> set[int]:
    """Which of the Postgres backends `pids` are still connected."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE pid = ANY(:p)"), {"p": list(pids)}
        )
        return {row[0] for row in rows}


def test_a_closed_app_is_collected_with_its_threads_stopped_and_its_engine_disposed(
    database_url: str, store: Store, tmp_path: Path
) -> None:
    before = set(threading.enumerate())
    app = make_app(Settings(database_url=database_url, state_dir=tmp_path), relay=True)
    signals.worker_ready.send(sender=Consumer(app))  # as a worker's start: its relay runs
    rt = runtime(app)
    rt.owner()  # its first lease's sign of life
    engine = rt.store.engine
    postgres = engine.dialect.name == "postgresql"
    with engine.connect() as one, engine.connect() as two:  # two connections kept in the pool
        pids = (
            {c.execute(text("SELECT pg_backend_pid()")).scalar_one() for c in (one, two)}
            if postgres
            else set()
        )
    assert engine.pool.checkedin() == 2
    started = _started_since(before)
    assert "tickwork-relay" in {t.name for t in started}
    collected = weakref.ref(app)

    app.close()
    del app, rt
    gc.collect()
    assert collected() is None, "the closed app is still reachable"
    assert [t.name for t in started if t.is_alive()] == []
    assert (engine.pool.checkedout(), engine.pool.checkedin()) == (0, 0)
    if postgres:
        until(lambda: not _backends(store, pids), timeout=30, what="the pool's connections closed")


def test_an_app_dropped_unclosed_is_collected() -> None:
    # Celery's signals hold its receivers weakly; before, they held them (and the app)
    # until the process ended, one set per app a test or a service built
    collected = weakref.ref(make_app(Settings(), relay=True))
    gc.collect()
    assert collected() is None


def test_a_closed_client_closes_the_app_it_made(tmp_path: Path) -> None:
    client = Tickwork(Settings(state_dir=tmp_path))
    client.publish("s-1", 0)  # its app is made at the first publish
    collected = weakref.ref(client.app)
    client.close()
    gc.collect()
    assert collected() is None, "the client's app is still reachable once it is closed"


class _Worker(TestWorkController):
    """A worker in a thread of this process that says it is ready as `celery worker` does:
    `worker_ready` from its consumer, which starts its app's relay."""

    def on_consumer_ready(self, consumer: Any) -> None:
        super().on_consumer_ready(consumer)
        signals.worker_ready.send(sender=consumer)


@contextmanager
def _started(app: Celery) -> Iterator[tuple[TestWorkController, threading.Thread]]:
    """A real worker of `app` in a thread of this process, until the block ends: the
    worker, and the app's relay thread (`tickwork-relay`) its start began."""
    before = set(threading.enumerate())
    with start_worker(
        app,
        pool="threads",
        concurrency=1,
        perform_ping_check=False,
        shutdown_timeout=30,
        loglevel="WARNING",
        WorkController=_Worker,
    ) as controller:
        relay = until(
            lambda: [t for t in _started_since(before) if t.name == "tickwork-relay"],
            timeout=10,
            what="the app's relay started with its worker",
        )
        yield controller, relay[0]


@contextmanager
def _running(app: Celery) -> Iterator[threading.Thread]:
    """`_started`, stopped at the block's end with a warm shutdown: the app's relay thread."""
    with _started(app) as (controller, relay):
        yield relay
        controller.stop()  # a warm shutdown, as SIGTERM's: `worker_shutdown` from the worker
    # kombu's loop, stopped from this thread, may make its waker after the hub was closed:
    # closed here rather than left to the collector (a ResourceWarning at the session's end)
    if getattr(controller, "hub", None) is not None:
        controller.hub.close()
    until(lambda: not relay.is_alive(), timeout=10, what="the relay stopped with its worker")


@contextmanager
def _worker(settings: Settings) -> Iterator[tuple[TestWorkController, threading.Thread]]:
    """An app with its relay (`make_app`) and a real worker of it on the filesystem broker,
    in this process: the worker, and the app's relay thread (`tickwork-relay`)."""
    prepare_database(settings)
    app = make_app(settings, relay=True)
    try:
        with _started(app) as started:
            yield started
    finally:
        app.close()


def test_one_apps_worker_shutting_down_leaves_the_other_apps_relay_running(
    tmp_path: Path,
) -> None:
    """Two apps, each with its worker, in one process: the first worker's shutdown stopped
    the second app's relay too (its receiver stopped its threads before it looked at which
    app's worker had sent it), so the second worker ran on with no relay."""

    def settings(name: str) -> Settings:
        return Settings(
            state_dir=tmp_path / name, broker_url="", relay_period_s=0.1, relay_after_s=0
        )

    one, two = settings("one"), settings("two")
    with _worker(one) as (first, first_relay), _worker(two) as (_, second_relay):
        first.stop()  # a warm shutdown: `worker_shutdown` from the first worker

        until(lambda: not first_relay.is_alive(), timeout=10, what="the first app's relay")
        assert second_relay.is_alive()
        client = Tickwork(two)
        try:
            _relayed(client, tmp_path, by="the second app's relay and its worker")
        finally:
            client.close()


def _relayed(client: Tickwork, tmp_path: Path, *, by: str) -> None:
    """A session submitted with its first tick never published (`client.publish` does
    nothing), so only a relay offers it: until it is completed `by` a relay and a worker."""
    client.publish = lambda *_: None  # type: ignore[method-assign]
    script = write_script([{"content": "done"}], tmp_path)
    session_id = client.submit("tests.jobs:TEST", {"sink": str(tmp_path)}, model=script).id
    until(
        lambda: client.get(session_id).status is Status.COMPLETED,
        timeout=30,
        what=f"the session, completed by {by}",
    )


def test_a_second_worker_of_the_same_app_starts_its_relay(redis: str, tmp_path: Path) -> None:
    """An app whose worker stopped, given a second worker: the first worker's shutdown
    stopped the app's relay but kept it in the app's list, so the second worker's start
    took it for running and started none, and a tick whose publish was lost was never
    offered again."""
    settings = Settings(
        state_dir=tmp_path,
        broker_url=redis,
        queue=f"tickwork.ticks.{uuid.uuid4().hex}",
        relay_period_s=0.1,
        relay_after_s=0,
    )
    prepare_database(settings)
    app = make_app(settings, relay=True)
    client = Tickwork(settings)
    try:
        with _running(app) as first:
            pass
        assert not first.is_alive()
        with _running(app) as second:
            assert second is not first
            _relayed(client, tmp_path, by="the app's second worker and its relay")
    finally:
        client.close()
        app.close()


def _free_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return int(listener.getsockname()[1])


def test_a_closed_app_leaves_none_of_the_threads_started_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The webhook dispatcher's and the tracer's threads, and the /metrics server a worker's
    start began: before, an app closed after its worker's start (without its shutdown) left
    the /metrics server listening, and one without a relay (a process that ticks by itself)
    left the dispatcher a tick had woken and the tracer's exporting thread running."""
    monkeypatch.setenv("TICKWORK_WEBHOOK_URL", "http://127.0.0.1:9/hooks")
    monkeypatch.setenv("TICKWORK_OTEL_ENABLED", "true")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("TICKWORK_METRICS_ADDR", "127.0.0.1")
    port = _free_port()
    monkeypatch.setenv("TICKWORK_METRICS_PORT", str(port))
    served, ticking = Settings(state_dir=tmp_path / "one"), Settings(state_dir=tmp_path / "two")
    for settings in (served, ticking):
        prepare_database(settings)
    before = set(threading.enumerate())
    with make_app(served, relay=True) as app:
        signals.worker_ready.send(sender=Consumer(app))  # its worker's start
        started = _started_since(before)
        assert {"tickwork-relay", "tickwork-webhooks", "OtelBatchSpanRecordProcessor"} <= {
            t.name for t in started
        }
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # /metrics listens
    assert [t.name for t in started if t.is_alive()] == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()

    before = set(threading.enumerate())
    with make_app(ticking, relay=False) as app:
        [dispatcher] = [b for b in runtime(app).background if isinstance(b, Dispatcher)]
        dispatcher.wake()  # as a tick that started waiting for a person does
        started = _started_since(before)
        assert {"tickwork-webhooks", "OtelBatchSpanRecordProcessor"} <= {t.name for t in started}
        dispatcher.stop()  # as a worker's shutdown: the next worker's start begins it again
        dispatcher.start()
        started = _started_since(before)
        assert "tickwork-webhooks" in {t.name for t in started if t.is_alive()}
    assert [t.name for t in started if t.is_alive()] == []


def _sockets_to(port: int) -> int:
    """How many TCP connections this process holds to `port`."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            inodes.add(os.readlink(f"/proc/self/fd/{fd}"))
    held = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                remote, inode = fields[2], fields[9]
                if int(remote.rsplit(":", 1)[1], 16) == port and f"socket:[{inode}]" in inodes:
                    held += 1
    return held


def test_a_closed_app_closes_its_broker_connections_and_no_other_apps(
    redis: str, tmp_path: Path
) -> None:
    """Celery's close dropped its broker pools without closing them, and those pools were
    kombu's process-wide ones for the broker's URL: an app's publishes left connections open
    until the process ended. Each app now has pools of its own, which its close closes; an
    app on the same broker keeps its own open."""
    port = int(redis.rsplit(":", 1)[1].split("/")[0])
    queue = f"tickwork.ticks.{uuid.uuid4().hex}"
    settings = Settings(state_dir=tmp_path, broker_url=redis, queue=queue)
    before = _sockets_to(port)
    other = make_app(settings, relay=False)
    try:
        other.send_task(TICK, args=("s-1", 1), queue=queue)
        held_by_other = _sockets_to(port)
        assert held_by_other > before
        with make_app(settings, relay=False) as app:
            app.send_task(TICK, args=("s-1", 2), queue=queue)
            assert _sockets_to(port) > held_by_other, "the app publishes on the other's pool"
        assert _sockets_to(port) == held_by_other, "the closed app's connections are left open"
        other.send_task(TICK, args=("s-1", 3), queue=queue)  # the other app's pool still works
        with other.connection_for_read() as conn, conn.SimpleQueue(queue) as published:
            for _ in range(3):
                published.get(timeout=10).ack()
    finally:
        other.close()
    assert _sockets_to(port) == before
