"""A chat-completions server on loopback for the benchmarks' `openai:fake` model."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # 50 workers connect at once


class FakeChat:
    """A chat-completions server on loopback: `reply(index)` answers a transcript holding
    `index` assistant messages, after `delay(index, attempt)` seconds. It records when each
    request arrived."""

    def __init__(
        self,
        reply: Callable[[int], dict[str, Any]],
        delay: Callable[[int, int], float] = lambda index, attempt: 0.0,
    ) -> None:
        self.reply, self.delay = reply, delay
        self.arrivals: dict[int, list[float]] = defaultdict(list)
        self.lock = threading.Lock()
        self.url = ""

    def answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        index = sum(1 for m in body["messages"] if m["role"] == "assistant")
        with self.lock:
            self.arrivals[index].append(time.time())
            attempt = len(self.arrivals[index])
        reply = self.reply(index)
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content", "")}
        if reply.get("tool_calls"):
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                }
                for i, c in enumerate(reply["tool_calls"])
            ]
        payload = {
            "id": "x",
            "object": "chat.completion",
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        return payload, self.delay(index, attempt)

    @contextmanager
    def serve(self) -> Iterator[FakeChat]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                payload, delay = fake.answer(body)
                time.sleep(delay)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the worker that asked was killed

            def log_message(self, *_: Any) -> None:
                pass

        server = _Server(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)
