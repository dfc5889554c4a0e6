"""The threads tools run in: kept and reused, so a tick starts none.

A tool runs in a thread of its own so that one that hangs can be abandoned at its timeout
(a Python thread cannot be killed). Starting a thread costs about a millisecond of a tick
on a loaded machine; here an idle thread takes the next call, a new one is started only
when none is idle (a hung tool keeps its thread until it ends), and idle threads beyond
`KEPT` end. The threads are daemons, as the threads started per call were: a tool still
hanging at exit does not hold the process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["IDLE", "KEPT", "Threads", "run_in_thread"]

#: idle threads kept for the next calls; more end when their call does
KEPT = 32

#: the name of an idle thread (a busy one is named after the call it runs)
IDLE = "tickwork-tool-idle"


class _Thread:
    """One reusable daemon thread: runs the job it is handed, then offers itself again."""

    def __init__(self, pool: Threads) -> None:
        self._pool = pool
        self._job: tuple[Callable[[], object], str, threading.Event] | None = None
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=IDLE, daemon=True)

    def hand(self, job: Callable[[], object], name: str, done: threading.Event) -> None:
        self._job = (job, name, done)
        self._ready.set()

    def _run(self) -> None:
        while True:
            self._ready.wait()
            self._ready.clear()
            assert self._job is not None
            job, name, done = self._job
            self._job = None
            self.thread.name = name
            returned = False
            try:
                job()
                returned = True
            finally:
                # idle again, and back among the idle threads, before the caller hears of
                # the end: nothing looks busy after it, and its next call takes this thread
                # (a job that raised ends its thread, which is not offered)
                self.thread.name = IDLE
                kept = returned and self._pool.offer(self)
                done.set()
            if not kept:
                return


class Threads:
    """A process's reusable tool threads."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._idle: list[_Thread] = []
        self._lock = threading.Lock()

    def start(self, job: Callable[[], object], *, name: str) -> threading.Event:
        """Run `job` in an idle thread (or a new one) named `name` while it runs; the event
        is set once it has returned (a job must catch what it raises)."""
        done = threading.Event()
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Thread(self)
            worker.hand(job, name, done)
            worker.thread.start()
        else:
            worker.hand(job, name, done)
        return done

    def offer(self, worker: _Thread) -> bool:
        """Take `worker` back as idle; False (it ends) when enough are idle already."""
        with self._lock:
            if len(self._idle) >= self._kept:
                return False
            self._idle.append(worker)
            return True


_THREADS = Threads()


def _forget_after_fork() -> None:
    """A forked child (Celery's prefork pool) has none of its parent's threads."""
    global _THREADS
    _THREADS = Threads()


os.register_at_fork(after_in_child=_forget_after_fork)


def run_in_thread(job: Callable[[], object], *, name: str) -> threading.Event:
    """`Threads.start` on this process's tool threads."""
    return _THREADS.start(job, name=name)
