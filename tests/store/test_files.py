"""A session's files in the store: each tick's change saved with it, forks starting from the
files of their step, and the database's blobs (on SQLite and Postgres)."""

from __future__ import annotations

import pytest
from tickwork.fsm.errors import BlobMissing, ClaimLost
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import Session
from tickwork.store import Store
from tickwork.store.artifacts import DatabaseArtifacts
from tickwork.store.files import FileChange, applied, blob_hash, collapsed, next_state
from tickwork.store.schema import file_changes

from tests.conftest import Clock
from tests.store.conftest import (
    claim,
    count_rows,
    execute_change,
    new_session,
    reply,
    table_rows,
    think,
)

BASE = "b" * 64


def _with_files(session: Session) -> Session:
    config = {**session.head.config, "files": {"base": BASE}}
    return session.model_copy(update={"head": session.head.model_copy(update={"config": config})})


def _edit(store: Store, session_id: str, clock: Clock, path: str, content: bytes | None) -> None:
    """One step: think one call, execute it and save the file change with it."""
    think(store, session_id, reply(("write_file", {"path": path})), now=clock.advance(1))
    claimed = claim(store, session_id, now=clock.advance(1))
    change = execute_change(store, claimed, now=clock())
    previous = store.files_state(session_id) or BASE
    value = None if content is None else f"100644 {blob_hash(content)}"
    files = FileChange(
        step=claimed.head.step,
        call_id=claimed.calls[0].call_id,
        changes={path: value},
        state=next_state(previous, {path: value}),
    )
    store.save(change, version=claimed.head.version, owner="worker-1", now=clock(), files=files)


@pytest.fixture
def edited(store: Store, clock: Clock) -> str:
    store.create(_with_files(new_session("files-1", now=clock())), now=clock())
    _edit(store, "files-1", clock, "a.py", b"one")
    _edit(store, "files-1", clock, "b.py", b"two")
    _edit(store, "files-1", clock, "a.py", None)
    return "files-1"


def test_each_tick_saves_its_change_with_the_observation(store: Store, edited: str) -> None:
    saved = store.file_changes(edited)
    assert [s.changes for s in saved] == [
        {"a.py": f"100644 {blob_hash(b'one')}"},
        {"b.py": f"100644 {blob_hash(b'two')}"},
        {"a.py": None},
    ]
    # saved at the version the tick moved the head to: two ticks per step
    assert [s.version for s in saved] == [2, 4, 6]
    assert [(s.step, s.call_id) for s in saved] == [(1, "s1c0"), (2, "s2c0"), (3, "s3c0")]
    assert store.files_state(edited) == saved[-1].state
    files: dict[str, str] = {}
    for s in saved:
        files = applied(files, s.changes)
    assert files == {"b.py": f"100644 {blob_hash(b'two')}"}
    assert collapsed(saved) == {"a.py": None, "b.py": f"100644 {blob_hash(b'two')}"}
    assert [s.version for s in store.file_changes(edited, upto=4)] == [2, 4]


def test_a_lost_save_keeps_no_file_change(store: Store, clock: Clock) -> None:
    store.create(_with_files(new_session("files-2", now=clock())), now=clock())
    think(store, "files-2", reply(("write_file", {"path": "x"})), now=clock.advance(1))
    claimed = claim(store, "files-2", now=clock.advance(1))
    change = execute_change(store, claimed, now=clock())
    files = FileChange(step=1, call_id="s1c0", changes={"x": None}, state="s" * 64)
    with pytest.raises(ClaimLost):
        store.save(change, version=claimed.head.version, owner="thief", now=clock(), files=files)
    assert table_rows(store.engine, file_changes) == []
    assert store.files_state("files-2") is None


def test_a_fork_starts_from_the_files_its_kept_calls_left(
    store: Store, clock: Clock, edited: str
) -> None:
    patch = ForkPatch()
    store.fork(edited, new_id="from-1", from_step=1, patch=patch, by="d", now=clock())
    store.fork(edited, new_id="from-2", from_step=2, patch=patch, by="d", now=clock())
    store.fork(edited, new_id="from-0", from_step=0, patch=patch, by="d", now=clock())

    [start] = store.file_changes("from-1")
    assert start.version == 0 and start.call_id == ""
    assert start.changes == {"a.py": f"100644 {blob_hash(b'one')}"}
    [start] = store.file_changes("from-2")
    assert start.changes == {
        "a.py": f"100644 {blob_hash(b'one')}",
        "b.py": f"100644 {blob_hash(b'two')}",
    }
    assert store.file_changes("from-0") == [] and store.files_state("from-0") is None
    assert len(store.file_changes(edited)) == 3  # the parent is untouched


def test_the_database_stores_each_blob_once(store: Store) -> None:
    artifacts = DatabaseArtifacts(store.engine)
    blobs = {blob_hash(b"x" * 1000): b"x" * 1000, blob_hash(b""): b""}
    assert artifacts.put(blobs) == 1000
    assert artifacts.put(blobs) == 0
    assert count_rows(store.engine)["tickwork_blobs"] == 2
    assert artifacts.get(blobs) == blobs
    with pytest.raises(BlobMissing, match="not in the artifact store"):
        artifacts.get([blob_hash(b"never put")])
    with pytest.raises(ValueError, match="does not hold the content"):
        artifacts.put({blob_hash(b"a"): b"b"})
