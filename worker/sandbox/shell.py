"""Running a process with a timeout that really stops it and output capped while it is read.

The process gets its own process group, so on timeout the whole group is killed:
`subprocess.run(..., shell=True, timeout=...)` kills only the shell, and a grandchild that
keeps the output pipes open would make it wait forever. Output is read as it comes and kept
up to a byte budget; past it the process is killed, so a command printing gigabytes fills
neither the worker's memory nor its disk. The environment is a small allow-list from the
worker's, so the worker's secrets (database URL, API keys) do not leak into commands the
model chose. `runner.run_sandboxed` runs commands in the OS sandbox through `run_process`;
`run_shell` runs one on the host, for `TICKWORK_SANDBOX=none`.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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
#: the output kept of one command (stdout and stderr together) unless the caller says
MAX_OUTPUT_BYTES = 10 * 1024 * 1024
#: how often a running command checks whether it should stop
POLL_S = 0.2

#: says why a running command must stop now (a cancel, the deadline), or None to go on
Stop = Callable[[], "str | None"]


class Guard(Protocol):
    """Watches a started command from outside the worker (`tickwork.worker.tick.runtime.Leases`: the
    tick's lease, through `fence.WATCHDOG`) for as long as the `with` lasts."""

    def watch(self, pid: int) -> AbstractContextManager[None]: ...


#: the guard of the commands this context starts: set by the tick while it holds its lease
GUARD: ContextVar[Guard | None] = ContextVar("tickwork_guard", default=None)


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    #: why the command was killed before it ended ("" if it ended by itself or timed out)
    killed: str = ""
    #: what the sandbox refused the command (its egress proxy's refusals), each with why
    refused: tuple[str, ...] = ()
    #: why the command had no network at all (no egress proxy), said where its output
    #: shows it looked for some ("" if it had the proxy, or did not look)
    offline: str = ""

    def describe(self) -> str:
        """Exit code, stdout and stderr as one text for the model, without the terminal's
        escape codes (`pytest --color=yes`): they hid a summary's counts from the outcome
        checks, and are noise to the model and on the card."""
        status = "killed" if self.exit_code is None else str(self.exit_code)
        parts = [f"exit code: {status}"]
        if self.killed:
            parts.append(f"(killed: {self.killed})")
        stdout, stderr = _plain(self.stdout), _plain(self.stderr)
        if stdout:
            parts.append(f"--- stdout ---\n{stdout.rstrip()}")
        if stderr:
            parts.append(f"--- stderr ---\n{stderr.rstrip()}")
        if not (self.stdout or self.stderr):
            parts.append("(no output)")
        if self.refused:
            said = "\n".join(f"egress refused {r}" for r in self.refused)
            parts.append(f"--- refused by the sandbox ---\n{said}")
        if self.offline and _LOOKED_FOR_NETWORK.search(self.stdout + self.stderr):
            parts.append(f"--- no network in the sandbox ---\n{self.offline}")
        return "\n".join(parts)


#: what a command prints that found no network: a name it could not resolve (glibc's,
#: curl's, Windows-style getaddrinfo), a network it could not reach
_LOOKED_FOR_NETWORK = re.compile(
    r"Temporary failure in name resolution|Name or service not known|Could not resolve host"
    r"|getaddrinfo failed|Network is unreachable|No address associated with hostname"
)


#: a terminal's escape sequences: CSI (colours, `\x1b[31m`), OSC (titles, links) and the
#: two-character ones
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-Z\\^-~])")


def _plain(text: str) -> str:
    """`text` without a terminal's escape sequences."""
    return _ESCAPES.sub("", text) if "\x1b" in text else text


def command_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update({str(k): str(v) for k, v in (extra or {}).items()})
    return env


def run_shell(
    command: str,
    *,
    cwd: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
    stop: Stop | None = None,
) -> ShellResult:
    """Run `command` with `/bin/sh` in `cwd` on the host, unconfined; on timeout kill its group."""
    return run_process(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        env=dict(env) if env is not None else command_env(),
        timeout_s=timeout_s,
        max_output_bytes=max_output_bytes,
        stop=stop,
    )


def run_process(
    args: Sequence[str],
    *,
    timeout_s: float,
    max_output_bytes: int,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stop: Stop | None = None,
    pass_fds: Sequence[int] = (),
) -> ShellResult:
    """Run `args` in a new session; kill its process group on timeout, on too much output
    or when `stop` says so."""
    started = time.monotonic()
    process = subprocess.Popen(
        list(args),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    guard = GUARD.get()
    try:
        with guard.watch(process.pid) if guard is not None else nullcontext():
            out, err, why = _collect(
                process, started + max(timeout_s, 0.001), max_output_bytes, stop
            )
    except BaseException:
        _kill_group(process)
        process.wait()
        raise
    finally:
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    timed_out = why == "timeout"
    return ShellResult(
        exit_code=None if why else process.returncode,
        stdout=out.decode("utf-8", errors="replace"),
        stderr=err.decode("utf-8", errors="replace"),
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        killed="" if timed_out else why,
    )


def _collect(
    process: subprocess.Popen[bytes], deadline: float, budget: int, stop: Stop | None
) -> tuple[bytes, bytes, str]:
    """(stdout, stderr, why it was killed or "") once the process has ended or been killed."""
    kept = {"out": bytearray(), "err": bytearray()}
    total = 0
    why = ""

    def take(key: selectors.SelectorKey) -> str:
        """Read a ready pipe into what is kept; why to kill the process, or ""."""
        nonlocal total
        chunk = os.read(key.fd, 65536)
        if not chunk:
            selector.unregister(key.fileobj)
            return ""
        room = budget - total
        kept[key.data] += chunk[: max(room, 0)]
        total += len(chunk)
        return f"its output passed {budget} bytes" if total > budget else ""

    with selectors.DefaultSelector() as selector:
        for name, pipe in (("out", process.stdout), ("err", process.stderr)):
            if pipe is not None:
                selector.register(pipe, selectors.EVENT_READ, name)
        while not why:
            now = time.monotonic()
            if now >= deadline:
                # one that ended before this look (the worker was stopped or starved, and the
                # watchdog or the OOM killer ended it) is reported as it ended, not timed out;
                # one whose shell ended while what it started holds its output (`sleep 600 &`)
                # timed out, and is killed with its group
                why = "timeout" if process.poll() is None else _read_to_end(selector, take)
                break
            why = (stop() or "") if stop else ""
            if why:
                break
            if not selector.get_map():
                # both pipes closed; the process may still run (e.g. `exec >&-; sleep 600`)
                try:
                    process.wait(min(POLL_S, deadline - now))
                    break
                except subprocess.TimeoutExpired:
                    continue
            for key, _ in selector.select(min(POLL_S, deadline - now)):
                if why := take(key):
                    break
    if why:
        _kill_group(process)
    process.wait()
    return bytes(kept["out"]), bytes(kept["err"]), why


def _read_to_end(
    selector: selectors.BaseSelector, take: Callable[[selectors.SelectorKey], str]
) -> str:
    """The rest of an ended process's output, without waiting: "" once its pipes are read
    to their end, "timeout" if something it started holds one open, or `take`'s why."""
    while selector.get_map():
        ready = selector.select(0)
        if not ready:
            return "timeout"
        for key, _ in ready:
            if why := take(key):
                return why
    return ""


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
