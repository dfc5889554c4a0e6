"""A command that ended before its collector looked past the deadline is no timeout.

A worker stopped (SIGSTOP, a frozen VM) while a command ran has its command killed by the
watchdog when the tick's lease runs out; woken, the collector found its deadline passed
and said "the command timed out after 60s and was killed", for a command that ran 10 s of a
60 s limit: the log misled whoever read it after the incident.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tickwork.worker.sandbox.shell import run_shell


def test_a_command_killed_from_outside_while_the_collector_slept_is_no_timeout(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pid"

    def stop() -> str:
        # as the watchdog does while the worker is stopped: the command's group is killed,
        # and the collector looks again only after its deadline
        if pid_file.exists() and pid_file.read_text().strip():
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            time.sleep(1.5)
        return ""

    result = run_shell(f"echo $$ > {pid_file}; sleep 30", cwd=tmp_path, timeout_s=1, stop=stop)

    assert not result.timed_out
    assert result.exit_code == -signal.SIGKILL


def test_a_command_still_running_at_its_deadline_times_out(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_shell("sleep 30", cwd=tmp_path, timeout_s=0.5)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 10


def test_a_command_whose_background_child_still_runs_at_its_deadline_times_out(
    tmp_path: Path,
) -> None:
    """Its shell ended, but what it left running holds its output: it is killed with its
    group and the command timed out, not left running behind an exit code 0."""
    result = run_shell("sleep 30 & echo $!", cwd=tmp_path, timeout_s=1)

    assert result.timed_out and result.exit_code is None
    left = int(result.stdout.split()[0])
    for _ in range(50):  # killed; its new parent reaps it
        try:
            os.kill(left, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the background sleep (pid {left}) still runs")
