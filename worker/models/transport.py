"""What the HTTP model clients share: the POST and how its failures map to the model
errors, the server's Retry-After, the call asked again with a cap that fits the window,
the reply's JSON, the estimate when a server reports no
usage, and the pooled connections. Each wire format (`openai`, `anthropic`) keeps its own
request and reply shapes, headers and error bodies.
"""

from __future__ import annotations

import functools
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import certifi
import httpx
from tickwork.fsm.errors import ContextTooLong, PermanentModelError, TransientModelError
from tickwork.fsm.values import ModelReply, ProposedCall, Usage
from tickwork.worker.models.base import Message, estimate_tokens, transcript_text

#: statuses besides 5xx that the same request may get past later (as the OpenAI SDK retries)
TRANSIENT_STATUSES = frozenset({408, 409, 429})


def call_timeout(settings_timeout_s: float, own_timeout_s: float | None) -> float:
    """The tighter of the call's timeout and the model's own (None: no cap of its own)."""
    if own_timeout_s is None:
        return settings_timeout_s
    return min(settings_timeout_s, own_timeout_s)


def post(
    client: Poster | None,
    url: str,
    body: dict[str, Any],
    *,
    headers: dict[str, str],
    timeout: float,
    where: str,
) -> httpx.Response:
    """POST `body` as JSON through `client` (or a connection of its own) and return the
    response whatever its status; a failure to send or to hear back is a model error."""
    try:
        if client is not None:
            return client.post(url, json=body, headers=headers, timeout=timeout)
        with httpx.Client(verify=tls_context()) as own:
            return own.post(url, json=body, headers=headers, timeout=timeout)
    except httpx.TimeoutException as exc:
        raise TransientModelError(
            f"{where} timed out after {timeout:g}s ({type(exc).__name__}); "
            "a retry may succeed; raise timeout_s if the model is this slow"
        ) from exc
    except (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL) as exc:
        raise PermanentModelError(
            f"{where} could not be sent: {exc}; check the base URL and API key"
        ) from exc
    except httpx.TransportError as exc:
        raise TransientModelError(
            f"{where} failed: {type(exc).__name__}: {exc}; a retry may succeed; "
            "check that the server is up and reachable"
        ) from exc


def is_transient(status: int) -> bool:
    """Whether the same request may get past this error status later."""
    return status in TRANSIENT_STATUSES or status >= 500


def retry_error(what: str, response: httpx.Response) -> TransientModelError:
    """The error for a status a retry may get past, with the wait the server asked for."""
    wait = retry_after_s(response.headers, now=datetime.now(UTC))
    when = f" after {wait:g}s, as the server asked" if wait is not None else ""
    return TransientModelError(f"{what}; a retry may succeed{when}", retry_after_s=wait)


def json_of(response: httpx.Response, where: str) -> Any:
    """A success's body as JSON; one that is not was probably cut off."""
    try:
        return response.json()
    except ValueError as exc:
        raise TransientModelError(
            f"{where} returned {response.status_code} with a body that is not JSON "
            f"({len(response.content)} bytes: {response.text[:200]!r}); it was probably cut "
            "off; a retry may succeed"
        ) from exc


#: how a server that refused a call for its prompt and completion cap together says what
#: the prompt alone takes: OpenAI's and vLLM's "maximum context length is W tokens. However,
#: you requested T tokens (P in the messages, C in the completion)", newer vLLM's "... is W
#: tokens and your request has P input tokens", Anthropic's "input length and `max_tokens`
#: exceed context limit: P + C > W"
_CAP_REFUSED = re.compile(
    r"maximum context length is (?P<w1>\d+) tokens\. However, you requested \d+ tokens "
    r"\((?P<p1>\d+) in the messages"
    r"|maximum context length is (?P<w2>\d+) tokens and your request has (?P<p2>\d+) input"
    r"|exceed context limit: (?P<p3>\d+) \+ \d+ > (?P<w3>\d+)",
    re.IGNORECASE,
)


#: the least room for an answer a prompt must leave in the window (or the cap asked for, if
#: smaller): a prompt that leaves less is too long, and is compacted rather than answered
#: in a few tokens (a reply cut there with no tool call would end the session)
MIN_ANSWER_ROOM = 1024


def cap_that_fits(refusal: str, asked: Any) -> int | None:
    """The completion cap to ask again with, where a server refused a call as too long for
    its window and says the prompt alone fits: the room the prompt leaves, if below the cap
    `asked` and at least MIN_ANSWER_ROOM (or `asked`). None where the prompt itself is too
    long, or leaves less room than that (or the server does not say)."""
    found = _refused(refusal)
    if found is None or isinstance(asked, bool) or not isinstance(asked, int):
        return None
    window, prompt = found
    room = window - prompt
    return room if min(asked, MIN_ANSWER_ROOM) <= room < asked else None


def within_window(
    send: Callable[[dict[str, Any]], httpx.Response],
    body: dict[str, Any],
    cap_field: str,
    reply_of: Callable[[httpx.Response, float], ModelReply],
) -> ModelReply:
    """The reply to `body` sent through `send`, read by `reply_of` (the response and the
    milliseconds it took). Where the server refused the call as too long for its window but
    said the prompt alone fits, it is sent once more at once with its cap (`cap_field`)
    lowered to the room that prompt leaves (`cap_that_fits`), and the reply says so
    (`cap_lowered`, `cap_lowered_to`, and the window the refusal stated, `stated_window`):
    a cut there is the window's, not a budget's."""
    started = time.perf_counter()
    lowered = window = None
    try:
        response = send(body)
    except ContextTooLong as exc:
        lowered = cap_that_fits(str(exc), body.get(cap_field))
        if lowered is None:
            raise
        window = cap_refused_window(str(exc))
        body[cap_field] = lowered
        response = send(body)
    reply = reply_of(response, (time.perf_counter() - started) * 1000)
    if lowered is None:
        return reply
    said = {"cap_lowered": True, "cap_lowered_to": lowered, "stated_window": window}
    return reply.model_copy(update=said)


def cap_refused_window(refusal: str) -> int | None:
    """The context window a server's refusal of a call's prompt and cap together states."""
    found = _refused(refusal)
    return None if found is None else found[0]


def _refused(refusal: str) -> tuple[int, int] | None:
    """The window and the prompt's tokens a refusal of a cap states (`_CAP_REFUSED`)."""
    found = _CAP_REFUSED.search(refusal)
    if found is None:
        return None
    groups = found.groupdict()
    return next((int(groups[f"w{i}"]), int(groups[f"p{i}"])) for i in (1, 2, 3) if groups[f"w{i}"])


def estimated_usage(
    messages: list[Message], content: str, calls: tuple[ProposedCall, ...]
) -> Usage:
    """The tokens of a call whose server reported none, estimated from the text."""
    written = content + "".join(c.name + str(c.arguments) for c in calls)
    return Usage(
        prompt_tokens=estimate_tokens(transcript_text(messages)),
        completion_tokens=estimate_tokens(written),
    )


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


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
            verify=tls_context(),
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
def tls_context() -> ssl.SSLContext:
    """One TLS context per process: building one loads the CA bundle (about 0.1 s of CPU),
    which per call would serialise a threads-pool worker on the GIL."""
    return ssl.create_default_context(cafile=certifi.where())
