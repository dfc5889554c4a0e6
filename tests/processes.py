"""The machine's processes found by their command line, as one test may count them.

Under pytest-xdist (`./dev test` runs the suite in several workers) other tests run at the
same time, some with the same command lines (a sandbox's `forward.py`, a fork bomb's `b | b`,
a parametrized test's marker): what another worker started is not this test's. A process
counts unless it descends from another worker of this run; a process that escaped its
parent (re-parented to pid 1) still counts, so a leak is still seen.
"""

from __future__ import annotations

import os
from pathlib import Path


def parent_of(pid: int) -> int | None:
    """The parent's pid, None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _pids() -> list[int]:
    return [int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()]


def other_workers() -> set[int]:
    """The other pytest-xdist workers of this run (the controller's other children); none
    when the tests run in one process."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return set()
    controller, me = os.getppid(), os.getpid()
    return {pid for pid in _pids() if pid != me and parent_of(pid) == controller}


def _started_by(pid: int, workers: set[int]) -> bool:
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        if pid in workers:
            return True
        seen.add(pid)
        pid = parent_of(pid) or 0
    return False


def processes_with(marker: str, *, exact: bool = False) -> list[int]:
    """Host pids whose command line holds `marker` (`exact`: is `marker`), but for this
    process and what other xdist workers started."""
    others = other_workers()
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        matched = cmdline.strip() == marker.encode() if exact else marker.encode() in cmdline
        if matched and not _started_by(pid, others):
            found.append(pid)
    return found
