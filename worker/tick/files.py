"""The claimed session's files during one tick (`TickFiles`): its working copy, checked out
when a tool (or the kind's `completed`) needs it, and what the tick changed in it.

It is the `tickwork.worker.jobs.SessionFiles` a job kind is given when its session completes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tickwork.fsm.machine import Change
from tickwork.fsm.values import Head
from tickwork.store.files import FileChange
from tickwork.worker.files import environments, versions
from tickwork.worker.files.workspaces import WorkingCopy, Workspaces, disk_full, session_files
from tickwork.worker.tick.runtime import Runtime

__all__ = ["TickFiles", "disk_full"]

log = logging.getLogger("tickwork.tick")


class TickFiles:
    """The claimed session's files during one tick: its working copy, checked out when a
    tool (or the job's finish) needs it, and what the tick changed in it."""

    def __init__(self, rt: Runtime, head: Head, *, node: str | None = None) -> None:
        self.rt, self.head = rt, head
        #: the Celery worker's name (`--hostname`) the tick runs under, as its lease names it
        self.node = node
        self.copy: WorkingCopy | None = None
        #: the change to save with the tick
        self.recorded: FileChange | None = None
        self._changes = False

    @property
    def workspaces(self) -> Workspaces:
        """This host's working copies and the stored files behind them."""
        return self.rt.workspaces

    def open(self, *, changes: bool) -> Path | None:
        """The directory the tools work in; marked dirty if they may change it."""
        if session_files(self.head) is None:
            legacy = self.head.config.get("workspace")  # a kind that names its own folder
            return None if legacy is None else Path(legacy)
        if self.copy is None:
            self.copy = self.rt.workspaces.checkout(self.head)
        if changes and not self._changes:
            self._changes = True
            self.copy.begin()
        return self.copy.path

    def prepare(self, head: Head) -> Change | Head:
        """The session's environment before its first model call (`environments.prepare`),
        its build claimed under this worker's name, as the tick's lease is."""
        return environments.prepare(self.rt, head, node=self.node)

    def environment(self, head: Head | None = None) -> Path | None:
        """This host's copy of the session's environment (for /env), if it has one; the
        version files its build wrote are put into the working copy where it has none."""
        found = environments.mounted(self.rt, head or self.head)
        if found is not None and self.copy is not None:
            versions.restore(found, self.copy.path)
        return found

    def changed(self) -> list[str]:
        """The paths the session's stored files differ in from its source (none for a
        session without files of its own)."""
        files = session_files(self.head)
        if files is None:
            return []
        before = self.workspaces.base(files)
        after, _ = self.workspaces.manifest(self.head)
        return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))

    def record(self, *, step: int, call_id: str, paths: list[str] | None = None) -> None:
        if self.copy is not None and self._changes:
            self.recorded = self.copy.record(step=step, call_id=call_id, paths=paths)

    def saved(self, head: Head) -> None:
        if self.copy is not None:
            try:
                self.copy.saved()
            except OSError as exc:
                if not disk_full(exc):
                    raise
                # the tick is saved; the copy stays marked dirty and is rebuilt next time
                log.warning(
                    "session %s: the working copy's state could not be written (%s); it is "
                    "rebuilt at its next tick",
                    head.id,
                    exc,
                )
        if head.status.terminal and session_files(head) is not None:
            self.release()
            self.rt.workspaces.drop(head.id)

    def discard(self) -> None:
        """Save nothing of the tick's files; the copy stays marked dirty if it was."""
        self.recorded = None
        self.release()

    def release(self) -> None:
        if self.copy is not None:
            self.copy.release()
            self.copy = None
