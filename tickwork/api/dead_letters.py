"""Dead-letter endpoints: list, show (with the session's timeline and forks), stats, a
timeline by code, export (JSON Lines, CSV, Parquet), fork, resolve, dismiss.

Any role reads dead letters, as any role reads the failed session itself; forking,
resolving and dismissing one take the operator role."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import IO, Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BeforeValidator

from tickwork import exports, parsing, views
from tickwork.fsm.errors import ConfigurationError, SessionArchived, SessionNotFound
from tickwork.fsm.tenants import TENANT_PATTERN
from tickwork.fsm.values import ErrorCode, Head, Status
from tickwork.store import dead_letters as dl

from . import bodies, retries
from .answers import LetterShown, LetterStats, LetterTimeline, LetterView
from .auth import Operator, Principal, Reader
from .bodies import Closing
from .errors import ApiError, ErrorBody, documented
from .limits import MAX_INT
from .sessions import CHANGES, FORKS, FOUND, Client, created, known_kind, run_fork
from .tenancy import letter_filters, seen_forks, seen_head, seen_letter

router = APIRouter(
    prefix="/api/v1/dead-letters",
    tags=["dead letters"],
    responses=documented(401, 403, 422, 503),
)

Key = Annotated[
    str,
    Path(
        description="The dead-letter number, or the failed session's id; `#12` (encoded "
        "`%2312`) is number 12 only, and digits alone naming both a number and a session "
        "whose id is those digits, two letters, are refused (422) naming both.",
        max_length=64,
    ),
]
Since = Annotated[
    str | None,
    Query(
        alias="since",
        max_length=100,
        # stated, and checked by parsing.since, whose refusal says what to write
        json_schema_extra={"pattern": parsing.SINCE_PATTERN},
        description="Only since a time or a duration ago. A time is RFC 3339 "
        "(2026-01-31T12:00:00Z) whose offset may be left out (naive: UTC) and whose time may "
        "be (2026-01-31: its midnight UTC); a duration is a number and a unit: 90s, 30m, 2h, "
        "3d, 1w, 1.5h (at most 10 digits of seconds, 9 of minutes, 7 of hours, 5 of days or "
        "weeks). Empty: no limit.",
    ),
]

KindFilter = Annotated[
    str | None,
    Query(
        max_length=200,
        description="Only dead letters of this job kind; 422 `unknown_kind` (naming the "
        "kinds the server knows) for one no session has and the server knows not.",
    ),
]

#: an error code in any case, as the CLI's --code takes it: loop is LOOP
Code = Annotated[
    ErrorCode | None,
    BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v),
    Query(description="Only dead letters with this error code (any case)."),
]

Tenant = Annotated[
    str | None,
    Query(
        max_length=64,
        pattern=TENANT_PATTERN,
        description="Only this tenant's dead letters (an admin's filter; another token may "
        "name only its own tenant: 403 otherwise).",
    ),
]


def since(text: str | None) -> datetime | None:
    return parsing.since(text, now=datetime.now(UTC), name="since")


def find(client: Client, who: Principal, key: str) -> dl.DeadLetter:
    """By number (`#12`, URL-encoded `%2312`, by it only), or by session id; digits alone
    are either, refused (422) when both name letters `who` may see (`dead_letters.by_key`):
    another tenant's letter of that number says nothing, as if it were none."""

    def seen(lookup: int | str) -> dl.DeadLetter | None:
        try:
            return seen_letter(who, client.dead_letter(lookup), key)
        except dl.DeadLetterNotFound:
            return None

    letter = dl.by_key(key, numbered=seen, of_session=seen)
    if letter is None:
        raise _none_for(client, who, key)
    return letter


