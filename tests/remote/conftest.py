"""A real `tickwork serve` process in front of a deployment (SQLite + files, Postgres +
Redis), a real worker in this process, and the remote client pointed at the server.

The server is a process of its own so a test can stop and start it (`Served.restart`)
while a client is connected.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tickwork.fsm.values import Status

from tests.api.conftest import DANGER, TOKEN, TOKENS, _settings
from tests.api.test_cli_serve import SERVE_START_S
from tests.ports import free_port
from tests.tasks.conftest import ROOT, TEST_KIND, Deployment
from tickwork.remote import AsyncClient, Client
from tickwork.testing import until

__all__ = ["DANGER", "TEST_KIND", "TOKEN", "Remote", "Served", "until"]

#: the API's test tokens, and people the CLI's tests name with --as, each with every role
PEOPLE = ("carol", "dave", "erin", "frank")
SERVED_TOKENS = {
    **TOKENS,
    **{
        f"{name}-every-role-token-0001": {
            "name": name,
            "roles": ["submitter", "approver", "operator"],
        }
        for name in PEOPLE
    },
}
TOKEN = {**TOKEN, **{name: f"{name}-every-role-token-0001" for name in PEOPLE}}


class Served:
    """`tickwork serve` as a process on a fixed port: started, stopped, started again."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs = env, logs
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.logs / f"serve-{uuid.uuid4().hex[:6]}.log").open("wb")
        with log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tickwork", "serve", "--port", str(self.port)],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.log = Path(log.name)

        def healthy() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        until(healthy, timeout=SERVE_START_S, what="tickwork serve")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@dataclass
class Remote:
    """A deployment, its worker, and `tickwork serve` in front of it."""

    name: str
    deployment: Deployment
    served: Served

    @property
    def url(self) -> str:
        return self.served.url

    def env(self, who: str = "fuzz") -> dict[str, str]:
        """The CLI's environment for `who`'s token, pointed at the server."""
        return {**self.served.env, "TICKWORK_SERVER": self.url, "TICKWORK_TOKEN": TOKEN[who]}

    def client(self, who: str = "fuzz") -> Client:
        return Client(self.url, token=TOKEN[who])

    def aclient(self, who: str = "fuzz") -> AsyncClient:
        return AsyncClient(self.url, token=TOKEN[who])

    def script(self, replies: list[dict[str, Any]]) -> str:
        return self.deployment.script(replies, name=f"script-{uuid.uuid4().hex[:6]}")

    def input(self) -> dict[str, Any]:
        return {"sink": str(self.deployment.sink)}

    def wait(self, session_id: str, *statuses: Status, timeout: float = 60) -> Status:
        wanted = set(statuses) or {s for s in Status if s.terminal}

        def reached() -> Status | None:
            status = self.deployment.client.get(session_id).status
            return status if status in wanted else None

        return until(reached, timeout=timeout, what=f"{session_id} to reach {wanted}")


def serve_env(deployment: Deployment) -> dict[str, str]:
    env = {k: v for k, v in deployment.env().items() if not k.startswith("TICKWORK_API")}
    env.pop("TICKWORK_SERVER", None)
    env.pop("TICKWORK_TOKEN", None)
    env.update(
        TICKWORK_IMPORTS=json.dumps(list(deployment.settings.imports)),
        TICKWORK_API_TOKENS=json.dumps(SERVED_TOKENS),
        TICKWORK_API_SCRIPTED_ROOTS=json.dumps([str(deployment.tmp)]),
        TICKWORK_API_STREAM_POLL_S="0.05",
        TICKWORK_API_STREAM_HEARTBEAT_S="1",
        TICKWORK_WORKSPACE_ROOTS=json.dumps([str(deployment.tmp)]),
    )
    return env


@contextlib.contextmanager
def running(name: str, request: pytest.FixtureRequest, tmp: Path) -> Iterator[Remote]:
    settings = _settings(name, tmp, request)
    deployment = Deployment(name, settings, tmp)
    served = Served(serve_env(deployment), tmp)
    with contextlib.ExitStack() as stack:
        stack.callback(deployment.close)
        served.start()
        stack.callback(served.stop)
        stack.enter_context(deployment.worker(concurrency=2))
        yield Remote(name, deployment, served)


@pytest.fixture(scope="package", params=["embedded", "production"])
def remote(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Remote]:
    """A deployment with `tickwork serve` in front; SQLite + files, and Postgres + Redis."""
    with running(request.param, request, tmp_path_factory.mktemp(request.param)) as r:
        yield r
