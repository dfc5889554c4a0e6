"""Real ticks in this process, on SQLite and on Postgres, for the bad-input and security tests.

`Env.run` calls `tickwork.worker.tick.advance.advance` (the body of the Celery tick task) for the
session's current version until it rests, so each test sees exactly what a worker would
do, without waiting on a broker. Ticks published on the way are recorded, not sent.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from tickwork.fsm.values import Head, Session
from tickwork.store import make_engine, open_store
from tickwork.store.migrate import upgrade
from tickwork.store.schema import metadata
from tickwork.worker.config.settings import Settings
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.advance import Outcome, advance
from tickwork.worker.tick.runtime import Runtime

from tests.security.jobs import RELEASE, SPEC
from tickwork.client import Tickwork


class Env:
    """A store, a client and a runtime on one database; the model is scripted per session."""

    def __init__(self, url: str, tmp: Path, **settings: Any) -> None:
        self.tmp = tmp
        queue = f"tickwork.security.{uuid.uuid4().hex[:8]}"
        self.settings = Settings(
            database_url=url,
            state_dir=tmp / "state",
            queue=queue,
            dead_letter_queue=f"{queue}.dead",
            **settings,
        )
        self.store = open_store(make_engine(url))
        self.client = Tickwork(self.settings, store=self.store)
        self.published: list[tuple[str, int, float]] = []
        self.rt = Runtime(
            settings=self.settings,
            store=self.store,
            jobs=Jobs(),
            publish_tick=lambda s, v, c: self.published.append((s, v, c)),
        )

    @property
    def postgres(self) -> bool:
        return self.store.engine.dialect.name == "postgresql"

    def script(self, replies: list[dict[str, Any]]) -> str:
        path = self.tmp / f"script-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps(replies))
        return f"scripted:{path}"

    def sink(self, session_id: str) -> Path:
        return self.tmp / "sinks" / session_id

    def submit(
        self,
        replies: list[dict[str, Any]] | None = None,
        *,
        kind: str = SPEC,
        data: dict[str, Any] | None = None,
        model: str | None = None,
        session_id: str | None = None,
        **kw: Any,
    ) -> str:
        """A new session; unless `data` is given, its tools write to a sink of its own."""
        session_id = session_id or uuid.uuid4().hex
        if data is None:
            self.sink(session_id).mkdir(parents=True, exist_ok=True)
            data = {"sink": str(self.sink(session_id))}
        spec = model or self.script(replies or [{"content": "done"}])
        if spec.startswith("openai:"):
            kw.setdefault("price", (0, 0))  # the loopback model servers are free
        return self.client.submit(kind, data, model=spec, session_id=session_id, **kw).id

    def tick(self, session_id: str) -> Outcome:
        return advance(self.rt, session_id, self.store.get(session_id).version).outcome

    def run(self, session_id: str, *, max_ticks: int = 200) -> Head:
        """Tick until the session is suspended or finished."""
        for _ in range(max_ticks):
            head = self.store.get(session_id)
            if not head.status.runnable:
                return head
            advance(self.rt, session_id, head.version)
        raise AssertionError(f"session {session_id} still runnable after {max_ticks} ticks")

    def load(self, session_id: str) -> Session:
        return self.store.load(session_id)

    def effects(self, session_id: str) -> list[str]:
        path = self.sink(session_id) / "effect.log"
        return path.read_text().splitlines() if path.exists() else []

    def close(self) -> None:
        self.client.close()


def observations(session: Session) -> dict[str, tuple[str, bool]]:
    """call id -> (observation text, is_error)."""
    return {o.call_id: (o.content, o.is_error) for o in session.observations}


@pytest.fixture(autouse=True)
def _release_hanging_tools() -> Iterator[None]:
    RELEASE.clear()
    yield
    RELEASE.set()


def truncate(url: str) -> None:
    """Empty every tickwork table of the test run's Postgres database."""
    engine = make_engine(url)
    with engine.begin() as conn:
        names = ", ".join(t.name for t in metadata.sorted_tables)
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()


def _env(kind: str, factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Env:
    tmp = factory.mktemp(f"security-{kind}")
    if kind == "sqlite":
        url = f"sqlite:///{tmp / 'tickwork.db'}"
        upgrade(url)
    else:
        url = str(request.getfixturevalue("postgres_url"))
        truncate(url)
    return Env(url, tmp)


# one database per module and backend: each test makes sessions of its own, so they share it


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """On SQLite and on Postgres."""
    e = _env(request.param, tmp_path_factory, request)
    yield e
    e.close()


@pytest.fixture(scope="module")
def sqlite_env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    e = _env("sqlite", tmp_path_factory, request)
    yield e
    e.close()


@pytest.fixture(scope="module")
def postgres_env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    e = _env("postgres", tmp_path_factory, request)
    yield e
    e.close()


class RawModel:
    """A chat-completions server that answers request N (N assistant messages in the
    transcript) with `answers[N]`: a dict sent as JSON, or bytes sent as they are. It keeps
    every request body."""

    def __init__(self, answers: list[dict[str, Any] | bytes]) -> None:
        self.answers = answers
        self.requests: list[dict[str, Any]] = []
        self.url = ""

    def answer(self, body: dict[str, Any]) -> bytes:
        self.requests.append(body)
        index = sum(1 for m in body["messages"] if m["role"] == "assistant")
        answer = self.answers[min(index, len(self.answers) - 1)]
        return answer if isinstance(answer, bytes) else json.dumps(answer).encode()


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "model": "raw",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


def tool_call(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id
    return call


@contextmanager
def raw_model(model: RawModel, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Serve `model` on loopback; yields the model spec that reaches it."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = model.answer(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    model.url = f"http://127.0.0.1:{port}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", model.url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    try:
        yield f"openai:raw-{port}"  # a spec of its own: runtimes cache models by spec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
