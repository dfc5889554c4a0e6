"""A chat-completions server on loopback for tests that count real model calls."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeModel:
    """Answers reply N to a transcript holding N assistant messages, like the scripted model,
    and counts the requests per reply. `slow` delays the first request for a reply."""

    def __init__(
        self,
        replies: list[dict[str, Any]],
        *,
        slow: dict[int, float] | None = None,
        fail: dict[int, list[int]] | None = None,
    ) -> None:
        self.replies = replies
        self.slow = dict(slow or {})
        #: reply index -> HTTP statuses to answer with before succeeding
        self.fail = {k: list(v) for k, v in (fail or {}).items()}
        self.requests: Counter[int] = Counter()
        self.arrived: dict[int, threading.Event] = {
            i: threading.Event() for i in range(len(replies))
        }
        self.lock = threading.Lock()
        self.url = ""

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        index = sum(1 for m in body["messages"] if m["role"] == "assistant")
        with self.lock:
            self.requests[index] += 1
            delay = self.slow.pop(index, 0.0)
            failing = self.fail.get(index)
            status = failing.pop(0) if failing else 200
        self.arrived.setdefault(index, threading.Event()).set()
        if status != 200:
            return status, {"error": {"message": f"fake {status}"}}, delay
        reply = self.replies[min(index, len(self.replies) - 1)]
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content", "")}
        calls = reply.get("tool_calls") or []
        if calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {
                        "name": c["name"],
                        "arguments": c["arguments"]
                        if isinstance(c["arguments"], str)
                        else json.dumps(c["arguments"]),
                    },
                }
                for i, c in enumerate(calls)
            ]
        return (
            200,
            {
                "id": "x",
                "object": "chat.completion",
                "model": body.get("model", "fake"),
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            },
            delay,
        )


@contextmanager
def fake_model_server(model: FakeModel) -> Iterator[FakeModel]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, payload, delay = model.answer(body)
            time.sleep(delay)
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the worker that asked was killed

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    model.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield model
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
