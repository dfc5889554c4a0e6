"""Retention and files: every host drops its working copy of an archived session, and a fork
of an archived repair session starts from the files of its fork step."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import Status
from tickwork.store import Store
from tickwork.store.archive import DirectoryArchive
from tickwork.store.archived import load_archived, saved_of
from tickwork.store.artifacts import DatabaseArtifacts
from tickwork.store.retention import Policy, archive_pass
from tickwork.store.schema import blobs
from tickwork.store.sweep import Restoring
from tickwork.worker.files import sources
from tickwork.worker.files.workspaces import Workspaces
from tickwork.worker.tick.retention import RetentionSettings, drop_archived_copies

from tests.conftest import Clock
from tests.store.conftest import reply, think
from tests.worker.test_workspaces import _host, _session, _tick, project, store

__all__ = ["project", "store"]


def test_archived_sessions_copies_are_dropped_and_a_fork_keeps_its_files(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    base, _ = sources.pack(project, DatabaseArtifacts(store.engine))
    head = _session(store, clock, base)
    a, b = _host(tmp_path, store, "host-a"), _host(tmp_path, store, "host-b")

    def fix(root: Path) -> None:
        (root / "pkg" / "calc.py").write_text("def add(a, b):\n    return a + b\n")

    _tick(store, clock, a, head, fix)
    b.checkout(store.get(head.id)).release()
    done = think(store, head.id, reply(content="fixed"), now=clock.advance(1))
    assert done.status is Status.COMPLETED
    copies = [host.root / "sessions" for host in (a, b)]
    assert all(any(p.is_dir() for p in folder.iterdir()) for folder in copies)
    since = clock()
    archive = DirectoryArchive(tmp_path / "archive")
    policy = Policy(completed_s=60)

    live = DatabaseArtifacts(store.engine)
    stored = blob_count(store)
    assert stored >= 4  # the base manifest, three source files, the fixed file

    report = archive_pass(
        store.engine, store.load, archive, policy, now=clock.advance(61), artifacts=live
    )

    assert report.archived == 1
    assert report.blobs_moved == stored and blob_count(store) == 0  # no live session needs one
    assert len(list((archive.root / "blobs").rglob("*"))) >= stored
    for host in (a, b):
        assert drop_archived_copies(store, host.root, host.drop, since=since) == 1
    assert not any(any(p.is_dir() for p in folder.iterdir()) for folder in copies)

    found = load_archived(store.engine, archive, head.id)
    assert found is not None
    child = store.fork(
        head.id,
        new_id="child",
        from_step=1,
        patch=ForkPatch(),
        by="dave",
        now=clock(),
        archived=(found.session, saved_of(found.record)),
    )
    assert child.parent_id == head.id
    c = Workspaces(tmp_path / "host-c", store, Restoring(live, archive))
    assert c.read(store.get("child"), "pkg/calc.py") == b"def add(a, b):\n    return a + b\n"
    assert blob_count(store) == 2  # read back from the archive and put back: manifest, file


def test_blobs_a_live_session_still_uses_stay(
    store: Store, clock: Clock, project: Path, tmp_path: Path
) -> None:
    live = DatabaseArtifacts(store.engine)
    base, _ = sources.pack(project, live)
    first = _session(store, clock, base, "first")
    _session(store, clock, base, "second")
    host = _host(tmp_path, store, "host-a")

    def fix(root: Path) -> None:
        (root / "pkg" / "calc.py").write_text("only the first wrote this\n")

    _tick(store, clock, host, first, fix)
    think(store, first.id, reply(content="fixed"), now=clock.advance(1))
    stored = blob_count(store)
    archive = DirectoryArchive(tmp_path / "archive")

    report = archive_pass(
        store.engine,
        store.load,
        archive,
        Policy(completed_s=60),
        now=clock.advance(61),
        artifacts=live,
    )

    assert (report.archived, report.blobs_moved) == (1, 1)  # the file only it wrote
    assert blob_count(store) == stored - 1
    assert (
        Workspaces(tmp_path / "host-b", store, live).read(store.get("second"), "pkg/calc.py")
        == (project / "pkg" / "calc.py").read_bytes()
    )


def blob_count(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(blobs)).scalar_one())


def test_retention_is_off_unless_an_age_is_set(tmp_path: Path) -> None:
    assert not RetentionSettings().policy().enabled
    on = RetentionSettings(retention_failed_s=0)
    assert on.policy().enabled and on.policy().failed_s == 0


def test_a_shared_database_needs_a_shared_archive(tmp_path: Path) -> None:
    """With the database shared by many hosts, an archive in one host's state folder would
    hide what it archived from the others: writing to it is refused, naming the fix."""
    from tickwork.fsm.errors import ConfigurationError
    from tickwork.worker.config.settings import Settings

    shared = Settings(
        database_url="postgresql+psycopg://db.example/tickwork", state_dir=tmp_path / "state"
    )
    with pytest.raises(ConfigurationError, match="TICKWORK_RETENTION_ARCHIVE_URL"):
        RetentionSettings().shared_archive(shared)
    url = (tmp_path / "shared").as_uri()
    assert RetentionSettings(retention_archive_url=url).shared_archive(shared).url == url
    embedded = Settings(state_dir=tmp_path / "state")  # one SQLite file: one host
    assert RetentionSettings().shared_archive(embedded) is not None
