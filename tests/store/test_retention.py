"""tickwork.store.retention: finished sessions archived whole and pruned; running, waiting and open
dead-lettered sessions never touched (SQLite and Postgres)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select
from tickwork.fsm import machine, snapshots
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import ErrorCode, Session, Status
from tickwork.store import Store
from tickwork.store.archive import JSONL, PARQUET, DirectoryArchive
from tickwork.store.archived import ARCHIVED, archived_forks, entry, load_archived, saved_of
from tickwork.store.artifacts import DatabaseArtifacts
from tickwork.store.dead_letters import Closing, close
from tickwork.store.files import FileChange
from tickwork.store.retention import LIVE_TABLES, Batch, Policy, archive_pass, eligible
from tickwork.store.schema import archived, sessions
from tickwork.store.sweep import needed_by_live

from tests.conftest import Clock
from tests.store.conftest import (
    claim,
    execute,
    execute_change,
    new_session,
    reply,
    run_step,
    think,
    together,
)
from tickwork.testing.store_contract.trees import finish, spawn, take_join

#: every finished session may go one minute after it finished
MINUTE = Policy(completed_s=60, cancelled_s=60, failed_s=60)


@pytest.fixture
def archive(tmp_path: Path) -> DirectoryArchive:
    return DirectoryArchive(tmp_path / "archive")


def completed(store: Store, clock: Clock, session_id: str, steps: int = 2) -> None:
    store.create(new_session(session_id, now=clock()), now=clock())
    for number in range(1, steps + 1):
        run_step(store, session_id, number, now=clock())
    head = think(store, session_id, reply(content="done"), now=clock())
    assert head.status is Status.COMPLETED


def failed(store: Store, clock: Clock, session_id: str) -> None:
    store.create(new_session(session_id, now=clock()), now=clock())
    run_step(store, session_id, 1, now=clock())
    claimed = claim(store, session_id, now=clock())
    change = machine.fail(claimed.head, ErrorCode.LOOP, "looped on read_file", now=clock())
    store.save(change, version=claimed.head.version, owner="worker-1", now=clock())


def waiting(store: Store, clock: Clock, session_id: str) -> None:
    store.create(new_session(session_id, now=clock()), now=clock())
    head = think(store, session_id, reply(("danger", {"x": 1})), now=clock())
    assert head.status is Status.WAITING_APPROVAL


def live_rows(store: Store, session_id: str) -> int:
    with store.engine.connect() as conn:
        return (
            sum(
                conn.execute(
                    select(func.count()).select_from(t).where(t.c.session_id == session_id)
                ).scalar_one()
                for t in LIVE_TABLES
            )
            + conn.execute(
                select(func.count()).select_from(sessions).where(sessions.c.id == session_id)
            ).scalar_one()
        )


def run(store: Store, archive: DirectoryArchive, clock: Clock, policy: Policy = MINUTE, **kw):  # type: ignore[no-untyped-def]
    return archive_pass(store.engine, store.load, archive, policy, now=clock(), **kw)


def test_a_finished_session_is_archived_whole_and_read_back(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    completed(store, clock, "done-1")
    before = store.load("done-1")
    assert live_rows(store, "done-1") > 5
    clock.advance(61)

    report = run(store, archive, clock)

    assert (report.archived, report.batches, report.parquet) == (1, 1, True)
    assert live_rows(store, "done-1") == 0
    found = entry(store.engine, "done-1")
    assert found is not None and found.state == ARCHIVED and found.status == "completed"
    assert found.location.startswith("day=2026-01-01/")
    back = load_archived(store.engine, archive, "done-1")
    assert back is not None
    assert snapshots.dump(back.session) == snapshots.dump(before)
    assert back.record["lineage"] == {"parent_id": None, "fork_step": None, "forks": []}
    lines = gzip.decompress((archive.root / (found.location + JSONL)).read_bytes()).splitlines()
    assert [json.loads(line)["session_id"] for line in lines] == ["done-1"]

    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO((archive.root / (found.location + PARQUET)).read_bytes()))
    assert table.num_rows == 1
    row = table.to_pylist()[0]
    assert (row["session_id"], row["status"], row["steps"]) == ("done-1", "completed", 3)
    assert json.loads(row["record"])["snapshot"] == snapshots.dump(before)


def test_an_archived_replys_prompt_estimate_is_read_back_and_forked(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    store.create(new_session("done-1", now=clock()), now=clock())
    think(store, "done-1", reply(("read_file", {"path": "a"})), now=clock(), prompt_estimate=950)
    execute(store, "done-1", now=clock())
    think(store, "done-1", reply(content="done"), now=clock(), prompt_estimate=1_020)
    clock.advance(61)
    assert run(store, archive, clock).archived == 1

    back = load_archived(store.engine, archive, "done-1")
    assert back is not None
    assert [s.prompt_estimate for s in back.session.steps] == [950, 1_020]
    store.fork(
        "done-1",
        new_id="child",
        from_step=1,
        patch=ForkPatch(),
        by="dave",
        now=clock(),
        archived=(back.session, saved_of(back.record)),
    )
    assert [s.prompt_estimate for s in store.load("child").steps] == [950]


def test_a_young_session_stays(store: Store, clock: Clock, archive: DirectoryArchive) -> None:
    completed(store, clock, "done-1")
    clock.advance(59)

    assert run(store, archive, clock).archived == 0
    assert store.get("done-1").status is Status.COMPLETED


def test_no_policy_archives_nothing(store: Store, clock: Clock, archive: DirectoryArchive) -> None:
    completed(store, clock, "done-1")
    clock.advance(10**6)

    assert run(store, archive, clock, Policy()).archived == 0


def test_retention_never_touches_a_running_session(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    store.create(new_session("ready-1", now=clock()), now=clock())
    store.create(new_session("exec-1", now=clock()), now=clock())
    think(
        store,
        "exec-1",
        reply(("read_file", {"path": "a"}), ("read_file", {"path": "b"})),
        now=clock(),
    )
    execute(store, "exec-1", now=clock())
    assert store.get("exec-1").status is Status.EXECUTING
    completed(store, clock, "done-1")
    before = {s: live_rows(store, s) for s in ("ready-1", "exec-1")}
    clock.advance(10**6)

    report = run(store, archive, clock, Policy(completed_s=0, cancelled_s=0, failed_s=0))

    assert report.archived == 1 and entry(store.engine, "done-1") is not None
    assert {s: live_rows(store, s) for s in ("ready-1", "exec-1")} == before
    assert entry(store.engine, "ready-1") is None and entry(store.engine, "exec-1") is None


def test_retention_never_touches_a_waiting_session(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    waiting(store, clock, "wait-1")
    completed(store, clock, "done-1")
    before = live_rows(store, "wait-1")
    clock.advance(10**6)

    report = run(store, archive, clock, Policy(completed_s=0, cancelled_s=0, failed_s=0))

    assert report.archived == 1
    assert live_rows(store, "wait-1") == before
    assert store.get("wait-1").status is Status.WAITING_APPROVAL
    assert entry(store.engine, "wait-1") is None


def test_retention_never_touches_an_unresolved_dead_letter(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    failed(store, clock, "dead-1")
    completed(store, clock, "done-1")
    before = live_rows(store, "dead-1")
    clock.advance(10**6)

    policy = Policy(completed_s=0, cancelled_s=0, failed_s=0)
    assert eligible(store.engine, policy, now=clock()) == {"completed": 1, "pending": 0}
    report = run(store, archive, clock, policy)

    assert report.archived == 1
    assert live_rows(store, "dead-1") == before
    assert entry(store.engine, "dead-1") is None


def test_a_closed_dead_letter_goes_its_age_after_it_was_closed(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    failed(store, clock, "dead-1")
    clock.advance(3600)
    close(store.engine, "dead-1", state=Closing.DISMISSED, by="olga", reason="a test", now=clock())
    clock.advance(59)
    assert run(store, archive, clock).archived == 0

    clock.advance(2)
    assert run(store, archive, clock).archived == 1

    back = load_archived(store.engine, archive, "dead-1")
    assert back is not None and back.session.head.status is Status.FAILED
    letter = back.record["dead_letter"]
    assert (letter["code"], letter["resolution"]["state"]) == ("LOOP", "dismissed")


def test_a_cancelled_session_is_archived(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    waiting(store, clock, "gone-1")
    store.request_cancel("gone-1", now=clock(), by="olga")
    clock.advance(61)

    assert run(store, archive, clock).archived == 1
    assert entry(store.engine, "gone-1") is not None


def test_lineage_stays_readable(store: Store, clock: Clock, archive: DirectoryArchive) -> None:
    completed(store, clock, "parent")
    store.fork("parent", new_id="child", from_step=1, patch=ForkPatch(), by="dave", now=clock())
    clock.advance(61)

    assert run(store, archive, clock).archived == 1  # the child runs on; the parent goes

    back = load_archived(store.engine, archive, "parent")
    assert back is not None
    assert [f["id"] for f in back.record["lineage"]["forks"]] == ["child"]
    assert store.get("child").parent_id == "parent"


def test_archived_forks_are_listed_for_their_parent(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    completed(store, clock, "parent")
    store.fork("parent", new_id="child", from_step=1, patch=ForkPatch(), by="dave", now=clock())
    for _ in range(3):
        head = store.get("child")
        if head.status is Status.COMPLETED:
            break
        think(store, "child", reply(content="done"), now=clock())
    assert store.get("child").status is Status.COMPLETED
    clock.advance(61)

    assert run(store, archive, clock).archived == 2

    assert [(f["id"], f["fork_step"]) for f in archived_forks(store.engine, "parent")] == [
        ("child", 1)
    ]


def test_an_archived_child_stays_a_child_not_a_fork(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    """The index keeps a child's spawning call and role: once archived, a child is not
    listed among its parent's forks, and a fork still is."""
    children = spawn(store, clock, "root", 2)
    for child in children:
        finish(store, clock, child)
    spawn_call = store.get(children[0]).spawn_call
    take_join(store, clock, "root")
    assert think(store, "root", reply(content="done"), now=clock()).status is Status.COMPLETED
    store.fork("root", new_id="root-fork", from_step=0, patch=ForkPatch(), by="dave", now=clock())
    assert think(store, "root-fork", reply(content="again"), now=clock()).status.terminal
    clock.advance(61)

    assert run(store, archive, clock).archived == 4

    assert [f["id"] for f in archived_forks(store.engine, "root")] == ["root-fork"]
    found = entry(store.engine, children[0])
    assert found is not None and found.parent_id == "root"
    assert (found.spawn_call, found.role) == (spawn_call, "explorer")
    fork = entry(store.engine, "root-fork")
    assert fork is not None and (fork.spawn_call, fork.role) == (None, "")