def _none_for(client: Client, who: Principal, key: str) -> dl.DeadLetterNotFound:
    """The 404 for a key that names no dead letter `who` sees: a session of theirs that has
    not failed, or that retention archived, is told so; anything else (another tenant's,
    none) as for a made-up id."""
    if not key.startswith("#"):
        try:
            head = seen_head(client, who, key, archived=False)
        except SessionArchived:  # one `who` sees: its dead letter went with it
            return dl.DeadLetterNotFound.archived(key)
        except SessionNotFound:
            return dl.DeadLetterNotFound.of(key)
        if head.status is not Status.FAILED:
            return dl.DeadLetterNotFound.not_failed(head.id, head.status.value)
    return dl.DeadLetterNotFound.of(key)


@router.get(
    "",
    summary="List dead letters, newest first",
    response_model=None,
    responses={200: {"model": list[LetterView], "description": "The dead letters"}},
)
def list_dead_letters(
    client: Client,
    who: Reader,
    code: Code = None,
    kind: KindFilter = None,
    since_: Since = None,
    unresolved: bool = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[
        int, Query(ge=0, le=MAX_INT, description="Skip this many (the pages before).")
    ] = 0,
    tenant: Tenant = None,
    session_id: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Only this session's dead letter (none or one), whatever its id: "
            "GET /dead-letters/{key} reads digits as a number too.",
        ),
    ] = None,
) -> list[dict[str, Any]]:
    scope = letter_filters(who, tenant)
    found = client.dead_letters(
        code=code.value if code else None,
        kind=kind,
        since=since(since_),
        unresolved=unresolved,
        limit=limit,
        offset=offset,
        session_id=session_id,
        **scope,
    )
    if kind and not found and offset == 0:
        known_kind(client, kind, scope["tenant"], scope["submitted_by"])
    return [views.dead_letter(d) for d in found]


@router.get(
    "/stats",
    summary="Counts by code, kind, model, last tool and error signature",
    response_model=None,
    responses={200: {"model": LetterStats, "description": "The counts"}},
)
def stats(
    client: Client,
    who: Reader,
    by: Annotated[
        str | None,
        Query(
            pattern="^(" + "|".join(dl.GROUPS) + ")$",
            description="Group by this only [default: every grouping].",
        ),
    ] = None,
    since_: Since = None,
    unresolved: Annotated[
        bool, Query(description="Only dead letters not yet forked, resolved or dismissed.")
    ] = False,
    tenant: Tenant = None,
) -> dict[str, Any]:
    start = since(since_)
    scope = letter_filters(who, tenant)
    grouped = {
        g: [
            _jsonable(r)
            for r in client.dead_letter_stats(by=g, since=start, unresolved=unresolved, **scope)
        ]
        for g in ([by] if by else dl.GROUPS)
    }
    total = sum(r["count"] for r in next(iter(grouped.values())))
    return {"since": views.date(start), "total": total, "by": grouped}


#: how far back the timeline reaches when no since is given
TIMELINE_SPAN = {"day": timedelta(days=29), "hour": timedelta(hours=47)}
#: bytes of a Parquet export kept in memory before it spills to a temporary file
SPOOL_BYTES = 8 << 20


@router.get(
    "/timeline",
    summary="Dead letters per day or hour by code (the page's chart), every bucket given",
    response_model=None,
    responses={200: {"model": LetterTimeline, "description": "The buckets and their counts"}},
)
def timeline(
    client: Client,
    who: Reader,
    bucket: Annotated[Literal["day", "hour"], Query(description="UTC days or hours.")] = "day",
    since_: Since = None,
    tenant: Tenant = None,
) -> dict[str, Any]:
    now = datetime.now(UTC)
    start = since(since_) or now - TIMELINE_SPAN[bucket]
    found = client.store.dead_letter_timeline(
        bucket=bucket, since=start, now=now, **letter_filters(who, tenant)
    )
    return {
        **found,
        "since": views.date(start),
        "buckets": [views.date(b) for b in found["buckets"]],
    }


