"""An Anthropic Messages API client over httpx: `anthropic:MODEL`.

The transcript is built in OpenAI's chat shape (`tickwork.fsm.transcript`); this module says it in
Anthropic's: the system prompt at the top level, tool calls as `tool_use` blocks, their
results as `tool_result` blocks of the next user message, and consecutive messages of one
role merged (the API wants them alternating). Cache breakpoints (`cache_control`) mark the
prefix that the next call repeats: the tools, the system prompt, the message before the
newest user turn and the last message, so an append-only transcript is read from the
provider's prompt cache up to the newest turn (four breakpoints, the API's most).
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from tickwork.fsm.errors import ContextTooLong, PermanentModelError, TransientModelError
from tickwork.fsm.values import ModelReply, ProposedCall, Usage, provider_call_id
from tickwork.worker.models.base import Message, ModelSettings, ToolSchema
from tickwork.worker.models.transport import (
    Poster,
    call_timeout,
    estimated_usage,
    is_transient,
    json_of,
    post,
    retry_error,
    text_of,
    within_window,
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
#: the API version the request and answer shapes here are written for
API_VERSION = "2023-06-01"
#: the completion cap sent when the caller sets none: the API requires one
DEFAULT_MAX_TOKENS = 4_096
#: the prefix of a tool result's text that says the call failed (as `tickwork.fsm.transcript`
#: writes it)
ERROR_PREFIX = "ERROR: "
#: how the API says a prompt is longer than the model's window
_TOO_LONG = re.compile(r"prompt is too long|input length .*exceed context limit", re.I)
_EPHEMERAL = {"type": "ephemeral"}

_ADVICE = {
    400: "the server refused the request as invalid; check the model settings and tool schemas",
    401: "the API key was refused; check ANTHROPIC_API_KEY",
    403: "the API key may not use this model; check the account's access to it",
    404: "check the model name and the base URL (ANTHROPIC_BASE_URL)",
    413: "the request is larger than the API takes; shorten the transcript or its tool outputs",
}


class AnthropicMessagesModel:
    """POSTs `{base_url}/v1/messages` with native tool use and prompt-cache breakpoints.

    Connections as `OpenAIChatModel`'s: one per call without a `client`, else the shared
    `client` (left open). The request times out after the tighter of `timeout_s` and the
    call's `settings.timeout_s`.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout_s: float | None = None,
        client: Poster | None = None,
    ) -> None:
        self.model = model
        # the SDK's base URL has no /v1; take it either way
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.url = f"{self.base_url}/v1/messages"
        self.timeout_s = timeout_s
        self._api_key = api_key
        self._client = client

    def __repr__(self) -> str:
        return f"AnthropicMessagesModel({self.model!r}, base_url={self.base_url!r})"

    def generate(
        self, messages: list[Message], tools: list[ToolSchema], settings: ModelSettings
    ) -> ModelReply:
        body = self.request_body(messages, tools, settings)
        timeout = call_timeout(settings.timeout_s, self.timeout_s)
        return within_window(
            lambda sent: self._post(sent, timeout),
            body,
            "max_tokens",
            lambda response, latency_ms: self._reply(response, messages, latency_ms),
        )

    def request_body(
        self, messages: list[Message], tools: list[ToolSchema], settings: ModelSettings
    ) -> dict[str, Any]:
        """The JSON sent for one call; `settings.extra` cannot replace the transcript,
        the tools or the cap."""
        body: dict[str, Any] = dict(settings.extra)
        body["model"] = self.model
        body["max_tokens"] = settings.max_tokens or DEFAULT_MAX_TOKENS
        system = [
            {"type": "text", "text": m["content"]}
            for m in messages
            if m.get("role") == "system" and isinstance(m.get("content"), str) and m["content"]
        ]
        if system:
            system[-1]["cache_control"] = _EPHEMERAL
            body["system"] = system
        else:
            body.pop("system", None)
        turns = turns_of(messages)
        _mark_prefix(turns)
        body["messages"] = turns
        if tools:
            body["tools"] = [_tool(t) for t in tools]
            body["tools"][-1]["cache_control"] = _EPHEMERAL
        else:
            body.pop("tools", None)
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        return body

    def _where(self) -> str:
        return f"POST {self.url} (model {self.model})"

    def _post(self, body: dict[str, Any], timeout: float) -> httpx.Response:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "tickwork",
            "anthropic-version": API_VERSION,
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        response = post(
            self._client, self.url, body, headers=headers, timeout=timeout, where=self._where()
        )
        if response.status_code >= 400:
            raise self._status_error(response)
        return response

    def _status_error(
        self, response: httpx.Response
    ) -> TransientModelError | PermanentModelError | ContextTooLong:
        status = response.status_code
        kind, detail = _error_detail(response)
        what = f"{self._where()} returned {status} {response.reason_phrase}".rstrip()
        if detail:
            what += f": {kind + ': ' if kind else ''}{detail}"
        if request_id := response.headers.get("request-id"):
            what += f" (request id {request_id})"
        if is_transient(status):  # 529, Anthropic's "overloaded", among the 5xx
            return retry_error(what, response)
        if status == 400 and _TOO_LONG.search(detail):
            return ContextTooLong(
                f"{what}; the transcript is longer than the model's context window"
            )
        advice = _ADVICE.get(status, "fix the request; retrying it will not help")
        return PermanentModelError(f"{what}; {advice}")

    def _reply(
        self, response: httpx.Response, messages: list[Message], latency_ms: float
    ) -> ModelReply:
        data = json_of(response, self._where())
        blocks = data.get("content") if isinstance(data, dict) else None
        if not isinstance(blocks, list):
            raise TransientModelError(
                f"{self._where()} returned {response.status_code} without content blocks "
                f"({response.text[:200]!r}); a retry may succeed"
            )
        blocks = [b for b in blocks if isinstance(b, dict)]
        content = "".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
        calls = tuple(_proposed(b) for b in blocks if b.get("type") == "tool_use")
        usage = _usage(data.get("usage"))
        if usage is None:
            usage = estimated_usage(messages, content, calls)
        model = data.get("model")
        return ModelReply(
            content=content,
            calls=calls,
            usage=usage,
            model=model if isinstance(model, str) and model else self.model,
            latency_ms=latency_ms,
            # end_turn, tool_use and stop_sequence end an answer; max_tokens cuts it
            truncated=data.get("stop_reason") == "max_tokens",
        )


