"""An OpenAI chat-completions server on loopback with a context window, for the context
policy's tests and `ops/bench/long_session.py`.

It plays a reader of `steps` chunks (`tests.jobs:LONG`): it answers a prompt with a call
of `read_chunk` for the chunk after the last one the prompt names (in a call's arguments
or a compaction summary), the final answer after `steps`, and a summary when asked to
compact. What it answers is a function of the prompt alone, so a fork from any step is
answered as its parent was. It refuses a prompt of more than `window` tokens with
`context_length_exceeded`, and reports as cached (`usage.prompt_tokens_details.
cached_tokens`) the tokens of the messages a prompt shares, from the start, with one of
the last prompts it saw, as a provider's prefix cache would. Tokens are counted as the
worker estimates them (four characters each).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tickwork.fsm import context
from tickwork.fsm.values import Session, StepKind
from tickwork.worker.models.base import (
    estimate_prompt,
    estimate_schemas,
    estimate_tokens,
    transcript_text,
)

_SUMMARISED = re.compile(r"read chunks up to n=(\d+)")
COMPLETION_TOKENS = 12


@dataclass
class Request:
    tokens: int
    cached: int
    refused: bool
    compaction: bool
    #: the messages as received (kept when the server records them)
    messages: list[dict[str, Any]] | None = None
    #: the completion cap the request carried (`max_tokens`)
    max_tokens: int | None = None
    #: the tools' schemas as received (kept when the server records them)
    tools: list[dict[str, Any]] | None = None


@dataclass
class WindowedChat:
    window: int
    steps: int
    record: bool = False
    #: how many earlier prompts the prefix cache holds
    cache_size: int = 4
    #: seconds the first compaction request waits before it is answered (a kill lands in it)
    slow_compaction: float = 0.0
    #: a compaction request is answered with a tool call and no summary (tools are offered)
    calls_for_summary: bool = False
    #: a compaction request is answered with its summary and a tool call beside it
    calls_beside_summary: bool = False
    #: the completion cap counts within the window, as vLLM, OpenAI and Anthropic count it: a
    #: prompt whose tokens and `max_tokens` together pass the window is refused
    counts_completion: bool = False
    #: the server's tokenizer counts this share more tokens than the worker's estimate
    #: (four characters a token) does, as a real one does for code or JSON
    undercount: float = 0.0
    #: the tools' schemas count within the window, estimated as the worker estimates them
    counts_tools: bool = False
    #: a compaction's request, its cap counted, is refused past this window (below
    #: `window`), as a server whose window is smaller than the session's refuses the first
    #: call whose prompt and cap pass it: here the compaction's, not an ordinary call's
    compaction_window: int | None = None
    #: a refusal states the window and the prompt's tokens (OpenAI's and vLLM's words); else
    #: it only says the prompt is too long, as some gateways do
    states_window: bool = True
    log: list[Request] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        #: set when the first compaction request arrives
        self.compacting = threading.Event()
        self._lock = threading.Lock()
        self._cache: deque[list[str]] = deque(maxlen=self.cache_size)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body["messages"]
        tokens = int(estimate_tokens(transcript_text(messages)) * (1 + self.undercount))
        if self.counts_tools:
            tokens += estimate_schemas(body.get("tools") or [])
        compaction = messages[-1]["role"] == "user" and "being compacted" in str(
            messages[-1].get("content")
        )
        cap = int(body.get("max_tokens") or 0) if self.counts_completion else 0
        window = self.window
        if compaction and self.compaction_window is not None:
            cap, window = int(body.get("max_tokens") or 0), self.compaction_window
        if tokens + cap > window:
            with self._lock:
                self.log.append(Request(tokens, 0, True, compaction, self._kept(messages), cap))
            asked = f"your messages resulted in {tokens} tokens"
            if cap:
                # vLLM's words
                asked = (
                    f"you requested {tokens + cap} tokens ({tokens} in the messages, "
                    f"{cap} in the completion)"
                )
            said = f"This model's maximum context length is {window} tokens. However, {asked}."
            return 400, {
                "error": {
                    "message": said if self.states_window else "The prompt is too long.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            }
        keys = [json.dumps(m, sort_keys=True) for m in messages]
        with self._lock:
            shared = max((_common(keys, seen) for seen in self._cache), default=0)
            cached = estimate_tokens(transcript_text(messages[:shared])) if shared else 0
            self._cache.append(keys)
            self.log.append(
                Request(
                    tokens,
                    cached,
                    False,
                    compaction,
                    self._kept(messages),
                    body.get("max_tokens"),
                    body.get("tools") if self.record else None,
                )
            )
        if compaction and not self.compacting.is_set():
            self.compacting.set()
            time.sleep(self.slow_compaction)
        last = _last_chunk(messages)
        message: dict[str, Any]
        if compaction and not self.calls_for_summary:
            message = {"role": "assistant", "content": f"Summary: read chunks up to n={last}."}
            if self.calls_beside_summary:
                message["tool_calls"] = [_read_call(last + 1)]
        elif last >= self.steps:
            message = {"role": "assistant", "content": f"done: read {last} chunks"}
        else:
            n = last + 1
            message = {
                "role": "assistant",
                "content": "" if compaction else f"reading chunk {n}",
                "tool_calls": [_read_call(n)],
            }
        usage = {
            "prompt_tokens": tokens,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": tokens + COMPLETION_TOKENS,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        return 200, {
            "id": "chatcmpl-windowed",
            "object": "chat.completion",
            "model": body.get("model", "windowed"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage,
        }

    def _kept(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        return messages if self.record else None

    @property
    def answered(self) -> list[Request]:
        return [r for r in self.log if not r.refused]


def _read_call(n: int) -> dict[str, Any]:
    return {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": "read_chunk", "arguments": json.dumps({"n": n})},
    }


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _last_chunk(messages: list[dict[str, Any]]) -> int:
    """The highest chunk the prompt names: in a call's arguments or in a summary."""
    last = 0
    for m in messages:
        for call in m.get("tool_calls") or ():
            args = json.loads(call["function"]["arguments"] or "{}")
            last = max(last, int(args.get("n", 0)))
        if m["role"] == "user":
            for found in _SUMMARISED.findall(str(m.get("content"))):
                last = max(last, int(found))
    return last


@contextmanager
def windowed_chat(chat: WindowedChat) -> Iterator[WindowedChat]:
    """Serve `chat` on loopback for as long as the `with`; `chat.url` is its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, payload = chat.answer(body)
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
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
    chat.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield chat
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def without_policy(session: Session) -> int:
    """The prompt tokens the same session sends with no policy, from its stored steps: the
    prompt of reply k holds the system prompt, the task and every reply before it whole.
    A step's messages add their estimate (the estimator counts characters, so the parts
    add up to within a token each), which keeps this linear in the session's length."""
    head = session.head.model_copy(update={"config": {**session.head.config, "context": None}})
    seen = {o.call_id: o for o in session.observations}
    replies = [s for s in session.steps if s.kind is StepKind.REPLY]
    base = estimate_prompt(context.build(head, [], seen, context.View()))
    total, grown = 0, base
    for step in replies:
        total += grown
        grown += estimate_prompt(context.build(head, [step], seen, context.View())) - base
    return total
