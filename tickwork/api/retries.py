"""Retrying a submit or a fork with an `Idempotency-Key` (docs/API.md, Retrying a request).

A key names the session a request makes: its id is derived from the key, the tenant, the
caller and (a fork) the parent, so a retry of a request that was stored meets the session
the first try made and is answered with it (201, `Idempotent-Replayed: true`, the same
`Location`, the session's head as it is now). Nothing is stored besides the session: a key
lasts as long as its session is live. A key used again for another request (another kind
or input, another step) is refused. A submit and a fork (of a session or of a dead letter)
write their session through `make_once`, which does all of this, with or without a key."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated

from fastapi import Header, Request, Response
from pydantic import WithJsonSchema

from tickwork.client import Tickwork
from tickwork.fsm.errors import InvalidInput, SessionExists, StoreConflict
from tickwork.fsm.values import Head

from .bodies import IDEMPOTENCY_HEADER as HEADER
from .bodies import IDEMPOTENCY_KEY as KEY
from .errors import ApiError

#: the header as a route's parameter, for the schema (`key_of` reads and checks it)
Key = Annotated[
    str | None,
    WithJsonSchema({"type": "string", "pattern": f"^{KEY.pattern}$"}),
    Header(
        alias=HEADER,
        description="Makes a retry of this request safe: one made already is answered with "
        "the session it made (201, `Idempotent-Replayed: true`); 1 to 255 visible ASCII "
        "characters, e.g. a uuid made for the request (docs/API.md (`tickwork docs api`), "
        "Retrying a request).",
    ),
]
#: a submit's or fork's 201 as the schema states it: the new session's head, and its headers
CREATED = {
    201: {
        "description": "Stored: the new session's head (a replay: as it is now)",
        "headers": {
            "Location": {
                "description": "The new session: /api/v1/sessions/{id}",
                "schema": {"type": "string"},
            },
            "Idempotent-Replayed": {
                "description": "`true` when a retry with the same Idempotency-Key was "
                "answered with the session the first try made; absent otherwise.",
                "schema": {"type": "string", "enum": ["true"]},
            },
        },
    }
}
#: the namespace of the ids keys give (uuid5 of it and the request's owner and key)
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://tickwork.invalid/idempotency-key")


def key_of(request: Request) -> str | None:
    """The request's key, or None; 422 for one no client should send."""
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not KEY.fullmatch(key):
        raise ApiError(
            422,
            "invalid_input",
            f"the {HEADER} header must be 1 to 255 visible ASCII characters (a uuid you make "
            "for the request, sent again with its retries)",
        )
    return key


def keyed_id(key: str, *, what: str, tenant: str, by: str, parent: str = "") -> str:
    """The id of the session a request with `key` makes: one per tenant, caller, route and
    (a fork) parent, so two callers' keys never meet."""
    return uuid.uuid5(_NAMESPACE, "\n".join((what, tenant, by, parent, key))).hex


def make_once(
    client: Tickwork,
    request: Request,
    response: Response,
    *,
    asked: str | None,
    keyed: Callable[[str], str],
    same: Callable[[Head], bool],
    make: Callable[[str | None], Head],
) -> Head:
    """The session `make(id)` makes (a submit's, a fork's), or, with an Idempotency-Key,
    the one an earlier try of the request made: looked for before the write and again when
    the write meets a session made at the same moment. The id is `asked` (the body's), else
    `keyed(key)` with a key, else the store's choice; `same`: whether a session found under
    it is this request's. A taken id is 409 `session_exists`; a key's session made by
    another request 422 `idempotency_key_reused`."""
    key = key_of(request)
    session_id = asked if key is None else asked or keyed(key)

    def again() -> Head | None:
        assert session_id is not None  # a key names the id
        other = exists(session_id) if asked else reused(session_id)
        return replayed(client, session_id, response, same=same, other=other)

    if key is not None and (first := again()):
        return first
    try:
        return make(session_id)
    except SessionExists:
        if key is not None and (first := again()):  # a try at the same moment made it
            return first
        raise exists(session_id) from None
    except (StoreConflict, InvalidInput):
        _taken(client, session_id)
        raise


def exists(session_id: str | None) -> ApiError:
    """409 `session_exists`, the same for an id of a live session or an archived one, of
    any tenant: it reads nothing of the session (docs/API.md)."""
    return ApiError(
        409,
        "session_exists",
        f"a session {session_id!r} exists already; choose another id or leave it out for "
        "a random one (if an earlier try of this request was stored, it is that session: "
        f"GET /api/v1/sessions/{session_id})",
    )


def _taken(client: Tickwork, session_id: str | None) -> None:
    """409 if the id asked for belongs to a session already."""
    if session_id is None:
        return
    try:
        client.get(session_id)
    except LookupError:
        return
    raise exists(session_id)


def replayed(
    client: Tickwork,
    session_id: str,
    response: Response,
    *,
    same: Callable[[Head], bool],
    other: ApiError,
) -> Head | None:
    """The session an earlier try of this request made, answered as it was; None if there
    is none live; `other` if the id is another request's session."""
    try:
        head = client.get(session_id)
    except LookupError:
        return None
    if not same(head):
        raise other
    response.headers["Idempotent-Replayed"] = "true"
    return head


def reused(session_id: str) -> ApiError:
    """422 `idempotency_key_reused`: the key's session was made by another request."""
    return ApiError(
        422,
        "idempotency_key_reused",
        f"this {HEADER} was sent with another request, which made session {session_id}; "
        "a new request takes a new key",
    )
