"""Memory and process limits for a command as a whole: one cgroup per command (issue 24).

prlimit's limits hold per process (RLIMIT_AS) or per user (RLIMIT_NPROC): six processes
of 250 MB each pass a 300 MB address-space limit. A cgroup counts them together. Where
the worker may make cgroups, each command gets its own, with `memory` (no swap beyond it)
and `pids` limits; a command whose processes together pass the memory limit is killed
whole (the kernel's OOM killer picks one process; `breach` sees it and the runner kills
the rest), and the group is emptied and removed when the command ends.

- cgroup v2 (the unified hierarchy, `/sys/fs/cgroup/cgroup.controllers`): the groups are
  made below the worker's own group, which must have the `memory` and `pids` controllers
  for its children. In a container with its own cgroup namespace and a writable cgroupfs
  (Docker's default private cgroup namespace, and /sys/fs/cgroup mounted read-write), the worker
  is at that namespace's root: it moves its processes into a leaf `worker` group and turns
  the controllers on, as container init systems do.
- cgroup v1 with writable `memory` (and `pids`) hierarchies, a root worker's usual case
  on older hosts: the groups are made below the worker's own group in each.
- elsewhere: only the per-process limits; `tickwork.worker.sandbox.runner.describe` says which hold.

A command joins its group before anything of it runs: the process the runner starts is a
small `sh` that writes its pid into the group's `cgroup.procs` and then `exec`s bwrap.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("tickwork.sandbox")

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids")
#: a command's group is `tickwork-<worker pid>-<random>`
PREFIX = "tickwork-"
#: joins the groups named before `--` and runs what follows (exit 125: it could not join)
JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class Hierarchy:
    """Where this worker makes its commands' groups."""

    version: int
    #: the folder a command's memory group is made in (v2: its only group)
    memory: Path
    #: v1: the folder its pids group is made in, if that hierarchy is writable
    pids: Path | None = None

    def describe(self) -> str:
        where = str(self.memory) if self.pids is None else f"{self.memory} and {self.pids}"
        return f"cgroup v{self.version} per command under {where}"


@functools.cache
def hierarchy() -> Hierarchy | str:
    """This worker's hierarchy for commands' groups, or why it has none (found once; the
    groups a dead worker left are removed then)."""
    try:
        if (ROOT / "cgroup.controllers").exists():
            found = _v2()
        elif (ROOT / "memory" / "memory.limit_in_bytes").exists():
            found = _v1()
        else:
            return f"no cgroup v2 or v1 memory hierarchy is mounted at {ROOT}"
    except OSError as exc:
        return f"the cgroups of this host cannot be used: {exc}"
    if isinstance(found, Hierarchy):
        _sweep(found)
    return found


def _sweep(where: Hierarchy) -> None:
    """Remove the groups of workers that died during a command (SIGKILL: no `close`)."""
    for parent in (where.memory, where.pids):
        for folder in parent.glob(f"{PREFIX}*-*") if parent is not None else ():
            pid = folder.name[len(PREFIX) :].split("-")[0]
            try:
                os.kill(int(pid), 0)
                continue  # its worker lives (or another process has its pid: left for later)
            except ProcessLookupError:
                pass
            except (ValueError, PermissionError):
                continue
            _empty(folder)
            try:
                folder.rmdir()
            except OSError as exc:
                log.warning("could not remove a dead worker's cgroup %s: %s", folder, exc)


