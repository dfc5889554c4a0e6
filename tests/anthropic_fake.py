"""An Anthropic Messages API server on loopback, for tests of `anthropic:` models.

It plays replies as the scripted model does (reply N to a transcript holding N assistant
turns), refuses what the real API refuses (a missing key or version, turns that do not
alternate, a tool_use without its tool_result in the next user turn, more than four cache
breakpoints, a prompt over `window`), and keeps a prompt cache as the API does: each
`cache_control` breakpoint writes the prefix up to it, and a later request whose prefix up
to one of its breakpoints was written reads it (`cache_read_input_tokens`). Tokens are four
characters of the request's JSON.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY = "sk-ant-test-key-0123456789"


def tokens(value: Any) -> int:
    return len(json.dumps(value, sort_keys=True)) // 4


def _bare(value: Any) -> Any:
    """`value` without its cache_control marks: they do not change the cached prefix."""
    if isinstance(value, dict):
        return {k: _bare(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_bare(v) for v in value]
    return value


class FakeAnthropic:
    def __init__(
        self,
        replies: list[dict[str, Any]],
        *,
        window: int = 200_000,
        fail: list[tuple[int, dict[str, str]]] | None = None,
    ) -> None:
        self.replies = replies
        self.window = window
        #: (status, headers) to answer with, in order, before any reply
        self.fail = list(fail or [])
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        #: (prompt, completion, cache read, cache written) billed per answered request
        self.billed: list[tuple[int, int, int, int]] = []
        self.cached: set[str] = set()
        self.lock = threading.Lock()
        self.url = ""

    def answer(self, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, dict]:
        with self.lock:
            self.requests.append((headers, body))
            if self.fail:
                status, extra = self.fail.pop(0)
                kind = "overloaded_error" if status == 529 else "rate_limit_error"
                return status, _error(kind, f"fake {status}"), extra
            refused = self._refusal(headers, body)
            if refused is not None:
                return 400, _error("invalid_request_error", refused), {}
            prefixes = self._prefixes(body)
            total = tokens(_bare(self._whole(body)))
            if total > self.window:
                return (
                    400,
                    _error(
                        "invalid_request_error",
                        f"prompt is too long: {total} tokens > {self.window} maximum",
                    ),
                    {},
                )
            read = max((len(p) // 4 for p in prefixes if p in self.cached), default=0)
            longest = max((len(p) // 4 for p in prefixes), default=0)
            written = max(0, longest - read)
            self.cached.update(prefixes)
        index = sum(1 for m in body["messages"] if m["role"] == "assistant")
        reply = self.replies[min(index, len(self.replies) - 1)]
        content: list[dict[str, Any]] = []
        if reply.get("content"):
            content.append({"type": "text", "text": reply["content"]})
        for i, call in enumerate(reply.get("tool_calls") or ()):
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{index}_{i}",
                    "name": call["name"],
                    "input": call["arguments"],
                }
            )
        completion = tokens(content)
        cut = completion > body["max_tokens"]
        if cut:
            completion = body["max_tokens"]
            content = [{"type": "text", "text": "w" * completion}]
        stop = "max_tokens" if cut else ("tool_use" if reply.get("tool_calls") else "end_turn")
        plain = total - read - written
        with self.lock:
            self.billed.append((total, completion, read, written))
        return (
            200,
            {
                "id": f"msg_{index}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": stop,
                "usage": {
                    "input_tokens": plain,
                    "output_tokens": completion,
                    "cache_read_input_tokens": read,
                    "cache_creation_input_tokens": written,
                },
            },
            {},
        )

    def _whole(self, body: dict[str, Any]) -> list[Any]:
        """What the API caches, in its order: tools, system, messages."""
        return [body.get("tools") or [], body.get("system") or [], body["messages"]]

    def _prefixes(self, body: dict[str, Any]) -> list[str]:
        """The prefixes up to each cache_control breakpoint, as text."""
        tools, system = body.get("tools") or [], body.get("system") or []
        found = []
        for i, tool in enumerate(tools):
            if "cache_control" in tool:
                found.append([tools[: i + 1]])
        for i, block in enumerate(system if isinstance(system, list) else []):
            if "cache_control" in block:
                found.append([tools, system[: i + 1]])
        for m, message in enumerate(body["messages"]):
            for b, block in enumerate(message["content"]):
                if "cache_control" in block:
                    partial = {**message, "content": message["content"][: b + 1]}
                    found.append([tools, system, [*body["messages"][:m], partial]])
        return [json.dumps(_bare(p), sort_keys=True) for p in found]

    def _refusal(self, headers: dict[str, str], body: dict[str, Any]) -> str | None:
        if headers.get("x-api-key") != KEY:
            return "x-api-key: missing or wrong"
        if not headers.get("anthropic-version"):
            return "anthropic-version: header is required"
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            return "max_tokens: Field required"
        messages = body.get("messages") or []
        marks = sum("cache_control" in t for t in body.get("tools") or [])
        marks += sum("cache_control" in b for b in body.get("system") or [])
        for i, message in enumerate(messages):
            if message["role"] != ("user" if i % 2 == 0 else "assistant"):
                return f"messages.{i}: roles must alternate between user and assistant"
            if not message["content"]:
                return f"messages.{i}: content must not be empty"
            marks += sum("cache_control" in b for b in message["content"])
            if message["role"] == "user":
                kinds = [b["type"] for b in message["content"]]
                results = kinds.count("tool_result")
                if kinds[:results] != ["tool_result"] * results:
                    return f"messages.{i}: tool_result blocks must come first"
            uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
            if uses:
                after = messages[i + 1]["content"] if i + 1 < len(messages) else []
                results = {b.get("tool_use_id") for b in after if b["type"] == "tool_result"}
                if set(uses) - results:
                    return (
                        f"messages.{i + 1}: tool_use ids were found without tool_result "
                        f"blocks immediately after: {sorted(set(uses) - results)}"
                    )
        if marks > 4:
            return f"A maximum of 4 blocks with cache_control may be provided. Found {marks}."
        return None


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


@contextmanager
def fake_anthropic_server(model: FakeAnthropic) -> Iterator[FakeAnthropic]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/messages":
                status, payload, extra = 404, _error("not_found_error", self.path), {}
            else:
                status, payload, extra = model.answer(dict(self.headers.items()), body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("request-id", "req_fake")
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    model.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield model
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
