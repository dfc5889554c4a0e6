"""A session's files as data: a base manifest plus the changes its ticks saved
(docs/DESIGN.md section 10).

A manifest maps a relative path to `"<mode> <blob hash>"` (mode `100644` or `100755`, as
git writes them); the blobs live in the artifact store (`artifacts.py`). A change set maps
a path to its new entry, or None for a deleted file. Each saved change names the files it
leaves by a state hash chained from the one before, so a worker tells in one lookup whether
its working copy is the session's files at the claimed version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, select
from tickwork.store.schema import file_changes

Manifest = dict[str, str]
Changes = Mapping[str, str | None]

#: the mode of an ordinary and of an executable file in a manifest entry
PLAIN, EXECUTABLE = "100644", "100755"


def entry(mode: str, blob: str) -> str:
    return f"{mode} {blob}"


def parse_entry(value: str) -> tuple[str, str]:
    """(mode, blob hash) of a manifest entry."""
    mode, _, blob = value.partition(" ")
    return mode, blob


def blob_hash(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def next_state(previous: str, changes: Changes) -> str:
    """The state hash after `changes` on the files named by `previous`."""
    return hashlib.sha256(previous.encode() + b"\n" + canonical(dict(changes))).hexdigest()


def applied(manifest: Mapping[str, str], changes: Changes) -> Manifest:
    """`manifest` with `changes` made."""
    out = dict(manifest)
    for path, value in changes.items():
        if value is None:
            out.pop(path, None)
        else:
            out[path] = value
    return out


def difference(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str | None]:
    """The change set that turns `before` into `after`."""
    changed: dict[str, str | None] = {p: v for p, v in after.items() if before.get(p) != v}
    changed.update({p: None for p in before if p not in after})
    return dict(sorted(changed.items()))


@dataclass(frozen=True)
class FileChange:
    """What one tick changed in a session's files; saved with the tick (`Store.save`)."""

    #: the step and call that made it ("" for a fork's start or the final test run)
    step: int
    call_id: str
    changes: Mapping[str, str | None]
    #: the state hash of the files after the change
    state: str
    #: blob hash -> content of the files it wrote (put in the artifact store before the save)
    blobs: Mapping[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def row(self, session_id: str, version: int) -> dict[str, Any]:
        return {
            "session_id": session_id,
            "version": version,
            "step": self.step,
            "call_id": self.call_id,
            "changes": dict(self.changes),
            "state": self.state,
        }


@dataclass(frozen=True)
class Saved:
    """One stored row of `tickwork_file_changes`."""

    version: int
    step: int
    call_id: str
    changes: Mapping[str, str | None]
    state: str


def saved_changes(
    bind: Engine | Connection, session_id: str, *, upto: int | None = None
) -> list[Saved]:
    """The session's saved changes in the order they were made (up to version `upto`)."""
    query = select(file_changes).where(file_changes.c.session_id == session_id)
    if upto is not None:
        query = query.where(file_changes.c.version <= upto)
    query = query.order_by(file_changes.c.version)
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            found = conn.execute(query).mappings().all()
    else:
        found = bind.execute(query).mappings().all()
    return [
        Saved(r["version"], r["step"], r["call_id"], dict(r["changes"]), r["state"]) for r in found
    ]


def current_state(engine: Engine, session_id: str) -> str | None:
    """The state hash of the session's last saved change, or None if it saved none."""
    query = (
        select(file_changes.c.state)
        .where(file_changes.c.session_id == session_id)
        .order_by(file_changes.c.version.desc())
        .limit(1)
    )
    with engine.connect() as conn:
        return conn.execute(query).scalar()


def collapsed(saved: Iterable[Saved]) -> dict[str, str | None]:
    """One change set doing what `saved` did in order."""
    out: dict[str, str | None] = {}
    for change in saved:
        out.update(change.changes)
    return dict(sorted(out.items()))


def fork_start(
    parent: Iterable[Saved], *, base_state: str, from_step: int, kept_calls: set[str]
) -> FileChange | None:
    """A fork's first change: what the kept calls of the parent's steps 1..`from_step` did
    to its files (None if they did nothing)."""
    kept = [s for s in parent if s.step <= from_step and s.call_id in kept_calls]
    changes = collapsed(kept)
    if not changes:
        return None
    return FileChange(
        step=from_step, call_id="", changes=changes, state=next_state(base_state, changes)
    )
