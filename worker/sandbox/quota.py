"""A session's disk: its quota and the reserve of the workspaces filesystem (issue 24).

Working copies of all sessions of a host share one filesystem, so one session filling it
would fail the others. Two rules keep them apart:

- **quota**: a session's working copy holds at most `disk_bytes` (and `disk_files`
  entries); a command passing it is killed, a file tool refuses to write past it;
- **reserve**: a command or file tool may not bring the filesystem's free space below
  `reserve_bytes`; only the one whose writes crossed it fails (a command that wrote nothing
  goes on), so the reserve is left for the worker's own writes (rebuilding other sessions'
  working copies) and other sessions' small writes.

A command is watched while it runs, not only after: `Watch` walks the working copy from a
thread of its own, summing allocated blocks (`st_blocks`, so sparse files count as what
they take), and stops after `disk_files` entries. A walk costs about 1 µs an entry; the
next starts after `INTERVAL_S` or four times the last walk's length, whichever is longer,
so watching takes at most a fifth of one core however large the copy. Why not a
filesystem per session (a loop-mounted image or a tmpfs for each working copy): it needs
root and loop devices on every host, a tmpfs takes memory, and neither follows a working
copy the worker rebuilds; the walk works for any worker, and the sandbox's /tmp already is
a tmpfs of its own size (`Limits.tmp_bytes`).
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tickwork.fsm.errors import ToolError
from tickwork.worker.config.process import Loop

log = logging.getLogger("tickwork.sandbox")

#: the shortest time between two walks of a working copy
INTERVAL_S = 0.5


@dataclass(frozen=True)
class Usage:
    bytes: int
    files: int
    #: False when the walk stopped at its cap of entries
    complete: bool = True


def usage(roots: Iterable[Path], *, max_files: int) -> Usage:
    """The blocks allocated under `roots` (symlinks not followed, hard links counted
    once), stopping after `max_files` entries."""
    total = files = 0
    seen: set[tuple[int, int]] = set()
    pending = [str(root) for root in roots]
    while pending:
        folder = pending.pop()
        try:
            entries = os.scandir(folder)
        except OSError:  # gone meanwhile, or unreadable: its own blocks were counted
            continue
        with entries:
            for entry in entries:
                files += 1
                if files > max_files:
                    return Usage(total, files, complete=False)
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                    if (info.st_dev, info.st_ino) in seen:
                        continue
                    seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    pending.append(entry.path)
    return Usage(total, files)


def free_bytes(path: Path) -> int:
    """What an unprivileged writer may still write on `path`'s filesystem."""
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def over(
    start: Usage,
    now: Usage,
    free: tuple[int, int],
    *,
    disk_bytes: int,
    disk_files: int,
    reserve_bytes: int,
) -> str | None:
    """Why a session must stop writing, having gone from `start` to `now` while the
    filesystem's free space went from `free[0]` to `free[1]`; None if it may go on.

    Past its quota or file count while it grew; or growing below the reserve when it is
    the one that crossed it (free space above the reserve when it started) or a session
    as large as the reserve: a small session may still write into the reserve someone
    else's command left it. Deleting is never stopped, so a copy over its quota can be
    cleaned up."""
    grew = now.bytes - start.bytes
    if start.complete and not now.complete:
        return (
            f"the working copy holds more than {disk_files} files and directories, the "
            "session's limit (TICKWORK_SESSION_DISK_FILES)"
        )
    if grew > 0 and now.bytes > disk_bytes:
        return (
            f"the working copy takes {now.bytes} bytes on disk, over the session's quota of "
            f"{disk_bytes} (TICKWORK_SESSION_DISK_BYTES); delete what is not needed"
        )
    crossed = free[0] >= reserve_bytes or now.bytes >= reserve_bytes
    if grew > 0 and free[1] < reserve_bytes and crossed:
        return (
            f"the workspaces filesystem has {free[1]} bytes free, below its reserve of "
            f"{reserve_bytes} (TICKWORK_DISK_RESERVE_BYTES), after this session wrote {grew} "
            "bytes more; other sessions share it, delete what is not needed"
        )
    return None


def check_write(root: Path, adding: int, *, disk_bytes: int, disk_files: int, reserve: int) -> None:
    """A `ToolError` if writing `adding` bytes more in the working copy `root` would pass
    the session's quota or bring the filesystem below its reserve."""
    if adding <= 0:  # a write that frees space is never stopped
        return
    now = usage([root], max_files=disk_files)
    after = Usage(now.bytes + adding, now.files + 1, now.files < disk_files)
    free = free_bytes(root)
    why = over(
        now,
        after,
        (free, free - adding),
        disk_bytes=disk_bytes,
        disk_files=disk_files,
        reserve_bytes=reserve,
    )
    if why is not None:
        raise ToolError(f"nothing was written: {why}")


class Watch:
    """Watches a running command's working copy (and any more `roots`) from a thread of its
    own; calling it says why the command must be killed, or None."""

    def __init__(
        self, roots: list[Path], *, disk_bytes: int, disk_files: int, reserve_bytes: int
    ) -> None:
        self.roots = roots
        self.limits = {
            "disk_bytes": disk_bytes,
            "disk_files": disk_files,
            "reserve_bytes": reserve_bytes,
        }
        self._reason: str | None = None
        self._start = usage(roots, max_files=disk_files)
        self._free = free_bytes(roots[0])
        self._wait = INTERVAL_S
        self._loop = Loop(
            "disk",
            self._walk,
            every_s=lambda: self._wait,
            log=log,
            what="a walk of the command's files",
        )

    def __call__(self) -> str | None:
        return self._reason

    def __enter__(self) -> Watch:
        self._loop.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.stop()
        self._loop.join()

    def last(self) -> str | None:
        """Why the command, now ended, went past a limit (it may have ended between two
        walks), or None."""
        return self._reason or self._look(usage(self.roots, max_files=self.limits["disk_files"]))

    def _look(self, now: Usage) -> str | None:
        return over(self._start, now, (self._free, free_bytes(self.roots[0])), **self.limits)

    def _walk(self) -> None:
        began = time.monotonic()
        self._reason = self._look(usage(self.roots, max_files=self.limits["disk_files"]))
        if self._reason is not None:
            self._loop.stop()
        self._wait = max(INTERVAL_S, 4 * (time.monotonic() - began))
