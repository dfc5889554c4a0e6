"""An OpenAI-compatible chat-completions client over httpx: OpenAI, vLLM, Ollama and the like.

Tool-call arguments go to the state machine exactly as the server sent them; the machine
turns text that is not a JSON object into an error observation the model can act on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
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

DEFAULT_BASE_URL = "https://api.openai.com/v1"

_ADVICE = {
    400: "the server refused the request as invalid; check the model settings and tool schemas",
    401: "the API key was refused; check OPENAI_API_KEY",
    403: "the API key may not use this model; check the account's access to it",
    404: "check the model name and the base URL (OPENAI_BASE_URL)",
}


class OpenAIChatModel:
    """POSTs `{base_url}/chat/completions` with native tool calling.

    Without a `client`, each call opens and closes its own connection, so the model holds
    nothing that needs closing and survives a fork; pass a shared `httpx.Client` or
    `ClientPool` (which the caller closes) to pool connections. The request times out
    after the tighter of `timeout_s` and the call's `settings.timeout_s`.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout_s: float | None = None,
        client: Poster | None = None,
        max_tokens_field: str | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.timeout_s = timeout_s
        self._api_key = api_key
        self._client = client
        # OpenAI's own API wants the newer name (its reasoning models refuse `max_tokens`);
        # compatible servers mostly know only the older one.
        self.max_tokens_field = max_tokens_field or (
            "max_completion_tokens" if "api.openai.com" in self.base_url else "max_tokens"
        )

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, base_url={self.base_url!r})"

    def generate(
        self, messages: list[Message], tools: list[ToolSchema], settings: ModelSettings
    ) -> ModelReply:
        body = self.request_body(messages, tools, settings)
        timeout = call_timeout(settings.timeout_s, self.timeout_s)
        return within_window(
            lambda sent: self._post(sent, timeout),
            body,
            self.max_tokens_field,
            lambda response, latency_ms: self._reply(response, messages, latency_ms),
        )

    def request_body(
        self, messages: list[Message], tools: list[ToolSchema], settings: ModelSettings
    ) -> dict[str, Any]:
        """The JSON sent for one call; `settings.extra` cannot replace the transcript or tools."""
        body: dict[str, Any] = dict(settings.extra)
        body["model"] = self.model
        body["messages"] = messages
        if tools:
            body["tools"] = tools
        else:
            body.pop("tools", None)
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body[self.max_tokens_field] = settings.max_tokens
        return body

    def _where(self) -> str:
        return f"POST {self.url} (model {self.model})"

    def _post(self, body: dict[str, Any], timeout: float) -> httpx.Response:
        headers = {"Content-Type": "application/json", "User-Agent": "tickwork"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        response = post(
            self._client, self.url, body, headers=headers, timeout=timeout, where=self._where()
        )
        if response.status_code >= 400:
            raise self._status_error(response)
        return response

    def _status_error(self, response: httpx.Response) -> TransientModelError | PermanentModelError:
        status = response.status_code
        code, detail = _error_detail(response)
        what = f"{self._where()} returned {status} {response.reason_phrase}".rstrip()
        if detail:
            what += f": {detail}"
        if request_id := response.headers.get("x-request-id"):
            what += f" (request id {request_id})"
        if status in (400, 413) and _too_long(code, detail):
            return ContextTooLong(f"{what}; the prompt is longer than the model's context window")
        if status == 429 and code == "insufficient_quota":
            return PermanentModelError(f"{what}; the account has no quota left; check its billing")
        if is_transient(status):
            return retry_error(what, response)
        advice = _ADVICE.get(status, "fix the request; retrying it will not help")
        return PermanentModelError(f"{what}; {advice}")

    def _reply(
        self, response: httpx.Response, messages: list[Message], latency_ms: float
    ) -> ModelReply:
        data = json_of(response, self._where())
        choices = data.get("choices") if isinstance(data, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict):
            raise TransientModelError(
                f"{self._where()} returned {response.status_code} without choices[0].message "
                f"({response.text[:200]!r}); a retry may succeed"
            )
        content = text_of(message.get("content"))
        calls = tuple(_proposed(c) for c in message.get("tool_calls") or () if isinstance(c, dict))
        if not calls and isinstance(message.get("function_call"), dict):
            calls = (_proposed({"function": message["function_call"]}),)
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
            truncated=first.get("finish_reason") == "length",
        )


#: how servers say a prompt passed the context window: OpenAI's code, and the messages of
#: OpenAI, vLLM, llama.cpp and Ollama
_TOO_LONG = re.compile(
    r"maximum context length|context[ _]length[ _]exceeded|exceeds? (the )?(model'?s? )?"
    r"context|prompt is too long|input is too long|too many tokens",
    re.IGNORECASE,
)


def _too_long(code: str, detail: str) -> bool:
    return code == "context_length_exceeded" or bool(_TOO_LONG.search(detail))


def _error_detail(response: httpx.Response) -> tuple[str, str]:
    """(error code, message) from an error body, OpenAI's shape, vLLM's older flat one
    (`{"object": "error", "message": ..., "type": ..., "code": 400}`) or a bare string."""
    try:
        data = response.json()
    except ValueError:
        return "", response.text.strip()[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        code = error.get("code") or error.get("type") or ""
        return str(code), str(error.get("message") or "")[:300]
    if isinstance(error, str):
        return "", error[:300]
    if isinstance(data, dict) and isinstance(data.get("message"), str) and data["message"]:
        return str(data.get("type") or ""), data["message"][:300]
    return "", response.text.strip()[:300]


def _proposed(call: Mapping[str, Any]) -> ProposedCall:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    arguments = function.get("arguments")
    if arguments is None:
        arguments = ""
    elif not isinstance(arguments, str):
        # a few servers send an object; the machine wants the text as written
        arguments = json.dumps(arguments, ensure_ascii=False)
    # the id goes back with the call's result: servers may check it (Mistral's: 9 alphanumerics)
    return ProposedCall(
        name=str(function.get("name") or ""),
        arguments=arguments,
        id=provider_call_id(call.get("id")),
    )


def _usage(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (prompt, completion)
    ):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")  # DeepSeek's name for them
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_prompt_tokens=min(_count(cached), prompt),
    )


def _count(value: Any) -> int:
    """A token count a server reported, or 0 if what it sent is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
