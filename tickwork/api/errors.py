"""Every error as JSON: `{"code": ..., "message": ...}` plus details, with a fitting status.

401 no or bad token, 403 wrong role, 404 no such thing (or not the caller's tenant's; a
session's, `session_not_found`, says with `archived` whether the id is an archived
session's), 409 not now (the call was decided, its arguments changed, the session
finished), 413 a body over the limit, 422 bad input (with what was wrong), 429 over a
tenant's quota (naming it), 503 the database is not answering, the server is busy (every
connection to it in use: Retry-After) or an archived session's archive cannot be read, 500
a bug (logged). Bad input is never blamed on the database: what
the database cannot store is refused before.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount

from tickwork.fsm.errors import (
    ConfigurationError,
    IllegalTransition,
    InvalidInput,
    QuotaExceeded,
    SessionArchived,
    SessionNotFound,
    SourceUnreachable,
    StoreBusy,
    StoreConflict,
    StoreError,
    TickworkError,
    UnstorableValue,
)
from tickwork.store.archive import ArchiveMissing

log = logging.getLogger("tickwork.api")

#: the methods a 405's `Allow` may name
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
}


def busy_retry_s(pool_timeout_s: float) -> int:
    """The seconds a `server_busy` answer's Retry-After asks a client to wait: as long as the
    request waited in vain for a connection (the store's pool's timeout, as
    TICKWORK_DATABASE_POOL_TIMEOUT_S sets it for the engine the settings make), in whole
    seconds: one sent sooner joins the queue that held this one that long."""
    return max(1, math.ceil(pool_timeout_s))


#: what each error status means, for the OpenAPI schema
MEANINGS = {
    400: "The request could not be parsed",
    401: "No token, or not a valid one",
    403: "The token's roles do not allow this",
    404: "No such session, call, dead letter or patch; a session's (`session_not_found`) "
    "says whether its id is an archived session's (`archived`)",
    409: "Not now: already decided (who, when), the arguments changed, the session is "
    "finished, or the id is taken",
    413: "The body is over TICKWORK_API_MAX_BODY_BYTES",
    422: "Bad input; the message says what was wrong",
    429: "Over one of the tenant's quotas (`quota` names it, `Retry-After` says when to "
    "try again); nothing was stored",
    502: "A repair's repository did not answer (`source_unreachable`: its host does not "
    "resolve or cannot be reached); the input may be right, so try again later",
    503: "Not ready: the database (or, for /readyz, its schema or the broker) is not "
    "answering, the server is busy (`server_busy`: every connection to its database was in "
    "use; `Retry-After` says when to try again), or (`archive_missing`) an archived "
    "session's archive cannot be read",
}


class ErrorBody(BaseModel):
    """Every error's body: a code, a one-line message and details that depend on the code."""

    model_config = ConfigDict(extra="allow")

    code: str = Field(examples=["not_found"])
    message: str = Field(examples=["no session 's-1'"])
    archived: bool | None = Field(
        default=None,
        description="Only on a 404 `session_not_found`: true if the id is an archived "
        "session's (this route serves live sessions only; its patch and fork read it back), "
        "false if no session the token sees has it",
    )


#: the headers an error status comes with, as the schema states them
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again (429: until the quota may let "
        "it in; 503: with `server_busy` only).",
        "schema": {"type": "integer", "minimum": 0},
    }
}
HEADERS: dict[int, dict[str, Any]] = {429: _RETRY_AFTER, 503: _RETRY_AFTER}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error statuses, each with the error body (and the
    headers it comes with)."""
    return {s: {"model": ErrorBody, "description": MEANINGS[s], **_headers(s)} for s in statuses}


def _headers(status: int) -> dict[str, Any]:
    return {"headers": HEADERS[status]} if status in HEADERS else {}


def documented_beside_text(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """As `documented`, for a route whose success is text: its errors are JSON all the same
    (a `model` is stated under the route's own media type, which is not JSON there)."""
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {s: {"description": MEANINGS[s], "content": body, **_headers(s)} for s in statuses}


class ApiError(Exception):
    """An error answered as it is: status, code, message and details."""

    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def status_of(exc: TickworkError) -> int:
    if isinstance(exc, LookupError):
        return 404
    if isinstance(exc, (InvalidInput, ConfigurationError)):
        return 422
    if isinstance(exc, SourceUnreachable):  # not the request's fault: a host did not answer
        return 502
    if isinstance(exc, IllegalTransition):
        return 409
    return 409


def answer(status: int, code: str, message: str, **details: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        {"code": code, "message": message, **details}, status_code=status, headers=headers
    )


def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return answer(exc.status, exc.code, exc.message, **exc.details)


def _tickwork_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TickworkError)
    return answer(status_of(exc), snake(type(exc).__name__), exc.message)


def _session_not_found(_: Request, exc: Exception) -> JSONResponse:
    """404 `session_not_found`, saying whether the id is an archived session's (one the
    caller sees, asked of a route that serves live sessions only) or no session's."""
    assert isinstance(exc, SessionNotFound)
    archived = isinstance(exc, SessionArchived)
    return answer(404, "session_not_found", exc.message, archived=archived)


def _quota_exceeded(_: Request, exc: Exception) -> JSONResponse:
    """429 naming the quota, with Retry-After: nothing of the submit was stored."""
    assert isinstance(exc, QuotaExceeded)
    response = answer(
        429,
        "quota_exceeded",
        exc.message,
        quota=exc.quota,
        tenant=exc.tenant,
        limit=exc.limit,
        used=exc.used,
        retry_after_s=exc.retry_after_s,
    )
    response.headers["Retry-After"] = str(exc.retry_after_s)
    return response