class Killed(BaseException):
    """Stands for a worker killed between the archive write and the delete."""


def test_a_pass_that_died_after_writing_is_finished_by_the_next(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    for n in range(3):
        completed(store, clock, f"done-{n}", steps=1)
    clock.advance(61)

    def die(batch: Batch) -> None:
        raise Killed

    with pytest.raises(Killed):
        run(store, archive, clock, after_write=die)
    written = sorted(p.relative_to(archive.root) for p in archive.root.rglob("*.jsonl.gz"))
    assert len(written) == 1
    assert all(store.get(f"done-{n}").status is Status.COMPLETED for n in range(3))
    # a pass soon after leaves the batch to the pass that holds it
    clock.advance(1)
    assert run(store, archive, clock).archived == 0

    clock.advance(300)
    report = run(store, archive, clock)

    assert (report.archived, report.resumed) == (3, 1)
    again = sorted(p.relative_to(archive.root) for p in archive.root.rglob("*.jsonl.gz"))
    assert again == written  # the same object, written again: nothing archived twice
    assert all(live_rows(store, f"done-{n}") == 0 for n in range(3))
    with store.engine.connect() as conn:
        states = conn.execute(select(archived.c.state)).scalars().all()
    assert sorted(states) == [ARCHIVED] * 3


def test_a_dead_letter_forked_while_written_is_written_again(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    failed(store, clock, "dead-1")
    close(store.engine, "dead-1", state=Closing.RESOLVED, by="olga", reason="fixed", now=clock())
    clock.advance(61)

    def fork_meanwhile(batch: Batch) -> None:
        store.fork(
            "dead-1",
            new_id="late-fork",
            from_step=1,
            patch=ForkPatch(),
            by="dave",
            now=clock(),
            resolve_dead_letter=True,
            again=True,
        )

    first = run(store, archive, clock, after_write=fork_meanwhile)
    assert (first.archived, first.retried) == (0, 1)
    assert store.get("dead-1").status is Status.FAILED

    second = run(store, archive, clock)
    assert (second.archived, second.resumed) == (1, 1)
    back = load_archived(store.engine, archive, "dead-1")
    assert back is not None
    assert [f["fork"] for f in back.record["dead_letter"]["resolution"]["forks"]] == ["late-fork"]


def test_passes_at_once_archive_each_session_once(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    for n in range(12):
        store.create(new_session(f"s{n:02d}", now=clock(), status=Status.COMPLETED), now=clock())
    clock.advance(61)
    policy = Policy(completed_s=60, batch=3)

    results = together(
        [lambda: archive_pass(store.engine, store.load, archive, policy, now=clock())] * 4
    )

    assert not [r for r in results if isinstance(r, BaseException)]
    assert sum(r.archived for r in results if not isinstance(r, BaseException)) == 12
    with store.engine.connect() as conn:
        rows = conn.execute(select(archived.c.session_id, archived.c.location)).all()
        left = conn.execute(select(func.count()).select_from(sessions)).scalar_one()
    assert left == 0 and len(rows) == 12
    in_files: list[str] = []
    for path in archive.root.rglob("*.jsonl.gz"):
        in_files += [
            json.loads(x)["session_id"] for x in gzip.decompress(path.read_bytes()).splitlines()
        ]
    assert sorted(in_files) == sorted(r.session_id for r in rows)


def test_the_blobs_live_sessions_need(store: Store, clock: Clock) -> None:
    live = DatabaseArtifacts(store.engine)
    source = {b"a": "100644", b"b": "100755"}
    blobs = {hashlib.sha256(k).hexdigest(): k for k in source}
    manifest = json.dumps(
        {f"f{i}": f"{m} {h}" for i, (h, m) in enumerate(zip(blobs, source.values(), strict=True))}
    ).encode()
    base = hashlib.sha256(manifest).hexdigest()
    live.put({**blobs, base: manifest})
    session = new_session("files-1", now=clock())
    head = session.head.model_copy(
        update={"config": {**session.head.config, "files": {"base": base}}}
    )
    store.create(Session(head=head), now=clock())
    new = hashlib.sha256(b"written").hexdigest()
    think(store, "files-1", reply(("read_file", {"path": "f0"})), now=clock())
    claimed = claim(store, "files-1", now=clock())
    change = execute_change(store, claimed, now=clock())
    files = FileChange(
        step=1, call_id="s1c0", changes={"f2": f"100644 {new}", "f0": None}, state="x"
    )
    store.save(change, version=claimed.head.version, owner="worker-1", now=clock(), files=files)

    assert needed_by_live(store.engine, live.get) == {*blobs, base, new}


class FailingOnce(DirectoryArchive):
    """An archive whose first write fails (a full disk, a refused upload)."""

    failed = False

    def write(self, name: str, data: bytes) -> None:
        if not self.failed:
            self.failed = True
            raise OSError("No space left on device")
        super().write(name, data)


def test_a_batch_that_fails_is_left_pending_and_the_pass_goes_on(
    store: Store, clock: Clock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    completed(store, clock, "done-a", steps=1)
    completed(store, clock, "done-b", steps=1)
    clock.advance(61)
    archive = FailingOnce(tmp_path / "archive")
    policy = Policy(completed_s=60, batch=1)

    first = archive_pass(store.engine, store.load, archive, policy, now=clock())

    assert (first.archived, first.retried) == (1, 1)
    assert "left pending for a later pass" in caplog.text
    left = [sid for sid in ("done-a", "done-b") if live_rows(store, sid)]
    assert len(left) == 1  # kept whole, pending, for the pass that takes it over
    clock.advance(301)
    second = archive_pass(store.engine, store.load, archive, policy, now=clock())
    assert (second.archived, second.resumed) == (1, 1)
    assert live_rows(store, left[0]) == 0


def test_a_long_pass_dates_each_batch_when_it_happens(
    store: Store, clock: Clock, archive: DirectoryArchive
) -> None:
    """A pass longer than the take-over age must not see its own batches as left behind:
    each claim and each end is dated by the clock, not by when the pass began."""
    for n in range(3):
        completed(store, clock, f"done-{n}", steps=1)
    clock.advance(61)
    started = clock()

    def slow() -> datetime:
        clock.advance(200)  # every look at the clock: 200 s later
        return clock()

    report = archive_pass(
        store.engine, store.load, archive, Policy(completed_s=60, batch=1), now=started, clock=slow
    )

    assert (report.archived, report.resumed, report.retried) == (3, 0, 0)
    with store.engine.connect() as conn:
        ends = conn.execute(select(archived.c.archived_at)).scalars().all()
    assert len(ends) == 3 and all(end > started for end in ends)
    assert len(set(ends)) == 3
