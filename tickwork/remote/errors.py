"""What the remote client raises: the API's JSON errors as one exception class."""

from __future__ import annotations

from typing import Any

import httpx

from tickwork.fsm.errors import TickworkError

#: the API's codes of a refusal by the server's own settings, a `ConfigurationError` or a
#: kind of it (a roles file, a job kind's declaration, TICKWORK_IMPORTS, credentials): its
#: words name the settings' keys, never a request's fields
SETTINGS_CODES = frozenset(
    {
        "configuration_error",
        "not_importable",
        "missing_credentials",
        "invalid_graph",
        "graph_version_mismatch",
    }
)


class RemoteError(TickworkError):
    """The tickwork server refused the request; `code`, `status` and `message` say why."""

    def __init__(
        self, message: str, *, code: str, status: int | None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.status, self.details = code, status, details or {}

    def __repr__(self) -> str:
        return f"RemoteError(status={self.status}, code={self.code!r}, message={self.message!r})"


class ServerUnreachable(RemoteError):
    """The server did not answer at all (refused, reset, timed out)."""


#: statuses a proxy answers for a server behind it that is down, restarting or slow
GATEWAY_STATUSES = frozenset({502, 503, 504})

#: the API's code of a 404 for a path it has no route for (a found-nothing 404 names what)
NO_ROUTE = "not_found"


def error_of(response: httpx.Response) -> RemoteError:
    """The error a non-2xx response carries: its JSON `code` and `message` when it has them
    (every error of the API does), else what a proxy in between said."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        details = {k: v for k, v in body.items() if k not in ("code", "message")}
        message = str(body.get("message") or body["code"])
        if status == 404 and body["code"] == NO_ROUTE:
            # every route the client asks for exists: the server's address has a wrong path
            message = (
                f"{response.request.method} {response.request.url} is no route of the "
                "tickwork API (404); is TICKWORK_SERVER (--server) right? Give the address "
                "`tickwork serve` listens on, http://HOST:PORT (or that with /api/v1)"
            )
        return RemoteError(message, code=body["code"], status=status, details=details)
    said = " ".join(response.text.split())[:200] or response.reason_phrase
    why = "is TICKWORK_SERVER the tickwork API?"
    if status in GATEWAY_STATUSES:  # what a proxy says of a server behind it that is away
        why = (
            "a proxy in front says the tickwork server behind it did not answer (down, "
            "restarting or slow): try again shortly; if it lasts, " + why
        )
    return RemoteError(
        f"{response.request.method} {response.request.url} answered {status} without a "
        f"tickwork error body ({said}); {why}",
        code=f"http_{status}",
        status=status,
    )


def unreachable(
    exc: httpx.TransportError,
    base_url: str,
    *,
    sent: httpx.Request | None = None,
    timeout_s: float | None = None,
) -> ServerUnreachable:
    """The error of a request the server did not answer. One that never reached it (refused,
    no such host) asks whether the server runs there; one `sent` whose answer did not come
    (a timeout, a connection dropped) may have been carried out, and says how to retry."""
    if sent is None or isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return ServerUnreachable(
            f"cannot reach the tickwork server at {base_url}: {exc or type(exc).__name__}; "
            "is `tickwork serve` running there, and is TICKWORK_SERVER (--server) right?",
            code="unreachable",
            status=None,
        )
    if isinstance(exc, httpx.ReadTimeout) and timeout_s is not None:
        how = f"within {timeout_s:g}s (the client's timeout)"
    else:
        how = f"({exc or type(exc).__name__})"
    said = f"the tickwork server at {base_url} did not answer {sent.method} {sent.url.path} {how}"
    if sent.method == "GET":
        return ServerUnreachable(
            f"{said}; try again (a longer timeout: Client(timeout=...), or for the CLI "
            "TICKWORK_SERVER_TIMEOUT_S)",
            code="unreachable",
            status=None,
        )
    return ServerUnreachable(
        f"{said}; it may have been carried out all the same: a submit or fork sent again "
        "with the same idempotency_key gets the session the first made (without one, look "
        "for it first: `tickwork ls`); a decision or cancel sent again is refused if the "
        "first was taken, saying so",
        code="unreachable",
        status=None,
    )
