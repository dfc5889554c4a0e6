"""A session's events live, as Server-Sent Events.

Each event goes out as `id: <event id>`, `event: <kind>`, `data: <JSON>`; a client that
reconnects sends the last id it saw as `Last-Event-ID` (browsers' EventSource does it by
itself) and gets what came after it, nothing twice. Ids are the store's event ids, so a
resume works across servers. When the session has finished and every event is out, an
`end` event carries its status and the stream closes. When the token stops reading the
session meanwhile (revoked, its roles taken, moved to another tenant), an `error` event
says so, as the API's error body, and the stream closes.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from tickwork import views
from tickwork.fsm.values import Head

from .auth import READING, Reader, Tokens, bearer_token
from .errors import ApiError, documented
from .limits import MAX_INT
from .sessions import Client, SessionId
from .tenancy import seen_head

router = APIRouter(
    prefix="/api/v1", tags=["sessions"], responses=documented(401, 403, 404, 422, 503)
)

#: events read per query; a backlog longer than this goes out in several reads
BATCH = 500
#: browsers wait this long (ms) before reconnecting a dropped stream
RETRY_MS = 2000


def frame(event_id: int, kind: str, data: object) -> str:
    return f"id: {event_id}\nevent: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


@dataclass(frozen=True)
class Refusal:
    """Why an open stream stops before its session ends: the answer a request with its
    token would now get (its status, the error table's code, what to do)."""

    status: int
    code: str
    message: str

    def frame(self, last_id: int) -> str:
        """The closing `error` frame: the error body, its status and the last event id
        given, for a stream followed again (with another token) to go on from."""
        said = {"code": self.code, "status": self.status, "message": self.message}
        return frame(last_id, "error", {**said, "last_id": last_id})


@router.get(
    "/sessions/{session_id}/stream",
    summary="Follow a session's events live (Server-Sent Events)",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": (
                "`id`/`event`/`data` frames; `end` when it has finished, `error` (the error "
                "body) if the token stops reading it meanwhile"
            ),
        }
    },
)
async def stream(
    session_id: SessionId,
    request: Request,
    client: Client,
    who: Reader,
    after: Annotated[
        int | None,
        Query(
            ge=0,
            le=MAX_INT,
            description=(
                "Start after this event id (the Last-Event-ID header wins) [default: 0, all]"
            ),
        ),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            # in the schema, checked below: the validator's answer quoted the pattern
            json_schema_extra={"pattern": r"^\s*[0-9]{0,18}\s*$"},
            description="The last event id you have (a browser's EventSource sends it).",
        ),
    ] = None,
) -> StreamingResponse:
    start = after or 0
    if last_event_id is not None and last_event_id.strip():
        given = last_event_id.strip()
        if not (given.isascii() and given.isdigit() and int(given) <= MAX_INT):
            raise ApiError(
                422,
                "invalid_input",
                f"Last-Event-ID must be an event id (a number), got {last_event_id!r}: send "
                "the id of the last event the stream gave you, or no header to start over",
            )
        start = int(given)
    store = client.store
    # 404 before the stream starts: no such session, or not the caller's to see
    await anyio.to_thread.run_sync(
        functools.partial(seen_head, client, who, session_id, archived=False)
    )
    settings = request.app.state.api_settings
    poll, heartbeat = settings.api_stream_poll_s, settings.api_stream_heartbeat_s
    tokens: Tokens = request.app.state.tokens
    token = bearer_token(request.scope) or ""

    def refusal(head: Head) -> Refusal | None:
        """Why the token no longer reads this session, as a request with it would now be
        answered; None while it does. A stream may last days, and the tokens file may have
        revoked the token, taken its roles or moved it meanwhile."""
        now = tokens.find(token)
        if now is None:
            return Refusal(
                401,
                "invalid_token",
                "the token this stream was opened with was revoked (the server's tokens file "
                "no longer holds it); ask an operator for a token and follow the session again",
            )
        if not now.holds(READING):
            return Refusal(
                403,
                "forbidden",
                f"{now.name}'s token no longer holds a role that reads sessions; ask an "
                "operator for the one you need and follow the session again",
            )
        if not now.sees(head.tenant, head.submitted_by):
            return Refusal(
                404,
                "session_not_found",
                f"{now.name}'s token no longer sees session {session_id} (the tokens file "
                "moved it to another tenant, or to its own sessions only)",
            )
        return None

    def look() -> tuple[Head, Refusal | None]:
        head = store.get(session_id)
        return head, refusal(head)

    async def frames() -> AsyncIterator[str]:
        last, quiet_since = start, time.monotonic()
        yield f"retry: {RETRY_MS}\n\n"
        while not await request.is_disconnected():
            # the head first: the events read after it include all of its changes
            head, refused = await anyio.to_thread.run_sync(look)
            if refused is not None:  # said before closing: a reconnect would only be refused
                yield refused.frame(last)
                return
            batch = await anyio.to_thread.run_sync(store.events_after, session_id, last, BATCH)
            for event_id, event in batch:
                last = event_id
                yield frame(event_id, event.kind.value, views.event(event_id, event))
            if len(batch) == BATCH:
                continue
            if batch:
                quiet_since = time.monotonic()
            elif head.status.terminal:
                yield frame(last, "end", {"status": head.status.value, "last_id": last})
                return
            elif time.monotonic() - quiet_since >= heartbeat:
                quiet_since = time.monotonic()
                yield ": still here\n\n"
            await anyio.sleep(poll)

    return StreamingResponse(
        frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
