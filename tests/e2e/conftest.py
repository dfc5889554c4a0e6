"""The `tickwork` command through its real entry point, `python -m tickwork`, on both
deployments (the `deployment` fixture of tests/tasks: SQLite + filesystem broker, and
Postgres + Redis, each with queues of its own)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tests.tasks.conftest import ROOT, TEST_KIND, Deployment, deployment, stop
from tickwork.cli import main
from tickwork.testing import until

__all__ = [
    "ROOT",
    "TEST_KIND",
    "Cli",
    "Deployment",
    "Result",
    "at_once",
    "call",
    "deployment",
    "stop",
    "until",
]

#: subprocesses at once: enough to overlap start-up on two cores without starving a worker
PARALLEL = 3


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.code == 0, self
        return json.loads(self.stdout)

    def error(self, code: int, *fragments: str) -> str:
        """The one `error:` line, checked for its exit code and what it must name."""
        assert self.code == code, self
        lines = self.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), self
        assert "Traceback" not in self.stderr
        for fragment in fragments:
            assert fragment in lines[0], (fragment, lines[0])
        return lines[0]


class Cli:
    """Runs `python -m tickwork ...` in /work/main with a deployment's environment.

    Starting Python is most of a command's time, so variations of a command already run
    as a process (other filters, error cases) run `tickwork.cli.main` in this process.
    """

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs

    def __call__(self, *args: str, ok: bool = True, **env: str) -> Result:
        done = subprocess.run(
            [sys.executable, "-m", "tickwork", *args],
            cwd=ROOT,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        return self._checked(Result(tuple(args), done.returncode, done.stdout, done.stderr), ok)

    def inline(self, *args: str, ok: bool = True, **env: str) -> Result:
        """The same command through `main` in this process."""
        out, err = io.StringIO(), io.StringIO()
        code = 0
        with (
            mock.patch.dict(os.environ, {**self.env, **env}, clear=True),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        return self._checked(Result(tuple(args), code, out.getvalue(), err.getvalue()), ok)

    @staticmethod
    def _checked(result: Result, ok: bool) -> Result:
        if ok:
            assert result.code == 0 and not result.stderr, result
        return result

    def many(self, *argvs: Sequence[str]) -> list[Result]:
        """Several commands at once, their results in order; nothing is asserted."""
        return at_once(*(functools.partial(self, *argv, ok=False) for argv in argvs))

    @contextlib.contextmanager
    def meanwhile(self, *argvs: Sequence[str]) -> Iterator[Callable[[], list[Result]]]:
        """Run commands as processes while the block runs; call what it gives to collect."""
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(self.many, *argvs)
            yield future.result

    def start(self, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        """A long-running command (a worker) in its own process group, and its log."""
        log = self.logs / f"tickwork-{args[0]}-{uuid.uuid4().hex[:6]}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tickwork", *args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return proc, log


def at_once(*runs: Callable[[], Result]) -> list[Result]:
    """Run commands side by side (their start-up is most of their time); results in order."""
    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(lambda run: run(), runs))


@pytest.fixture
def cli(deployment: Deployment) -> Cli:
    return Cli(deployment.env(), deployment.tmp)


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}
