"""The API through a real server: uvicorn in a thread on a free port, httpx as the client,
a real Celery worker in-thread, on SQLite + filesystem broker and on Postgres + Redis.

One stack per deployment (the database, the worker, the API server and a webhook
receiver) for the whole package: its tests each work on sessions of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from tickwork.fsm.values import Status
from tickwork.store.migrate import upgrade
from tickwork.worker.config.settings import Settings

from tests.conftest import _truncate
from tests.tasks.conftest import TEST_KIND, Deployment
from tickwork.api import ApiSettings, make_api
from tickwork.client import Tickwork
from tickwork.testing import until

__all__ = ["DANGER", "TEST_KIND", "TOKENS", "Stack", "embedded_client", "until"]

TOKENS = {
    "alice-approver-token-0001": {"name": "alice", "roles": ["approver"]},
    "bob-approver-token-000001": {"name": "bob", "roles": ["approver"]},
    "sam-submitter-token-00001": {"name": "sam", "roles": ["submitter"]},
    "olga-operator-token-00001": {"name": "olga", "roles": ["operator"]},
    "nobody-no-roles-token-001": {"name": "nobody", "roles": []},
    "fuzz-every-role-token-001": {
        "name": "fuzz",
        "roles": ["submitter", "approver", "operator"],
    },
}
TOKEN = {spec["name"]: token for token, spec in TOKENS.items()}
WEBHOOK_SECRET = "hook-secret"
#: receivers such as Slack put their secret in the URL's path: logs must not show it
WEBHOOK_PATH = "/hook/T0001/B0002/path-secret-xyz"

#: a step with a call that needs approval, then a final answer
DANGER = [
    {
        "content": "delete it",
        "tool_calls": [
            {"name": "danger", "arguments": {"value": "prod-db"}},
            {"name": "echo", "arguments": {"text": "after"}},
        ],
    },
    {"content": "done"},
]


class Server:
    """uvicorn serving `app` from a thread on a free loopback port."""

    def __init__(self, app: Any) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        config = uvicorn.Config(
            app,
            log_level="warning",
            ws="none",
            lifespan="on",
            timeout_graceful_shutdown=1,
            # as `tickwork serve`: past the clients' pools' 5 s (a reused connection the
            # server closed as it was sent a request reset the submit of a test now and then)
            timeout_keep_alive=ApiSettings.model_fields["api_keepalive_s"].default,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="uvicorn", daemon=True
        )

    def __enter__(self) -> Server:
        self.thread.start()
        until(lambda: self.server.started, timeout=20, what="uvicorn to start")
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.socket.close()


class Receiver:
    """A webhook receiver: records cards; sessions named `flaky-*` fail twice first (HTTP
    500), `refuse-*` always fail (503)."""

    def __init__(self) -> None:
        self.cards: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.attempts: Counter[str] = Counter()
        #: the Idempotency-Key of every attempt, by session
        self.keys: dict[str, list[str]] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                card = json.loads(body)
                session_id = card["session"]["id"]
                with receiver.lock:
                    receiver.attempts[session_id] += 1
                    tries = receiver.attempts[session_id]
                    key = self.headers.get("Idempotency-Key", "")
                    receiver.keys.setdefault(session_id, []).append(key)
                ok = not (
                    session_id.startswith("refuse-")
                    or (session_id.startswith("flaky-") and tries <= 2)
                )
                if ok:
                    with receiver.lock:
                        receiver.cards.append(
                            (
                                {k.lower(): v for k, v in self.headers.items()},
                                card | {"_body": body.decode()},
                            )
                        )
                self.send_response(200 if ok else 500 if session_id.startswith("flaky-") else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{WEBHOOK_PATH}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def card(self, session_id: str) -> tuple[dict[str, str], dict[str, Any]] | None:
        with self.lock:
            return next(((h, c) for h, c in self.cards if c["session"]["id"] == session_id), None)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def embedded_client(tmp: Path) -> Tickwork:
    """A client of a new embedded store under `tmp`, on a queue of its own (no worker runs
    it): a test writes its sessions through `client.store` as it wants them."""
    settings = Settings(state_dir=tmp / "state", queue=f"tickwork.ticks.{uuid.uuid4().hex[:8]}")
    settings.state_dir.mkdir(parents=True)
    upgrade(settings.db_url)
    return Tickwork(settings)


@dataclass
class Stack:
    name: str
    deployment: Deployment
    url: str
    receiver: Receiver
    clients: dict[str, httpx.Client] = field(default_factory=dict)

    def http(self, who: str | None = None) -> httpx.Client:
        """An HTTP client holding `who`'s token (None: no token)."""
        key = who or ""
        if key not in self.clients:
            headers = {"Authorization": f"Bearer {TOKEN[who]}"} if who else {}
            self.clients[key] = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        return self.clients[key]

    def submit(self, replies: list[dict[str, Any]], *, prefix: str = "s", **kw: Any) -> str:
        """A session of the test kind submitted through the API as sam."""
        body = {
            "kind": TEST_KIND,
            "input": {"sink": str(self.deployment.sink)},
            "model": self.deployment.script(replies),
            "id": f"{prefix}-{uuid.uuid4().hex[:10]}",
            **kw,
        }
        answer = self.http("sam").post("/api/v1/sessions", json=body)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    def wait(self, session_id: str, *statuses: Status, timeout: float = 60) -> dict[str, Any]:
        wanted = {s.value for s in statuses} or {
            "completed",
            "failed",
            "cancelled",
            "waiting_approval",
        }

        def reached() -> dict[str, Any] | None:
            head = self.deployment.client.get(session_id)
            return head.model_dump(mode="json") if head.status.value in wanted else None

        return until(reached, timeout=timeout, what=f"{session_id} to reach {wanted}")

    def waiting(self, replies: list[dict[str, Any]] = DANGER, prefix: str = "s") -> str:
        session_id = self.submit(replies, prefix=prefix)
        head = self.wait(session_id)
        assert head["status"] == "waiting_approval", head
        return session_id

    def fingerprint(self, session_id: str, call_id: str = "s1c0") -> str:
        call = self.deployment.client.load(session_id).call(call_id)
        assert call is not None
        return call.fingerprint

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def _settings(name: str, tmp: Path, request: pytest.FixtureRequest) -> Settings:
    queue = f"tickwork.ticks.{uuid.uuid4().hex[:8]}"
    common: dict[str, Any] = dict(
        state_dir=tmp / "state",
        queue=queue,
        dead_letter_queue=f"{queue}.dead",
        lease_s=3.0,
        relay_period_s=0.25,
        relay_after_s=1.5,
        # issue 15: a graph kind; issue 29: a kind that spawns child sessions
        imports=[TEST_KIND, "tests.graphs:REFUND", "tests.jobs:TREE"],
    )
    if name == "embedded":
        from tickwork.store.migrate import upgrade

        settings = Settings(**common)
        settings.state_dir.mkdir(parents=True)
        upgrade(settings.db_url)
        return settings
    url = str(request.getfixturevalue("postgres_url"))
    _truncate(url)
    return Settings(database_url=url, broker_url=str(request.getfixturevalue("redis")), **common)


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def running_stack(name: str, request: pytest.FixtureRequest, tmp: Path) -> Iterator[Stack]:
    settings = _settings(name, tmp, request)
    deployment = Deployment(name, settings, tmp)
    api = ApiSettings(
        api_tokens=TOKENS,  # type: ignore[arg-type]
        api_stream_poll_s=0.05,
        api_scripted_roots=[tmp],  # the deployment's scripts are written there
    )
    with contextlib.ExitStack() as stack:
        stack.callback(deployment.close)
        receiver = stack.enter_context(Receiver())
        server = stack.enter_context(Server(make_api(settings, api)))
        # the worker's webhook settings come from the environment, read at its first card
        stack.enter_context(
            _environment(
                TICKWORK_WEBHOOK_URL=receiver.url,
                TICKWORK_WEBHOOK_SECRET=WEBHOOK_SECRET,
                TICKWORK_WEBHOOK_BACKOFF_S="0.05",
                TICKWORK_WEBHOOK_ATTEMPTS="4",
                TICKWORK_PUBLIC_URL=server.url,
            )
        )
        stack.enter_context(deployment.worker(concurrency=3))
        api_stack = Stack(name, deployment, server.url, receiver)
        stack.callback(api_stack.close)
        yield api_stack


@pytest.fixture(scope="package", params=["embedded", "production"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A running deployment with the API in front; SQLite + files, and Postgres + Redis."""
    with running_stack(request.param, request, tmp_path_factory.mktemp(request.param)) as s:
        yield s
