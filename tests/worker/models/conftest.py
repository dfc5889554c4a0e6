"""A real chat-completions server on loopback, answering what each test queues."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port


@dataclass
class Canned:
    """One response: `body` is sent as JSON unless it is bytes; `length` overrides
    Content-Length (to cut a body short); `delay_s` waits before answering; `together`
    holds the answer until as many requests as the barrier's parties have come (each
    response that shares it waits for the others' requests: the calls are in flight at
    once however late a loaded machine starts one)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    length: int | None = None
    together: threading.Barrier | None = None


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    #: the client's port: one per connection
    peer: int = 0


#: the tool-call ids Mistral's models take (also behind vLLM): 9 letters and digits
MISTRAL_CALL_ID = re.compile(r"^[a-zA-Z0-9]{9}$")


class ChatServer:
    """With `call_ids`, a request that names a tool call by an id not matching it is refused
    with 400, as Mistral's servers refuse it."""

    def __init__(
        self, *, keep_alive: bool = False, call_ids: re.Pattern[str] | None = None
    ) -> None:
        #: HTTP/1.1 keeps a connection open between requests; 1.0 closes it after each
        self.keep_alive = keep_alive
        self.call_ids = call_ids
        self.requests: list[Received] = []
        self._queue: list[Canned] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _handler(self))
        host, port = self._httpd.server_address[:2]
        self.base_url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def respond(self, status: int = 200, body: Any = None, **canned: Any) -> None:
        """Queue one response; see `Canned` for the other keywords."""
        with self._lock:
            self._queue.append(Canned(status=status, body=body, **canned))

    def answer(
        self,
        content: str | None = "",
        calls: Sequence[tuple[str, Any]] = (),
        usage: tuple[int, int] | None = (11, 7),
        model: str = "gpt-4o-2024-08-06",
        ids: Sequence[str] = (),
        **canned: Any,
    ) -> None:
        """Queue a 200 chat completion with `content` and `(name, arguments)` tool calls,
        whose ids are `ids` (default `call_0`, `call_1`, ...)."""
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {
                    "id": ids[i] if ids else f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for i, (name, arguments) in enumerate(calls)
            ]
        body: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            ],
        }
        if usage is not None:
            body["usage"] = {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": sum(usage),
            }
        self.respond(200, body, **canned)

    def refusal(self, body: Any) -> Canned | None:
        """The 400 a server checking call ids answers to `body`, or None if it passes."""
        if self.call_ids is None or not isinstance(body, dict):
            return None
        for message in body.get("messages") or ():
            named = [c.get("id") for c in message.get("tool_calls") or ()]
            if message.get("role") == "tool":
                named.append(message.get("tool_call_id"))
            for call_id in named:
                if not isinstance(call_id, str) or not self.call_ids.match(call_id):
                    text = (
                        f"Tool call id was {call_id} but must be a-z, A-Z, 0-9, with a length of 9."
                    )
                    return Canned(status=400, body={"error": {"message": text, "code": 400}})
        return None

    def _next(self) -> Canned:
        with self._lock:
            return (
                self._queue.pop(0)
                if self._queue
                else Canned(status=500, body={"error": {"message": "the test queued no response"}})
            )

    def close(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected here


def _handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def setup(self) -> None:
            self.protocol_version = "HTTP/1.1" if server.keep_alive else "HTTP/1.0"
            super().setup()

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
            server.requests.append(
                Received(self.path, dict(self.headers.items()), body, self.client_address[1])
            )
            canned = server.refusal(body) or server._next()
            if canned.delay_s and server.stopping.wait(canned.delay_s):
                return
            if canned.together is not None:
                # broken (a request that never came): answer, and let the test say so
                with contextlib.suppress(threading.BrokenBarrierError):
                    canned.together.wait(30)
            data = canned.body if isinstance(canned.body, bytes) else json.dumps(canned.body)
            data = data.encode() if isinstance(data, str) else data
            self.send_response(canned.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(canned.length or len(data)))
            for name, value in canned.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def keep_alive_chat_server() -> Iterator[ChatServer]:
    server = ChatServer(keep_alive=True)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def mistral_server() -> Iterator[ChatServer]:
    """A server that refuses call ids other than Mistral's 9 letters and digits."""
    server = ChatServer(call_ids=MISTRAL_CALL_ID)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def closed_port() -> int:
    """A loopback port with nothing listening on it."""
    return free_port()


@pytest.fixture
def write_script(tmp_path: Path) -> Any:
    """Write a scripted-model file and return its path."""

    def write(data: Any, name: str = "script.json") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
        return path

    return write
