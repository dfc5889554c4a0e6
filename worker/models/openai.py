"""An OpenAI-compatible chat-completions client over httpx: OpenAI, vLLM, Ollama and the like.

Tool-call arguments go to the state machine exactly as the server sent them; the machine
turns text that is not a JSON object into an error observation the model can act on.
"""

from __future__ import annotations

import functools
import json
import re
import ssl
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import certifi
import httpx

from fsm.errors import ContextTooLong, PermanentModelError, TransientModelError
from fsm.values import ModelReply, ProposedCall, Usage, provider_call_id

from .base import Message, ModelSettings, ToolSchema, estimate_tokens, transcript_text

DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: statuses besides 5xx that the same request may get past later (as the OpenAI SDK retries)
_TRANSIENT_STATUSES = frozenset({408, 409, 429})

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
        timeout = settings.timeout_s
        if self.timeout_s is not None:
            timeout = min(timeout, self.timeout_s)
        started = time.perf_counter()
        response = self._post(body, timeout)
        latency_ms = (time.perf_counter() - started) * 1000
        return self._reply(response, messages, latency_ms)

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
        try:
            if self._client is not None:
                response = self._client.post(self.url, json=body, headers=headers, timeout=timeout)
            else:
                with httpx.Client(verify=_tls_context()) as client:
                    response = client.post(self.url, json=body, headers=headers, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise TransientModelError(
                f"{self._where()} timed out after {timeout:g}s ({type(exc).__name__}); "
                "a retry may succeed; raise timeout_s if the model is this slow"
            ) from exc
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL) as exc:
            raise PermanentModelError(
                f"{self._where()} could not be sent: {exc}; check the base URL and API key"
            ) from exc
        except httpx.TransportError as exc:
            raise TransientModelError(
                f"{self._where()} failed: {type(exc).__name__}: {exc}; a retry may succeed; "
                "check that the server is up and reachable"
            ) from exc
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
        if status in _TRANSIENT_STATUSES or status >= 500:
            wait = retry_after_s(response.headers, now=datetime.now(UTC))
            when = f" after {wait:g}s, as the server asked" if wait is not None else ""
            return TransientModelError(f"{what}; a retry may succeed{when}", retry_after_s=wait)
        advice = _ADVICE.get(status, "fix the request; retrying it will not help")
        return PermanentModelError(f"{what}; {advice}")

    def _reply(
        self, response: httpx.Response, messages: list[Message], latency_ms: float
    ) -> ModelReply:
        try:
            data = response.json()
        except ValueError as exc:
            raise TransientModelError(
                f"{self._where()} returned {response.status_code} with a body that is not JSON "
                f"({len(response.content)} bytes: {response.text[:200]!r}); it was probably cut "
                "off; a retry may succeed"
            ) from exc
        choices = data.get("choices") if isinstance(data, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict):
            raise TransientModelError(
                f"{self._where()} returned {response.status_code} without choices[0].message "
                f"({response.text[:200]!r}); a retry may succeed"
            )
        content = _text(message.get("content"))
        calls = tuple(_proposed(c) for c in message.get("tool_calls") or () if isinstance(c, dict))
        if not calls and isinstance(message.get("function_call"), dict):
            calls = (_proposed({"function": message["function_call"]}),)
        usage = _usage(data.get("usage"))
        if usage is None:
            written = content + "".join(c.name + str(c.arguments) for c in calls)
            usage = Usage(
                prompt_tokens=estimate_tokens(transcript_text(messages)),
                completion_tokens=estimate_tokens(written),
            )
        model = data.get("model")
        return ModelReply(
            content=content,
            calls=calls,
            usage=usage,
            model=model if isinstance(model, str) and model else self.model,
            latency_ms=latency_ms,
            truncated=first.get("finish_reason") == "length",
        )


def retry_after_s(headers: Mapping[str, str], *, now: datetime) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, or `Retry-After` as seconds or
    an HTTP date), or None if it did not say."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


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
    """(error code, message) from an error body, OpenAI's shape or a bare string."""
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
    return "", response.text.strip()[:300]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


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


class Poster(Protocol):
    """What a model posts through: an `httpx.Client`, or `ClientPool`. A provider's `make`
    gets one as `client`."""

    def post(
        self, url: str, *, json: Any, headers: dict[str, str], timeout: float
    ) -> httpx.Response: ...

    def close(self) -> None: ...


class ClientPool:
    """httpx clients of one kept-alive connection each, all on one TLS context, each lent
    to one call at a time (the most recently returned first) and made when none is free:
    as many as there were calls at once, whichever threads or greenlets made them.

    One `httpx.Client` shared by hundreds of concurrent calls costs O(calls) per call:
    httpcore's pool looks at every connection it holds (a poll of each idle one) when a
    request comes and when a response is closed, and it keeps at most its keep-alive limit,
    so a wave of calls after an idle spell opens new connections. Here each client holds
    one connection, so a call costs the same at 500 in flight as at 1
    (`ops/bench/in_flight.py`). Not to be shared across a fork."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[httpx.Client] = []
        self._all: set[httpx.Client] = set()

    def post(
        self, url: str, *, json: Any, headers: dict[str, str], timeout: float
    ) -> httpx.Response:
        client = self._lend()
        try:
            # not streamed: the body is read and the connection back in the client's pool
            return client.post(url, json=json, headers=headers, timeout=timeout)
        finally:
            with self._lock:
                if client in self._all:  # not closed meanwhile
                    self._free.append(client)

    def close(self) -> None:
        """Close every client; a later call makes a new one."""
        with self._lock:
            clients, self._all, self._free = self._all, set(), []
        for client in clients:
            client.close()

    @property
    def size(self) -> int:
        """The clients (and so kept-alive connections) held."""
        return len(self._all)

    def _lend(self) -> httpx.Client:
        with self._lock:
            if self._free:
                return self._free.pop()
        client = httpx.Client(
            verify=_tls_context(),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )
        with self._lock:
            self._all.add(client)
        return client


def pooled_client() -> ClientPool:
    """What a process's model calls share: connections kept alive (no TCP and TLS handshake
    per call), one per call in flight. The caller closes it; it does not survive a fork."""
    return ClientPool()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context per process: building one loads the CA bundle (about 0.1 s of CPU),
    which per call would serialise a threads-pool worker on the GIL."""
    return ssl.create_default_context(cafile=certifi.where())
