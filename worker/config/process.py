"""This worker process: the name it holds leases by, and the loops it runs beside its ticks.

Every periodic thread of a worker (the relay, the pruner, the webhook dispatcher, the lease
renewals, an environment build's claim renewal, the watchers beside a running command) is
a `Loop`, started and stopped one way: a daemon thread named `tickwork-<name>`, one stop
event, a step run once a period, and a step that raises logged and run again a period later.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

#: the most of a worker's node name a lease's owner keeps (the column holds 200 characters,
#: and the process, thread and sign take up to 49 more)
NODE_CHARS = 120
#: the refused ticks a worker process remembers having seen recorded (`Refusals`)
REFUSALS_KEPT = 4096

#: a refused tick: the session's id and creation time, its version, the refusing node
Refusal = tuple[str, datetime, int, str]


def node_name(node: str | None = None) -> str:
    """This worker: its node name as Celery knows it (`--hostname`, what `celery inspect`
    shows; else this host's name), the same in each of its processes and after a restart."""
    return (node or socket.gethostname())[:NODE_CHARS]


def worker_name(node: str | None = None) -> str:
    """This worker process: its node name (`node_name`) and its process id."""
    return f"{node_name(node)}:{os.getpid()}"


def owner_name(node: str | None = None) -> str:
    """Who holds a lease or an environment's build claim: this worker process
    (`worker_name`) and thread."""
    return f"{worker_name(node)}:{threading.get_ident()}"


class Refusals:
    """The refused ticks this process knows are recorded on their session (a `tick_refused`
    event of the node at that version), so that a tick offered again and refused again is
    neither written nor looked up; the last `size` are kept."""

    def __init__(self, size: int = REFUSALS_KEPT) -> None:
        self._size = size
        self._known: OrderedDict[Refusal, None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, refusal: Refusal) -> bool:
        with self._lock:
            return refusal in self._known

    def add(self, refusal: Refusal) -> None:
        with self._lock:
            self._known[refusal] = None
            self._known.move_to_end(refusal)
            while len(self._known) > self._size:
                self._known.popitem(last=False)


class Loop:
    """A daemon thread `tickwork-<name>` that runs `step` every `every_s` seconds (a number,
    or a function read before each wait) until `stop` (which a step may call itself once
    there is nothing more to do).

    The first step runs after one period, or at once with `at_once`. `wake` runs the next
    step now instead of at the end of the period. A step that raises is logged on `log` as
    "`what` failed (the error); trying again in N s" (the traceback at debug level) and the
    loop goes on. `start` starts the thread, or starts it again if it ended; once stopped
    it starts no more.
    """

    def __init__(
        self,
        name: str,
        step: Callable[[], object],
        *,
        every_s: float | Callable[[], float],
        log: logging.Logger,
        what: str,
        at_once: bool = False,
    ) -> None:
        self.name = f"tickwork-{name}"
        self.stopped = threading.Event()
        self._step, self._every_s, self._log, self._what = step, every_s, log, what
        self._at_once = at_once
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self.stopped.is_set():
                return
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        """Ask the loop to end; a step under way finishes first (`join` waits for it)."""
        self.stopped.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        with self._lock:  # never a thread `start` made but has not started yet
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def is_alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def period(self) -> float:
        return self._every_s() if callable(self._every_s) else self._every_s

    def _run(self) -> None:
        if not self._at_once and self._pause():
            return
        while True:
            self._wake.clear()
            try:
                self._step()
            except Exception as exc:
                self._log.warning(
                    "%s failed (%s); trying again in %gs", self._what, exc, self.period()
                )
                self._log.debug("%s failed", self._what, exc_info=True)
            if self._pause():
                return

    def _pause(self) -> bool:
        """Wait one period, or until woken; True once the loop is stopped."""
        if self.stopped.is_set():
            return True
        self._wake.wait(self.period())
        return self.stopped.is_set()
