"""Sessions cannot starve each other (issue 24): memory and processes limited for a command
as a whole, a session's disk quota and the filesystem's reserve enforced while commands run,
and a worker's own writes on a full filesystem retried, not failed as INTERNAL."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tickwork.fsm.errors import ToolError
from tickwork.fsm.values import Status
from tickwork.store import open_store
from tickwork.store.migrate import upgrade
from tickwork.worker.config.settings import Settings
from tickwork.worker.jobs import Jobs
from tickwork.worker.observers.report import Outcome
from tickwork.worker.sandbox import cgroups, quota
from tickwork.worker.sandbox.runner import Limits, Sandbox, check, describe, run_sandboxed
from tickwork.worker.sandbox.shell import ShellResult
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.runtime import Runtime, utc_now

from tests.services import IN_CI
from tickwork.client import Tickwork
from tickwork.testing import until

PYTHON = "python3"  # the sandbox's own (the worker's venv is not bound inside)
MB = 1 << 20

pytestmark = pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 40 MB filesystem of its own (a tmpfs), as the workspaces filesystem."""
    folder = tmp_path / "fs"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:  # not root, or no mount in this container: nothing to test on
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _writer(files: int, pause_s: float = 0.02) -> str:
    """A command writing `files` files of 1 MB, one after another."""
    return (
        f"i=0; while [ $i -lt {files} ]; do head -c {MB} /dev/zero > f$i; "
        f"i=$((i+1)); sleep {pause_s}; done; echo wrote all"
    )


def test_a_command_whose_processes_together_pass_the_memory_limit_is_killed(
    tmp_path: Path,
) -> None:
    where = cgroups.hierarchy()
    if isinstance(where, str):
        if IN_CI and os.geteuid() == 0:
            pytest.fail(f"a root worker in CI should make cgroups: {where}")
        pytest.skip(f"no cgroups for commands here: {where}")
    hog = f"{PYTHON} -c 'import time; b = bytearray(250 << 20); time.sleep(20)'"
    command = f"for i in 1 2 3 4 5 6; do {hog} & done; wait; echo all survived"
    # this process's groups only (`tickwork-<pid>-...`): other test processes run commands too
    ours = f"tickwork-{os.getpid()}-*"
    before = set(where.memory.glob(ours))
    result = run_sandboxed(
        command,
        workdir=tmp_path,
        timeout_s=60,
        sandbox=Sandbox(limits=Limits(memory_bytes=300 * MB)),
    )
    assert "memory limit of 314572800 bytes" in result.killed, result.describe()
    assert "all survived" not in result.stdout
    assert result.exit_code is None
    # its group is gone with it
    assert set(where.memory.glob(ours)) == before
    assert "per command as a whole" in describe(Sandbox())


def test_a_fork_bomb_in_one_session_does_not_stop_another_sessions_commands(
    tmp_path: Path,
) -> None:
    """All sessions' commands run as one user: a per-user process limit let one session's
    processes use up every other session's; a pids cgroup per command keeps them apart."""
    where = cgroups.hierarchy()
    if isinstance(where, str) or (where.version == 1 and where.pids is None):
        if IN_CI and os.geteuid() == 0:
            pytest.fail(f"a root worker in CI should make pids cgroups: {where}")
        pytest.skip(f"no pids cgroups for commands here: {where}")
    sandbox = Sandbox(limits=Limits(processes=64))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    done = threading.Event()
    results: list[ShellResult] = []
    bomb = (
        "(i=0; while [ $i -lt 100 ]; do sleep 60 & i=$((i+1)); done) 2> bomb.err; "
        "echo started > ready; exec sleep 60"
    )
    thread = threading.Thread(
        target=lambda: results.append(
            run_sandboxed(
                bomb,
                workdir=first,
                timeout_s=120,
                sandbox=sandbox,
                stop=lambda: "the test is over" if done.is_set() else None,
            )
        )
    )
    thread.start()
    try:
        until(lambda: (first / "ready").exists(), timeout=60, what="the first command's processes")
        other = run_sandboxed(
            "for i in 1 2 3 4; do true & done; wait; echo forked",
            workdir=second,
            timeout_s=60,
            sandbox=sandbox,
        )
        assert other.exit_code == 0 and "forked" in other.stdout, other.describe()
    finally:
        done.set()
        thread.join(60)
    # the first one was held to its own limit
    assert "fork" in (first / "bomb.err").read_text().lower()
    assert results[0].killed == "the test is over"