def _said(message: str) -> str:
    """A validator's own message, without pydantic's prefix, which says nothing to a client."""
    return message.removeprefix("Value error, ")


def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "loc": [str(p) for p in e.get("loc", ())],
            "msg": _said(str(e.get("msg", ""))),
            "type": str(e.get("type", "")),
        }
        for e in exc.errors()
    ]
    said = "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors[:5])
    broken = next((e for e in exc.errors() if e.get("type") == "json_invalid"), None)
    if broken is not None:
        # its loc is ("body", offset): say what and where, not "body.18"
        why = (broken.get("ctx") or {}).get("error") or "not JSON"
        at = broken.get("loc", ())[1:2]
        said = f"the body is not valid JSON ({why}{f' at character {at[0]}' if at else ''})"
        said += "; send one JSON object, as the route's schema in /api/v1/docs says"
    kind = request.headers.get("content-type", "")
    media = kind.split(";")[0].strip().lower()
    json_body = media == "application/json" or media.endswith("+json")
    if any(e["loc"] == ["body"] for e in errors) and not json_body:
        # FastAPI reads a body it is not told is JSON as text, which is then no object
        said += (
            f"; the request's Content-Type is {kind!r}, not application/json: send the body "
            "as JSON with Content-Type: application/json"
            if kind
            else "; the request has no Content-Type: send the body as JSON with "
            "Content-Type: application/json"
        )
    return answer(422, "invalid_input", f"invalid request: {said}", errors=errors)


def _invalid_value(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ValidationError)
    errors = [
        {"loc": [str(p) for p in e["loc"]], "msg": _said(e["msg"]), "type": e["type"]}
        for e in exc.errors()
    ]
    said = "; ".join(f"{'.'.join(e['loc']) or exc.title}: {e['msg']}" for e in errors[:5])
    return answer(422, "invalid_input", f"invalid {said}", errors=errors)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    asked = f"{request.method} {request.url.path[:200]}"
    if status == 404 and message == "Not Found":
        message = f"no such endpoint: {asked}; see /api/v1/docs for the API's routes"
    if status == 400 and "parsing the body" in message:
        # FastAPI's answer to a body that is not JSON text: bad input like any other
        status, message = 422, "the body is not JSON in UTF-8; send a JSON object"
    response = answer(status, _HTTP_CODES.get(status, f"http_{status}"), message)
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    if status == 405:
        allowed = ", ".join(allowed_methods(request))
        response = answer(405, "method_not_allowed", f"{asked}: this path takes {allowed} only")
        response.headers["Allow"] = allowed
    return response


def allowed_methods(request: Request) -> list[str]:
    """Every method some route takes at this path (Starlette names only the first route's).
    Each method is tried: an included router (FastAPI 0.165+) names no methods of its own."""
    found: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Mount):
            continue  # the static files: a folder, not an API route
        for method in METHODS:
            match, _ = route.matches({**request.scope, "method": method})
            if match is Match.FULL:
                found.add(method)
    return sorted(found)


def _store_error(request: Request, exc: Exception) -> JSONResponse:
    """The store's errors (`StoreError`): the database's words go to the log, not the client."""
    assert isinstance(exc, StoreError)
    if isinstance(exc, UnstorableValue):
        # the checks before the store should have caught it: log it as the bug it is
        log.error("a value reached the database that it refused: %s", exc.message)
        return answer(422, "invalid_input", "a value is out of range or cannot be stored")
    if isinstance(exc, StoreConflict):
        log.warning("the database refused a write: %s", exc.message)
        return answer(409, "conflict", "the write conflicts with what is stored; look again")
    if isinstance(exc, StoreBusy):
        log.warning("too many requests at once: %s", exc.message)
        # the pool's own: a store given an engine of its own waits as long as it does
        waited = exc.waited_s
        if waited is None:
            waited = request.app.state.client.settings.database_pool_timeout_s
        wait = busy_retry_s(waited)
        response = answer(
            503,
            "server_busy",
            "the server is busy: every connection it has to its database was in use; try "
            f"again in {wait} s",
            retry_after_s=wait,
        )
        response.headers["Retry-After"] = str(wait)
        return response
    log.warning("database error: %s", exc.message)
    return answer(
        503, "database_unavailable", "the database did not answer as expected; try again shortly"
    )


def _archive_missing(_: Request, exc: Exception) -> JSONResponse:
    """The session is archived but its archive cannot be read: the server's fault, which an
    operator mends (`tickwork runbook retention`); where it looked goes to the log, not
    the client."""
    assert isinstance(exc, ArchiveMissing)
    log.warning("archive unreadable: %s", exc.message)
    session = f"session {exc.session_id}" if exc.session_id else "the session"
    return answer(
        503,
        "archive_missing",
        f"{session} is archived, but the server cannot read it back from its archive: an "
        "operator must point TICKWORK_RETENTION_ARCHIVE_URL at the archive it was written to, "
        "or put that archive back (the server log says where it looked; `tickwork runbook "
        "retention`)",
    )


def _bug(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error", exc_info=exc)
    return answer(500, "internal", f"unexpected {type(exc).__name__}; the server log has it")


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(TickworkError, _tickwork_error)
    app.add_exception_handler(QuotaExceeded, _quota_exceeded)
    app.add_exception_handler(SessionNotFound, _session_not_found)
    app.add_exception_handler(StoreError, _store_error)
    app.add_exception_handler(ArchiveMissing, _archive_missing)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(ValidationError, _invalid_value)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _bug)
