"""Running a shell command in the workspace with a timeout that really stops it.

The command gets its own process group, so on timeout the whole group is killed:
`subprocess.run(..., shell=True, timeout=...)` kills only the shell, and a grandchild that
keeps the output pipes open would make it wait forever. The environment is a small
allow-list from the worker's, so the worker's secrets (database URL, API keys) do not
leak into commands the model chose.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: variables passed through from the worker's environment; everything else is dropped
PASSED_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "VIRTUAL_ENV",
)


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float

    def describe(self) -> str:
        """Exit code, stdout and stderr as one text for the model."""
        status = "killed" if self.exit_code is None else str(self.exit_code)
        parts = [f"exit code: {status}"]
        if self.stdout:
            parts.append(f"--- stdout ---\n{self.stdout.rstrip()}")
        if self.stderr:
            parts.append(f"--- stderr ---\n{self.stderr.rstrip()}")
        if not (self.stdout or self.stderr):
            parts.append("(no output)")
        return "\n".join(parts)


def command_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def run_shell(
    command: str, *, cwd: Path, timeout_s: float, env: Mapping[str, str] | None = None
) -> ShellResult:
    """Run `command` with `/bin/sh` in `cwd`; on timeout kill its process group."""
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        shell=True,
        cwd=cwd,
        env=dict(env) if env is not None else command_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = process.communicate(timeout=max(timeout_s, 0.001))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(process)
        try:
            out, err = process.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a process that left the group holds the pipes
            process.kill()
            out, err = b"", b""
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
            process.wait()
    except BaseException:
        _kill_group(process)
        process.wait()
        raise
    return ShellResult(
        exit_code=None if timed_out else process.returncode,
        stdout=out.decode("utf-8", errors="replace"),
        stderr=err.decode("utf-8", errors="replace"),
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
    )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
