"""Issue 27: an EXECUTE tick starts no thread. Its tool runs in a reused thread
(`tickwork.worker.tools.threads`), and one thread per process watches the heads of every
running tool's session (`Watches`), instead of two thread starts per tick."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tickwork.store import Store, open_store
from tickwork.store.migrate import upgrade
from tickwork.worker.tick.runtime import Watches, utc_now
from tickwork.worker.tools.threads import IDLE, Threads

from tickwork.client import Tickwork
from tickwork.testing import until


def _started() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def test_a_tool_thread_is_reused_and_a_hung_one_is_not_waited_for() -> None:
    threads = Threads(kept=2)
    names: list[str] = []
    done = threads.start(lambda: names.append(threading.current_thread().name), name="tool-a")
    assert done.wait(10)
    until(lambda: IDLE in {t.name for t in threading.enumerate()}, timeout=10, what="idle")
    before = _started()
    for n in range(5):
        job = threads.start(lambda: names.append(threading.current_thread().name), name=f"tool-{n}")
        assert job.wait(10)
    assert _started() <= before, "a call started a thread while one was idle"
    assert names == ["tool-a", *(f"tool-{n}" for n in range(5))]

    release = threading.Event()
    hung = threads.start(lambda: release.wait(30), name="tool-hung")
    assert not hung.wait(0.05)
    # the hung call keeps its thread; the next call gets another and is not held up
    assert threads.start(lambda: None, name="tool-next").wait(10)
    release.set()
    assert hung.wait(10)
    until(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("tool-")],
        timeout=10,
        what="no busy tool thread",
    )


def test_a_call_made_as_soon_as_one_ends_takes_its_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread is back among the idle ones before its caller hears of the end: one slow
    to get there (paused, on a loaded machine) is not passed over for a new thread."""
    threads = Threads(kept=2)
    offer = threads.offer

    def slow_offer(worker: Any) -> bool:
        time.sleep(0.1)
        return offer(worker)

    monkeypatch.setattr(threads, "offer", slow_offer)
    ran: list[int] = []
    for name in ("tool-a", "tool-b"):
        assert threads.start(lambda: ran.append(threading.get_ident()), name=name).wait(10)
    assert ran[0] == ran[1], "the second call started a thread of its own"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    url = f"sqlite:///{tmp_path / 'watches.db'}"
    upgrade(url)
    store = open_store(url)
    yield store  # type: ignore[misc]
    store.engine.dispose()


def test_one_thread_watches_every_running_tool(store: Store, tmp_path: Path) -> None:
    from tickwork.worker.config.settings import Settings

    settings = Settings(database_url=str(store.engine.url), state_dir=tmp_path / "state")
    client = Tickwork(settings, store=store)
    client.publish = lambda *_: None  # type: ignore[method-assign]
    first = client.submit("tests.jobs:TEST", {}, model="scripted:[]").id
    second = client.submit("tests.jobs:TEST", {}, model="scripted:[]").id
    watches = Watches(store, every_s=0.05, clock=utc_now)
    lease_lost: list[str] = []
    watching = [t for t in threading.enumerate() if t.name == "tickwork-stops"]
    with (
        watches.watch(first) as stop_first,
        watches.watch(second, lease=lambda: lease_lost[0] if lease_lost else None) as stop_second,
    ):
        now = [t for t in threading.enumerate() if t.name == "tickwork-stops"]
        assert len(now) == len(watching) + 1, "one thread watches both calls"
        assert stop_first() is None and stop_second() is None
        client.cancel(first)
        until(lambda: stop_first() is not None, timeout=10, what="the cancel seen")
        assert "cancel" in (stop_first() or "")
        assert stop_second() is None
        lease_lost.append("the lease is gone")
        assert stop_second() == "the lease is gone"
    # the watched head is read no more once its call ended
    assert not watches._watched


def test_a_deadline_passed_is_seen_by_the_watching_thread(store: Store, tmp_path: Path) -> None:
    from tickwork.worker.config.settings import Settings

    settings = Settings(database_url=str(store.engine.url), state_dir=tmp_path / "state")
    client = Tickwork(settings, store=store)
    client.publish = lambda *_: None  # type: ignore[method-assign]
    session_id = client.submit(
        "tests.jobs:TEST", {}, model="scripted:[]", budgets={"deadline_s": 60}
    ).id
    later = utc_now() + timedelta(hours=1)
    watches = Watches(store, every_s=0.05, clock=lambda: later)
    with watches.watch(session_id) as stop:
        until(lambda: stop() is not None, timeout=10, what="the deadline seen")
    assert "deadline" in (stop() or ""), stop()