def _own(controller: str) -> str:
    """The worker's group in `controller`'s hierarchy ("" for v2's), from /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    raise OSError(f"this process is in no {controller or 'unified'} cgroup")


def _v2() -> Hierarchy | str:
    own = ROOT / _own("").lstrip("/")
    if not os.access(own, os.W_OK):
        return (
            f"cgroup v2 is mounted but {own} is not writable by the worker (docker-compose: "
            "a private cgroup namespace and /sys/fs/cgroup read-write; elsewhere delegate it)"
        )
    wanted = set(CONTROLLERS)
    if not wanted <= set((own / "cgroup.controllers").read_text().split()):
        return f"cgroup v2 at {own} lacks the {' and '.join(CONTROLLERS)} controllers"
    enabled = set((own / "cgroup.subtree_control").read_text().split())
    if not wanted <= enabled:
        # a group with processes cannot hand controllers to its children: move ours into a
        # leaf first; only where the worker owns the whole tree (its namespace's root)
        if _own("") != "/":
            return (
                f"cgroup v2 at {own} does not give {' and '.join(CONTROLLERS)} to its children "
                "(cgroup.subtree_control) and the worker may not rearrange a group it shares"
            )
        leaf = own / "worker"
        leaf.mkdir(exist_ok=True)
        for pid in (own / "cgroup.procs").read_text().split():
            try:
                (leaf / "cgroup.procs").write_text(pid)
            except OSError:  # gone, or a kernel thread
                continue
        (own / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
    return Hierarchy(2, own)


def _v1() -> Hierarchy | str:
    memory = ROOT / "memory" / _own("memory").lstrip("/")
    if not os.access(memory, os.W_OK):
        return f"the cgroup v1 memory hierarchy at {memory} is not writable by the worker"
    pids: Path | None = None
    if (ROOT / "pids").is_dir():
        pids = ROOT / "pids" / _own("pids").lstrip("/")
        pids = pids if os.access(pids, os.W_OK) else None
    return Hierarchy(1, memory, pids)


class Group:
    """One command's cgroup(s): made with its limits, joined by the command, then removed."""

    def __init__(self, where: Hierarchy, *, memory_bytes: int, processes: int) -> None:
        self.where, self.memory_bytes = where, memory_bytes
        name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.memory = where.memory / name
        self.pids = where.pids / name if where.pids is not None else None
        self.folders = [p for p in (self.memory, self.pids) if p is not None]
        for folder in self.folders:
            folder.mkdir()
        try:
            if where.version == 2:
                _write(self.memory / "memory.max", memory_bytes)
                _write(self.memory / "memory.swap.max", 0, optional=True)
                _write(self.memory / "memory.oom.group", 1, optional=True)
                _write(self.memory / "pids.max", processes)
            else:
                _write(self.memory / "memory.limit_in_bytes", memory_bytes)
                _write(self.memory / "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
                if self.pids is not None:
                    _write(self.pids / "pids.max", processes)
        except BaseException:
            self.close()
            raise

    @property
    def counts_processes(self) -> bool:
        """Whether the group limits its processes (v2 always; v1 with a pids hierarchy)."""
        return self.where.version == 2 or self.pids is not None

    def wrap(self, args: list[str]) -> list[str]:
        """`args` run inside this group from their first instruction."""
        procs = [str(folder / "cgroup.procs") for folder in self.folders]
        return ["/bin/sh", "-c", JOIN, "sh", *procs, "--", *args]

    def breach(self) -> str | None:
        """Why the command must be killed whole (the kernel killed one of its processes for
        the group's memory), or None."""
        events = "memory.events" if self.where.version == 2 else "memory.oom_control"
        try:
            text = (self.memory / events).read_text()
        except OSError:
            return None
        counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        if int(counts.get("oom_kill", 0)) > 0:
            return (
                f"its processes together passed the memory limit of {self.memory_bytes} bytes "
                "(TICKWORK_SANDBOX_MEMORY_BYTES)"
            )
        return None

    def close(self) -> None:
        """Kill what is left in the group and remove it."""
        for folder in self.folders:
            _empty(folder)
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:  # a process that would not die: left for the operator
                log.warning("could not remove the command's cgroup %s: %s", folder, exc)


def _write(path: Path, value: int, *, optional: bool = False) -> None:
    try:
        path.write_text(str(value))
    except (FileNotFoundError, PermissionError):
        if not optional:
            raise


def _empty(folder: Path, *, within_s: float = 5.0) -> None:
    """SIGKILL every process of the group until none is left (or `within_s` passed)."""
    kill = folder / "cgroup.kill"
    if kill.exists():
        kill.write_text("1")
    ends = time.monotonic() + within_s
    while time.monotonic() < ends:
        try:
            pids = (folder / "cgroup.procs").read_text().split()
        except FileNotFoundError:
            return
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                continue
        time.sleep(0.01)