def test_the_groups_a_killed_worker_left_are_removed_by_the_next() -> None:
    where = cgroups.hierarchy()
    if isinstance(where, str):
        pytest.skip(f"no cgroups for commands here: {where}")
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = where.memory / f"{cgroups.PREFIX}{dead.pid}-0123456789ab"
    ours = where.memory / f"{cgroups.PREFIX}{os.getpid()}-0123456789ab"
    left.mkdir()
    ours.mkdir()
    try:
        cgroups._sweep(where)
        assert not left.exists()
        assert ours.exists()  # a live worker's group is its own to remove
    finally:
        for folder in (left, ours):
            if folder.exists():
                folder.rmdir()


def test_a_command_passing_the_sessions_disk_quota_is_killed_while_it_runs(
    small_fs: Path,
) -> None:
    copy = small_fs / "session"
    copy.mkdir()
    limits = Limits(disk_bytes=8 * MB, reserve_bytes=0)
    result = run_sandboxed(
        _writer(30, 0.1), workdir=copy, timeout_s=60, sandbox=Sandbox(limits=limits)
    )
    assert "over the session's quota of 8388608" in result.killed, result.describe()
    assert "wrote all" not in result.stdout
    assert quota.usage([copy], max_files=1000).bytes < 30 * MB
    # the file tools ask first: nothing is written past the quota
    with pytest.raises(ToolError, match="TICKWORK_SESSION_DISK_BYTES"):
        quota.check_write(copy, MB, disk_bytes=8 * MB, disk_files=1000, reserve=0)


def test_only_the_session_that_crossed_the_reserve_is_stopped(small_fs: Path) -> None:
    big, small = small_fs / "big", small_fs / "small"
    big.mkdir()
    small.mkdir()
    sandbox = Sandbox(limits=Limits(disk_bytes=1 << 30, reserve_bytes=12 * MB))
    filled = run_sandboxed(_writer(38), workdir=big, timeout_s=60, sandbox=sandbox)
    assert "below its reserve of 12582912" in filled.killed, filled.describe()
    assert quota.free_bytes(small_fs) < 12 * MB
    # another session on the same filesystem goes on: a command writing a little, a file
    # tool's write
    other = run_sandboxed(_writer(2), workdir=small, timeout_s=60, sandbox=sandbox)
    assert other.exit_code == 0 and not other.killed, other.describe()
    quota.check_write(small, 4096, disk_bytes=1 << 30, disk_files=1000, reserve=12 * MB)
    # while the one that filled it may not write more, even through a file tool
    with pytest.raises(ToolError, match="TICKWORK_DISK_RESERVE_BYTES"):
        quota.check_write(big, 4096, disk_bytes=1 << 30, disk_files=1000, reserve=12 * MB)


def test_a_full_workspaces_filesystem_retries_the_tick_of_another_session(
    small_fs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's own writes (making another session's working copy) on a filesystem a
    session filled: the tick is left to run again, never failed as INTERNAL."""
    url = f"sqlite:///{tmp_path / 'full.db'}"
    upgrade(url)
    settings = Settings(
        database_url=url, state_dir=tmp_path / "state", workspaces_dir=small_fs / "workspaces"
    )
    store = open_store(url)
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("x = 1\n" * 200_000)  # 1.2 MB to check out
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {
                    "content": "look",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "calc.py"}}],
                },
                {"content": "done"},
            ]
        )
    )
    client = Tickwork(settings, store=store)
    client.publish = lambda *_: None  # type: ignore[method-assign]
    session_id = client.submit(
        "tests.jobs:FILES",
        {"workspace": str(project), "test_command": "true", "setup": "none"},
        model=f"scripted:{script}",
    ).id
    later = [utc_now()]
    rt = Runtime(
        settings=settings,
        store=store,
        jobs=Jobs(),
        publish_tick=lambda *_: None,
        clock=lambda: later[0],
    )
    filler = small_fs / "filler"
    try:
        assert advance(rt, session_id, 0).outcome is Outcome.SAVED
        head = store.get(session_id)
        assert head.status is Status.EXECUTING
        # another session's command filled the filesystem
        with open(filler, "wb") as out:
            try:
                while True:
                    out.write(b"\0" * MB)
                    out.flush()
            except OSError:
                pass
        with caplog.at_level(logging.ERROR, logger="tickwork.tick"):
            report = advance(rt, session_id, head.version)
        assert report.outcome is Outcome.DROPPED
        assert store.get(session_id).status is Status.EXECUTING  # not failed, not dead-lettered
        assert "the workspaces filesystem" in caplog.text and "is full" in caplog.text
        # space again, the lease run out: the tick runs as if nothing happened
        filler.unlink()
        later[0] += timedelta(seconds=settings.lease_s + 1)  # within the deadline
        assert advance(rt, session_id, head.version).outcome is Outcome.SAVED
        assert store.get(session_id).status is Status.READY
    finally:
        rt.close()
        store.engine.dispose()