def turns_of(messages: list[Message]) -> list[dict[str, Any]]:
    """The chat transcript (OpenAI's shape, system messages left out) as Anthropic's
    alternating user and assistant turns of content blocks."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            blocks = _assistant_blocks(message)
        elif role == "tool":
            text = text_of(message.get("content"))
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id") or ""),
                "content": text or "(no output)",
            }
            if text.startswith(ERROR_PREFIX):
                result["is_error"] = True
            role, blocks = "user", [result]
        elif role == "user":
            text = text_of(message.get("content"))
            blocks = [{"type": "text", "text": text}] if text else []
        else:
            continue
        if not blocks:
            continue  # the API refuses empty turns and empty text blocks
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(continue)"}]})
    for turn in turns:
        if turn["role"] == "user":
            # the results of a turn's tool calls must come before any text of the same turn
            turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    return turns


def _mark_prefix(turns: list[dict[str, Any]]) -> None:
    """Breakpoints on the last block of the last turn (what the next call repeats) and of
    the user turn before it (where the last call's transcript ended, so what it wrote to
    the cache is read back even past the 20 blocks the provider looks back from a
    breakpoint)."""
    if not turns:
        return
    turns[-1]["content"][-1]["cache_control"] = _EPHEMERAL
    users = [i for i, t in enumerate(turns) if t["role"] == "user"]
    if len(users) >= 2:
        turns[users[-2]]["content"][-1]["cache_control"] = _EPHEMERAL


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    text = text_of(message.get("content"))
    if text.strip():
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id") or ""),
                "name": str(function.get("name") or ""),
                "input": _input(function.get("arguments")),
            }
        )
    return blocks


def _input(arguments: Any) -> dict[str, Any]:
    """A call's arguments as the object `tool_use` must carry: text that is not a JSON
    object (the model wrote it so; the call got an error) goes back under `arguments`."""
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except (ValueError, RecursionError):  # nested deeper than the parser goes
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": str(arguments)}


def _tool(schema: ToolSchema) -> dict[str, Any]:
    function = schema.get("function") or {}
    tool: dict[str, Any] = {
        "name": function.get("name", ""),
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        tool["description"] = function["description"]
    return tool


def _proposed(block: dict[str, Any]) -> ProposedCall:
    arguments = block.get("input")
    return ProposedCall(
        name=str(block.get("name") or ""),
        arguments=json.dumps(arguments if arguments is not None else {}, ensure_ascii=False),
        id=provider_call_id(block.get("id")),
    )


def _usage(usage: Any) -> Usage | None:
    """Anthropic's input_tokens leave out the tokens read from and written to the cache;
    tickwork's prompt_tokens hold all three (as OpenAI's and the GenAI conventions do)."""
    if not isinstance(usage, dict):
        return None
    plain, completion = usage.get("input_tokens"), usage.get("output_tokens")
    if not all(_is_count(n) for n in (plain, completion)):
        return None
    read = usage.get("cache_read_input_tokens")
    written = usage.get("cache_creation_input_tokens")
    read = read if _is_count(read) else 0
    written = written if _is_count(written) else 0
    return Usage(
        prompt_tokens=plain + read + written,
        completion_tokens=completion,
        cached_prompt_tokens=read,
        cache_creation_tokens=written,
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _error_detail(response: httpx.Response) -> tuple[str, str]:
    """(error type, message) from Anthropic's `{"type": "error", "error": {...}}`."""
    try:
        data = response.json()
    except ValueError:
        return "", response.text.strip()[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("type") or ""), str(error.get("message") or "")[:300]
    return "", response.text.strip()[:300]
