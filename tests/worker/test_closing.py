"""What an embedder's close lets go of: a runtime (or an app) built in a test or a
long-running service and closed leaves no thread of its own running, and a closed runtime
used again opens what it needs again, as an engine disposed or a Celery app closed does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tickwork.store import Store
from tickwork.worker.config.settings import Settings
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.runtime import Runtime

from tickwork.testing import until
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
    with rt.leases.hold(session_id, version, owner):
        lease = lambda: rt.leases.lost(session_id, version)  # noqa: E731
        with rt.watches.watch(session_id, lease=lease) as stop:
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
