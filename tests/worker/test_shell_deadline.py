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
