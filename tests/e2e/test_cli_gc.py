"""`tickwork gc` archives and prunes finished sessions; `show` and `fork` read them back; a
gc killed between the archive write and the delete loses nothing and archives nothing twice."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from tickwork.fsm.errors import SessionNotFound
from tickwork.store.archived import entry

from tests.e2e.conftest import ROOT, Cli, Deployment, call, stop, until


def retain(deployment: Deployment) -> dict[str, str]:
    """Every completed session may go at once, to an archive every process of the test
    reaches (a shared database needs a shared archive)."""
    return {
        "TICKWORK_RETENTION_COMPLETED_S": "0",
        "TICKWORK_RETENTION_ARCHIVE_URL": (deployment.settings.state_dir / "archive").as_uri(),
    }


def finished(deployment: Deployment, count: int) -> list[str]:
    ids = [
        deployment.submit(
            [{"content": "look", "tool_calls": [call("echo", text=str(n))]}, {"content": "done"}]
        )
        for n in range(count)
    ]
    with deployment.worker():
        for sid in ids:
            assert deployment.client.wait(sid, timeout=60).status.value == "completed"
    return ids


def archive_files(deployment: Deployment) -> dict[Path, list[str]]:
    """Each JSON Lines object in the archive, and the sessions it holds."""
    root = deployment.settings.state_dir / "archive"
    return {
        path.relative_to(root): [
            json.loads(line)["session_id"]
            for line in gzip.decompress(path.read_bytes()).splitlines()
        ]
        for path in sorted(root.rglob("*.jsonl.gz"))
    }


def live(deployment: Deployment, sid: str) -> bool:
    try:
        deployment.client.store.get(sid)
        return True
    except SessionNotFound:
        return False


def test_gc_archives_and_show_and_fork_read_it_back(deployment: Deployment, cli: Cli) -> None:
    ids = finished(deployment, 2)

    dry = cli.inline("gc", "--dry-run", "--json", **retain(deployment)).json()
    assert dry["due"] == {"completed": 2, "pending": 0}
    assert all(live(deployment, sid) for sid in ids)
    off = cli.inline("gc", "--dry-run")
    assert "retention is off" in off.stdout

    with mock.patch.dict(sys.modules, {"pyarrow": None, "pyarrow.parquet": None}):
        first = cli.inline(
            "gc", "--batches", "1", **retain(deployment), TICKWORK_RETENTION_BATCH="1"
        )
    assert "archived 1 session in 1 batch to" in first.stdout  # not "1 sessions in 1 batches"
    assert "Parquet skipped: pyarrow is not installed" in first.stdout
    assert not list((deployment.settings.state_dir / "archive").rglob("*.parquet"))

    done = cli("gc", "--json", **retain(deployment)).json()

    assert (done["archived"], done["batches"], done["parquet"]) == (1, 1, True)
    assert done["rows_after"]["tickwork_sessions"] == 0
    assert done["rows_after"]["archived_archived"] == 2
    assert not any(live(deployment, sid) for sid in ids)
    assert sorted(itertools.chain(*archive_files(deployment).values())) == sorted(ids)
    assert list((deployment.settings.state_dir / "archive").rglob("*.parquet"))

    shown = cli.inline("show", ids[0], "--json").json()
    assert shown["head"]["status"] == "completed" and shown["archived"]["location"]
    assert [c["name"] for s in shown["steps"] for c in s["calls"]] == ["echo"]
    text = cli.inline("show", ids[0]).stdout
    assert "archived" in text and "echo" in text

    fork = cli.inline("fork", ids[0], "--from-step", "1", "--id", "after-archive", "--json").json()
    assert (fork["parent_id"], fork["fork_step"]) == (ids[0], 1)
    assert [f["id"] for f in cli.inline("show", ids[0], "--json").json()["forks"]] == [
        "after-archive"
    ]
    reused = cli.inline("fork", ids[0], "--from-step", "1", "--id", ids[1], ok=False)
    reused.error(1, ids[1], "archived")  # taken, as a live session's id (exit 1)
    assert cli.inline("show", "no-such", ok=False).code != 0


def test_gc_killed_between_the_archive_write_and_the_delete(
    deployment: Deployment, cli: Cli
) -> None:
    ids = finished(deployment, 3)
    env = {**cli.env, **retain(deployment), "TICKWORK_RETENTION_BATCH": "2"}
    gc = subprocess.Popen(
        [sys.executable, "-m", "tickwork", "gc"],
        cwd=ROOT,
        env={**env, "TICKWORK_TEST_GC_PAUSE_AFTER_WRITE_S": "60"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert gc.stderr is not None
        line = gc.stderr.readline().decode()
        assert line.startswith("archive written: day="), line
    finally:
        os.killpg(gc.pid, signal.SIGKILL)
        gc.wait(10)
        if gc.stderr is not None:
            gc.stderr.close()
    written = archive_files(deployment)
    assert len(written) == 1 and len(next(iter(written.values()))) == 2
    assert all(live(deployment, sid) for sid in ids)  # nothing deleted before the delete
    assert all(entry(deployment.client.store.engine, sid) is None for sid in ids)

    report = cli("gc", "--json", **retain(deployment), TICKWORK_RETENTION_BATCH="2").json()

    assert (report["archived"], report["resumed"]) == (3, 1)
    after = archive_files(deployment)
    assert written.keys() <= after.keys() and len(after) == 2
    in_archive = list(itertools.chain(*after.values()))
    assert sorted(in_archive) == sorted(ids)  # each once: nothing lost, nothing twice
    for sid in ids:
        assert not live(deployment, sid)
        found = entry(deployment.client.store.engine, sid)
        assert found is not None and found.state == "archived"
        assert sid in after[Path(found.location + ".jsonl.gz")]


def test_workers_archive_in_the_background(deployment: Deployment) -> None:
    worker = deployment.spawn(
        env={
            **retain(deployment),
            "TICKWORK_RETENTION_PERIOD_S": "0.2",
            "TICKWORK_RETENTION_BATCH": "1",
        }
    )
    try:
        sid = deployment.submit([{"content": "done"}])
        engine = deployment.client.store.engine
        found = until(lambda: entry(engine, sid), timeout=60, what="the worker to archive it")
    finally:
        stop(worker)
    assert found.state == "archived" and not live(deployment, sid)
    assert deployment.client.archived(sid) is not None


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_a_dry_run_refuses_a_host_s_own_archive_as_gc_does(cli: Cli) -> None:
    # it showed what was due and `archive: file:///<state dir>/archive`, which gc refuses
    for argv in (("gc",), ("gc", "--dry-run")):
        cli.inline(*argv, ok=False, TICKWORK_RETENTION_COMPLETED_S="0").error(
            2, "while the database is shared", "TICKWORK_RETENTION_ARCHIVE_URL"
        )


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_a_dry_run_with_retention_off_says_the_archive_it_shows_would_be_refused(
    cli: Cli,
) -> None:
    # it showed `archive: file:///<state dir>/archive` and "retention is off: set ...";
    # set, gc then refused that archive on the shared database
    said = " ".join(cli.inline("gc", "--dry-run").stdout.split())  # as one line, unwrapped
    assert "retention is off" in said
    assert "but first: retention would archive to this host's own folder" in said
    assert "TICKWORK_RETENTION_ARCHIVE_URL" in said
    shared = cli.inline("gc", "--dry-run", TICKWORK_RETENTION_ARCHIVE_URL="file:///tmp/x").stdout
    assert "retention is off" in shared and "but first" not in shared
