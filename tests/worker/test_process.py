"""tickwork.worker.config.process: the one way a worker's background loops start and stop."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from tickwork.worker.config.process import Loop, owner_name

log = logging.getLogger("tickwork.test-loop")


def until(check: object, *, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_loop_is_a_named_daemon_thread_that_steps_each_period_until_stopped() -> None:
    steps: list[str] = []
    loop = Loop(
        "probe",
        lambda: steps.append(threading.current_thread().name),
        every_s=0.01,
        log=log,
        what="a probe",
    )
    loop.start()
    until(lambda: len(steps) >= 3)
    assert steps[0] == "tickwork-probe"
    assert [t.daemon for t in threading.enumerate() if t.name == "tickwork-probe"] == [True]
    loop.stop()
    loop.join(5)
    assert not loop.is_alive()
    count = len(steps)
    loop.start()  # once stopped, it starts no more
    time.sleep(0.05)
    assert len(steps) == count and not loop.is_alive()


def test_the_first_step_waits_a_period_unless_at_once_or_woken() -> None:
    later: list[int] = []
    now: list[int] = []
    slow = Loop("later", lambda: later.append(1), every_s=60, log=log, what="later")
    quick = Loop("now", lambda: now.append(1), every_s=60, log=log, what="now", at_once=True)
    slow.start()
    quick.start()
    until(lambda: now == [1])
    assert later == []
    slow.wake()
    until(lambda: later == [1])
    for loop in (slow, quick):
        loop.stop()
        loop.join(5)
        assert not loop.is_alive()


def test_a_step_that_raises_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the database is away")

    loop = Loop("flaky", step, every_s=0.01, log=log, what="a flaky pass")
    with caplog.at_level(logging.WARNING, logger=log.name):
        loop.start()
        until(lambda: len(calls) >= 2)
    loop.stop()
    loop.join(5)
    assert "a flaky pass failed (the database is away); trying again in 0.01s" in caplog.messages


def test_a_step_may_stop_its_own_loop_and_a_period_may_change() -> None:
    waits = iter([0.01, 0.02, 0.03])
    seen: list[float] = []
    box: list[Loop] = []

    def step() -> None:
        seen.append(time.monotonic())
        if len(seen) == 2:
            box[0].stop()

    loop = Loop("self-stop", step, every_s=lambda: next(waits), log=log, what="a pass")
    box.append(loop)
    loop.start()
    loop.join(5)
    assert not loop.is_alive() and len(seen) == 2


def test_the_owner_name_is_this_host_process_and_thread() -> None:
    names: list[str] = []
    worker = threading.Thread(target=lambda: names.append(owner_name()))
    worker.start()
    worker.join()
    here = owner_name()
    assert here.split(":")[:2] == names[0].split(":")[:2]
    assert here != names[0]  # another thread holds its leases under another name


def test_a_join_while_the_loop_starts_waits_for_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's shutdown may join a loop while the worker's start is starting it (each in
    a thread of its own): the join neither fails on a thread made but not started yet
    ("cannot join thread before it is started") nor misses the thread."""
    made = threading.Event()
    go_on = threading.Event()
    start = threading.Thread.start

    def slow_start(thread: threading.Thread) -> None:
        if thread.name.endswith("slow-start"):
            made.set()  # the loop holds its thread, not started yet
            go_on.wait(5)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    loop = Loop("slow-start", lambda: None, every_s=0.01, log=log, what="a slow start")
    starting = threading.Thread(target=loop.start)
    starting.start()
    assert made.wait(5)
    errors: list[BaseException] = []

    def join() -> None:
        try:
            loop.stop()
            loop.join(5)
        except BaseException as exc:
            errors.append(exc)

    joining = threading.Thread(target=join)
    joining.start()
    time.sleep(0.1)  # the join is waiting, not failing
    go_on.set()
    joining.join(5)
    starting.join(5)
    assert errors == []
    assert not loop.is_alive(), "the join waited for the loop's thread to end"