@router.get(
    "/export",
    summary="Every dead letter matching, one row each, as JSON Lines, CSV or Parquet",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The export, oldest first; the columns are the same in every format.",
            "content": {f.media_type.split(";")[0]: {} for f in exports.Format},
        },
        501: {
            "model": ErrorBody,
            "description": "format=parquet, and pyarrow is not installed on the server",
        },
    },
)
def export(
    client: Client,
    who: Reader,
    form: Annotated[
        exports.Format,
        Query(alias="format", description="jsonl, csv or parquet (parquet needs pyarrow)."),
    ] = exports.Format.JSONL,
    code: Code = None,
    kind: KindFilter = None,
    since_: Since = None,
    unresolved: bool = False,
    snapshot: Annotated[
        bool, Query(description="Add each dead letter's session snapshot (JSON).")
    ] = False,
    tenant: Tenant = None,
) -> StreamingResponse:
    scope = letter_filters(who, tenant)
    if kind:  # the rows stream: a misspelt kind is refused before any is read
        known_kind(client, kind, scope["tenant"], scope["submitted_by"])
    try:
        exports.check(form, asked="format=parquet", served=True)
    except ConfigurationError as exc:
        raise ApiError(501, "parquet_unavailable", exc.message) from None
    rows = client.store.dead_letter_rows(
        code=code.value if code else None,
        kind=kind,
        since=since(since_),
        unresolved=unresolved,
        with_snapshot=snapshot,
        **scope,
    )
    headers = {
        "Content-Disposition": f'attachment; filename="dead-letters.{form.value}"',
        "Cache-Control": "no-store",
    }
    if not form.binary:
        chunks = exports.text_chunks(form, rows, with_snapshot=snapshot)
        return StreamingResponse(chunks, media_type=form.media_type, headers=headers)
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
    try:
        exports.write(form, rows, spool, with_snapshot=snapshot)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return StreamingResponse(_read(spool), media_type=form.media_type, headers=headers)


def _read(file: IO[bytes]) -> Iterator[bytes]:
    with file:
        while chunk := file.read(1 << 16):
            yield chunk


@router.get(
    "/{key}",
    summary="A dead letter with its session snapshot as a timeline, and its forks",
    response_model=None,
    responses={200: {"model": LetterShown, "description": "The dead letter"}, **FOUND},
)
def show(key: Key, client: Client, who: Reader) -> dict[str, Any]:
    letter = find(client, who, key)
    # every fork of the session, live or archived, that the caller may see
    return views.dead_letter_shown(
        letter,
        found_forks=seen_forks(client, who, client.forks(letter.session_id)),
        earlier=client.earlier_patches(letter.session(), sees=who.sees),
    )


@router.post(
    "/{key}/fork",
    status_code=201,
    response_model=Head,
    summary="Fork the dead letter's session with a patch; the dead letter is resolved",
    responses=FORKS,
)
def fork(
    key: Key,
    body: bodies.Fork,
    client: Client,
    request: Request,
    response: Response,
    who: Operator,
    _idempotency_key: retries.Key = None,
) -> Head:
    letter = find(client, who, key)
    return created(
        response, run_fork(client, letter.session_id, body, request, response, by=who.name)
    )


@router.post(
    "/{key}/resolve",
    summary="Mark the dead letter resolved without forking it",
    response_model=None,
    responses={200: {"model": LetterView, "description": "The dead letter, closed"}, **CHANGES},
)
def resolve(key: Key, body: Closing, client: Client, who: Operator) -> dict[str, Any]:
    return _close(client, key, dl.Closing.RESOLVED, body, who)


@router.post(
    "/{key}/dismiss",
    summary="Dismiss the dead letter: nothing is to be done",
    response_model=None,
    responses={200: {"model": LetterView, "description": "The dead letter, closed"}, **CHANGES},
)
def dismiss(key: Key, body: Closing, client: Client, who: Operator) -> dict[str, Any]:
    return _close(client, key, dl.Closing.DISMISSED, body, who)


def _close(
    client: Client, key: str, state: dl.Closing, body: Closing, who: Principal
) -> dict[str, Any]:
    letter = find(client, who, key)
    return views.dead_letter(
        client.close_dead_letter(letter.id, state=state, by=who.name, reason=body.reason)
    )


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    latest = row.get("latest")
    return {**row, "latest": views.date(latest) if isinstance(latest, datetime) else latest}
