"""A running command fenced to its tick's lease, even while the worker cannot act (issue 24).

The worker kills a command whose lease is lost as soon as it notices
(`tickwork.worker.tick.runtime.Leases` and the `stop` a command polls). A worker that is
stopped (SIGSTOP, a debugger, a swap storm) notices nothing; its command runs on, and once
the lease has run out another worker may run the same command. So each worker process has
one small watchdog process beside it, in a session of its own (a signal to the worker's
process group does not stop it): every running command is registered with the time its lease
runs out, pushed forward at each renewal, and the watchdog kills the command's process group
a little before that time, whatever the worker is doing. Times are CLOCK_MONOTONIC, which
every process of a host shares. When the worker dies, the watchdog reads the end of its pipe
and kills every command still registered, then exits.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import threading

log = logging.getLogger("tickwork.sandbox")

#: the watchdog: lines `PID DEADLINE` (watch, or move the deadline) and `PID -` (forget)
SCRIPT = r"""
import os, select, signal, time
deadlines, rest = {}, b""
def kill(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
while True:
    now = time.monotonic()
    for pid, at in list(deadlines.items()):
        if at <= now:
            kill(pid)
            del deadlines[pid]
    wait = min(deadlines.values(), default=now + 3600.0) - now
    if not select.select([0], [], [], max(wait, 0.0))[0]:
        continue
    chunk = os.read(0, 65536)
    if not chunk:
        break
    *lines, rest = (rest + chunk).split(b"\n")
    for line in lines:
        pid, _, at = line.decode().partition(" ")
        if at == "-":
            deadlines.pop(int(pid), None)
        else:
            deadlines[int(pid)] = float(at)
for pid in deadlines:
    kill(pid)
"""


class Watchdog:
    """This process's watchdog, started at its first command (again in a forked child)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._pid = 0

    def tell(self, pid: int, deadline: float | None) -> None:
        """Kill `pid`'s process group at the monotonic `deadline`; None: no more."""
        line = f"{pid} {'-' if deadline is None else repr(deadline)}\n".encode()
        with self._lock:
            for _ in range(2):
                process = self._running()
                try:
                    assert process.stdin is not None
                    process.stdin.write(line)
                    process.stdin.flush()
                    return
                except OSError as exc:  # it died: start another, which knows nothing yet
                    log.warning("the command watchdog died (%s); starting another", exc)
                    self._process = None

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._pid != os.getpid() or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", SCRIPT],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self._pid = os.getpid()
        return self._process

    def close(self) -> None:
        """Stop this process's watchdog as its end would (its pipe closed: it kills the
        commands still registered, and exits) and reap it, so the interpreter's end finds
        no child of its own still running (`subprocess N is still running`). A command
        told of later starts another. A forked child's copy is its parent's: left alone."""
        if self._process is None or self._pid != os.getpid():
            return
        process, self._process = self._process, None
        if process.stdin is not None:
            with contextlib.suppress(OSError):  # it died already: nothing left to flush
                process.stdin.close()
        try:
            process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


#: how long `Watchdog.close` waits for the watchdog to kill what is registered and exit
CLOSE_WAIT_S = 5.0

#: one per worker process: made at import, its process started at the first command (a
#: module-level holder so it lives as long as the process and is never collected half-used),
#: stopped and reaped at the process's exit
WATCHDOG = Watchdog()
atexit.register(WATCHDOG.close)
