"""The blobs of an archived session's files, copied back into the artifact store so a fork
of it runs on any worker (the client has the archive's URL; workers need not)."""

from __future__ import annotations

from collections.abc import Sequence

from tickwork.fsm.values import Session
from tickwork.store.artifacts import Artifacts
from tickwork.store.files import Saved, parse_entry
from tickwork.worker.files.workspaces import Workspaces, session_files

#: blobs read back from the archive at a time when a fork of an archived session is made
BRING_BACK_CHUNK = 256


def bring_back(
    parent: Session, saved: Sequence[Saved], *, artifacts: Artifacts, files: Workspaces
) -> None:
    """Copy the blobs of `parent`'s source and of every version of its files it saved from
    the archive back into the artifact store (`artifacts` reads them back from the archive
    and puts them back when retention moved them)."""
    found = session_files(parent.head)
    if found is None:
        return
    artifacts.get([str(found["base"])])
    keys = {parse_entry(value)[1] for value in files.base(found).values()}
    keys.update(
        parse_entry(value)[1]
        for change in saved
        for value in change.changes.values()
        if value is not None
    )
    ordered = sorted(keys)
    for start in range(0, len(ordered), BRING_BACK_CHUNK):
        artifacts.get(ordered[start : start + BRING_BACK_CHUNK])
