"""Retention and files: every host drops its working copy of an archived session, and a fork
of an archived repair session starts from the files of its fork step."""

from __future__ import annotations

from pathlib import Path

from fsm.forks import ForkPatch
from fsm.values import Status
from store import Store
from store.archive import DirectoryArchive
from store.archived import load_archived, saved_of
from store.artifacts import DatabaseArtifacts
from store.retention import Policy, archive_pass
from tests.conftest import Clock
from tests.store.conftest import reply, think
from tests.worker.test_workspaces import _host, _session, _tick, project, store
from worker import sources
from worker.retention import RetentionSettings, drop_archived_copies

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

    report = archive_pass(store.engine, store.load, archive, policy, now=clock.advance(61))

    assert report.archived == 1
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
    assert a.read(store.get("child"), "pkg/calc.py") == b"def add(a, b):\n    return a + b\n"


def test_retention_is_off_unless_an_age_is_set(tmp_path: Path) -> None:
    assert not RetentionSettings().policy().enabled
    on = RetentionSettings(retention_failed_s=0)
    assert on.policy().enabled and on.policy().failed_s == 0
