"""Session endpoints: submit, list, show, events, decide, cancel, fork, and the approvals queue."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse
from pydantic import WithJsonSchema

from tickwork import parsing, views
from tickwork.client import Tickwork
from tickwork.fsm.errors import AlreadyDecided
from tickwork.fsm.outcomes import Outcome, outcome_of
from tickwork.fsm.people import MAX_NAME, NAME_PATTERN
from tickwork.fsm.tenants import TENANT_PATTERN
from tickwork.fsm.values import ErrorCode, EventKind, Head, Session, Status
from tickwork.parsing import ID_CHARS_SAID, ID_PREFIX_PATTERN, MAX_SESSION_ID, MIN_ID_PREFIX
from tickwork.views import waiting_view

from . import bodies, retries
from .answers import EventPage, Identity, Listed, ListedArchived, SessionView, Waiting
from .auth import Approver, Caller, Canceller, Operator, Reader, Submitter
from .errors import ApiError, documented, documented_beside_text
from .limits import MAX_INT
from .metrics import DECISION_WAIT, DECISIONS
from .models import allowed_model
from .tenancy import check_named_tenant, seen_forks, seen_head, session_filters, submit_tenant

router = APIRouter(prefix="/api/v1", responses=documented(401, 403, 422, 503))
#: what a route that takes a body or a session id may answer besides
CHANGES = documented(404, 409, 413)
#: a fork is a new session of the tenant: over one of its quotas, 429 as a submit
FORKS = {**retries.CREATED, **documented(404, 409, 413, 429)}
FOUND = documented(404)
#: the listing's filters the archive's index cannot answer (it keeps no error code, outcome
#: nor a lookup by the start of an id; a session's forks, archived too: /sessions/{id}/forks)
NOT_ARCHIVED = ("error_code", "outcome", "parent_id", "id_prefix")

SessionId = Annotated[str, Path(description="The session id.", max_length=64)]
CallId = Annotated[str, Path(description="The call id, e.g. s3c0.", max_length=64)]
#: the start of a session id as the schema states it; checked by `parsing.id_prefix`, whose
#: refusal says what was wrong in words (pydantic's would only quote the pattern)
IdPrefix = Annotated[
    str,
    WithJsonSchema(
        {
            "type": "string",
            "pattern": ID_PREFIX_PATTERN,
            "minLength": MIN_ID_PREFIX,
            "maxLength": MAX_SESSION_ID,
        }
    ),
]


def get_client(request: Request) -> Tickwork:
    return request.app.state.client  # type: ignore[no-any-return]


Client = Annotated[Tickwork, Depends(get_client)]


class DiffResponse(PlainTextResponse):
    """A patch as text: the schema states its 200 as `text/x-diff` only (a route's default
    class would add an `application/json` body, which a generated client parses as JSON)."""

    media_type = "text/x-diff"


@router.get(
    "/me",
    tags=["auth"],
    summary="Who the token belongs to (any token, with or without roles)",
    response_model=None,
    responses={200: {"model": Identity, "description": "The token's holder"}},
)
def me(who: Caller) -> dict[str, Any]:
    return {
        "name": who.name,
        "roles": sorted(who.roles),
        "tenant": who.tenant,
        "own_only": who.own_only,
    }


@router.post(
    "/sessions",
    status_code=201,
    response_model=Head,
    tags=["sessions"],
    summary="Submit a session into the token's tenant; the token's name is recorded as "
    "`submitted_by`",
    responses={**retries.CREATED, **documented(409, 413, 429, 502)},
)
def submit(
    body: bodies.Submit,
    client: Client,
    request: Request,
    response: Response,
    who: Submitter,
    _key: retries.Key = None,
) -> Head:
    settings = client.settings
    if ":" in body.kind and body.kind not in settings.imports:
        raise ApiError(
            422,
            "unknown_kind",
            f"job kind {body.kind!r} is not one this deployment names; use a "
            "built-in kind (repair) or one listed in TICKWORK_IMPORTS",
        )
    model = allowed_model(body.model, request.app.state.api_settings)
    tenant = submit_tenant(who, body.tenant)

    def same(head: Head) -> bool:
        return (head.tenant, head.submitted_by, head.kind, head.parent_id) == (
            tenant,
            who.name,
            body.kind,
            None,
        ) and head.input == body.input

    def make(session_id: str | None) -> Head:
        return client.submit(
            body.kind,
            body.input,
            model=model,
            budgets=body.budgets,
            session_id=session_id,
            price=body.price,
            context_window=body.context_window,
            priority=body.priority,
            concurrency_key=body.concurrency_key,
            max_per_key=body.max_per_key,
            trusted=False,
            submitted_by=who.name,
            tenant=tenant,
        )

    head = retries.make_once(
        client,
        request,
        response,
        asked=body.id,
        keyed=lambda key: retries.keyed_id(key, what="submit", tenant=tenant, by=who.name),
        same=same,
        make=make,
    )
    return created(response, head)


def created(response: Response, head: Head) -> Head:
    """The new session, its URL in `Location` (a 201's)."""
    response.headers["Location"] = f"/api/v1/sessions/{quote(head.id, safe='')}"
    return head


@router.get(
    "/sessions",
    response_model=list[Listed] | list[ListedArchived],
    tags=["sessions"],
    summary="List sessions, newest first",
)
def list_sessions(
    client: Client,
    who: Reader,
    status: Annotated[list[Status] | None, Query(description="Repeatable.")] = None,
    kind: Annotated[
        str | None,
        Query(
            max_length=200,
            description="Only sessions of this job kind; 422 `unknown_kind` (naming the "
            "kinds the server knows) for one no session has and the server knows not.",
        ),
    ] = None,
    error_code: ErrorCode | None = None,
    outcome: Annotated[
        Outcome | None, Query(description="Only completed repairs with this outcome.")
    ] = None,
    submitted_by: Annotated[
        str | None,
        Query(
            max_length=MAX_NAME,
            pattern=NAME_PATTERN,
            description="Only sessions this person submitted (the token's name, as the "
            "session's `submitted_by` shows it; exact).",
        ),
    ] = None,
    parent_id: Annotated[
        str | None, Query(max_length=64, description="Only the forks of this session.")
    ] = None,
    tenant: Annotated[
        str | None,
        Query(
            max_length=64,
            pattern=TENANT_PATTERN,
            description="Only this tenant's sessions (an admin's filter; another token may "
            "name only its own tenant: 403 for another).",
        ),
    ] = None,
    id_prefix: Annotated[
        IdPrefix | None,
        Query(
            description=f"Only sessions whose id starts with this ({MIN_ID_PREFIX} to "
            f"{MAX_SESSION_ID} of the characters of an id, {ID_CHARS_SAID}; case-sensitive): "
            "how a client finds the "
            "session a start of an id names (`tickwork --server URL show 3f9a0c`); 422 "
            "`invalid_input` naming `id_prefix` for another. One session listed is the "
            "one it names; more say it is ambiguous.",
        ),
    ] = None,
    archived: Annotated[
        bool,
        Query(
            description="true: the sessions retention archived instead, the latest archived "
            "first, from the archive's index (no archive is read), as `tickwork ls "
            "--archived` lists them: their rows of the index, not heads. Filtered by "
            "`status`, `kind`, `submitted_by` and `tenant` only: 422 `invalid_input` for "
            f"{', '.join(f'`{f}`' for f in NOT_ARCHIVED)}.",
        ),
    ] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
) -> list[Listed] | list[ListedArchived]:
    if id_prefix is not None:
        id_prefix = parsing.id_prefix(id_prefix)
    check_named_tenant(who, tenant, "sessions")
    if archived:  # refused whatever the token sees: the request is wrong, not its answer
        _refuse_with_archived(
            dict(error_code=error_code, outcome=outcome, parent_id=parent_id, id_prefix=id_prefix)
        )
    scope = session_filters(who, submitted_by)
    if scope is None:
        return []
    if who.admin and tenant:
        scope["tenant"] = tenant
    # the kinds an own-only token may learn of are its own sessions' only
    own = scope["submitted_by"] if who.own_only and not who.admin else None
    if archived:
        entries = client.archived_sessions(
            status=[s.value for s in status or ()], kind=kind, limit=limit, offset=offset, **scope
        )
        if kind and not entries and offset == 0:
            known_kind(client, kind, scope.get("tenant"), own)
        return [ListedArchived.model_validate(e) for e in entries]
    heads = client.sessions(
        status=[s.value for s in status or ()],
        kind=kind,
        error_code=error_code.value if error_code else None,
        outcome=outcome.value if outcome else None,
        parent_id=parent_id,
        id_prefix=id_prefix,
        limit=limit,
        offset=offset,
        **scope,
    )
    if kind and not heads and offset == 0:
        known_kind(client, kind, scope.get("tenant"), own)
    return [Listed.model_construct(**dict(h), outcome=outcome_of(h.result)) for h in heads]


def _refuse_with_archived(given: dict[str, object]) -> None:
    """422 `invalid_input` naming a filter given with `archived` that the index cannot
    answer, and what to do instead."""
    named = [name for name in NOT_ARCHIVED if given.get(name) is not None]
    if named:
        raise ApiError(
            422,
            "invalid_input",
            f"`{named[0]}` does not go with `archived` (the archive's index keeps only a "
            "session's status, kind, tenant and submitter): filter by those, or by "
            "`status=failed` for the failed ones, then open a session by its id; a session's "
            "forks, archived or not, are at /api/v1/sessions/{id}/forks",
        )


def known_kind(client: Tickwork, kind: str, tenant: str | None, own: str | None) -> None:
    """422 `unknown_kind` for a misspelt kind filter, naming the kinds the server knows, as
    the CLI's `ls --kind` (a kind of no session the caller sees, but the server's or of a
    session of the caller's tenant stored, lists nothing). The name is never imported, and
    another tenant's sessions say nothing of it; for an own-only token (`own`: its name)
    neither do the others' of its tenant, live or archived."""
    from tickwork.worker.jobs import unknown_kind

    why = unknown_kind(
        client.settings.imports, kind, client.store, tenant=tenant, submitted_by=own, trusted=False
    )
    if why is not None:
        raise ApiError(422, "unknown_kind", why)


@router.get(
    "/sessions/{session_id}",
    tags=["sessions"],
    summary="A session as a timeline (the JSON of `tickwork show --json`), with who holds "
    "its lease, its forks, what it was forked from with its patch, and the tree of child "
    "sessions it belongs to",
    response_model=None,
    responses={200: {"model": SessionView, "description": "The session"}, **FOUND},
)
def show(session_id: SessionId, client: Client, who: Reader) -> dict[str, Any]:
    seen_head(client, who, session_id, archived=False)  # live only: docs/REMOTE.md
    session = client.load(session_id)
    return views.shown(
        session,
        lease=views.lease(client.store.lease(session_id), now=datetime.now(UTC)),
        found_forks=seen_forks(client, who, client.forks(session_id)),
        # a fork of a fork runs under every patch of its chain, as `dlq show` lists them
        earlier=client.earlier_patches(session, sees=who.sees),
        # the tree it belongs to (docs/DESIGN.md section 16): its root, and every child's
        # status (only what the caller may see: children inherit the tenant and submitter)
        tree=client.tree(session_id, sees=lambda h: who.sees(h.tenant, h.submitted_by)),
    )


@router.get(
    "/sessions/{session_id}/patch",
    tags=["sessions"],
    summary="The session's patch against its source (the text of `tickwork patch`)",
    response_model=None,
    response_class=DiffResponse,
    # the router's errors again, as JSON: under this class a `model` would be text/x-diff
    responses={
        200: {"description": "A git-style unified diff"},
        **documented_beside_text(401, 403, 404, 422, 503),
    },
)
def patch(session_id: SessionId, client: Client, who: Reader) -> DiffResponse:
    """404 `no_patch`, saying why, when the session changed no files or has none."""
    seen_head(client, who, session_id)
    return DiffResponse(client.patch(session_id, required=True))


@router.get(
    "/sessions/{session_id}/events",
    tags=["sessions"],
    summary="A page of the session's events after an event id",
    response_model=None,
    responses={200: {"model": EventPage, "description": "The page"}, **FOUND},
)
def events(
    session_id: SessionId,
    client: Client,
    who: Reader,
    after: Annotated[int, Query(ge=0, le=MAX_INT, description="The last event id you have.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
) -> dict[str, Any]:
    seen_head(client, who, session_id, archived=False)  # events are live rows
    page = client.events(session_id, after=after, limit=limit)  # the local client's page
    return {
        "status": page.status.value,
        "events": [frame.data for frame in page.events],
        "last_id": page.last_id,
    }


@router.post(
    "/sessions/{session_id}/calls/{call_id}/decision",
    response_model=Head,
    tags=["approvals"],
    summary="Approve, edit, reject or give the output of a call",
    responses=CHANGES,
)
def decide(
    session_id: SessionId, call_id: CallId, body: bodies.Decide, client: Client, who: Approver
) -> Head:
    seen_head(client, who, session_id, archived=False)
    try:
        head = client.decide(
            session_id,
            call_id,
            body.kind,
            approver=who.name,
            fingerprint=body.fingerprint,
            comment=body.comment,
            arguments=body.arguments,
            feedback=body.feedback,
            output=body.output or "",
        )
    except AlreadyDecided as exc:
        first = client.load(session_id).decision(call_id)
        details = (
            {}
            if first is None
            else {
                "decided_by": first.approver,
                "decided_at": views.date(first.at),
                "decision": first.kind.value,
            }
        )
        raise ApiError(409, "already_decided", exc.message, **details) from None
    DECISIONS.labels(body.kind.value).inc()
    _observe_wait(client.load(session_id), call_id)
    return head


def _observe_wait(session: Session, call_id: str) -> None:
    decided = session.decision(call_id)
    asked = [
        e.at
        for e in session.events
        if e.kind is EventKind.APPROVAL_REQUESTED and decided is not None and e.at <= decided.at
    ]
    if decided is not None and asked:
        DECISION_WAIT.observe((decided.at - asked[-1]).total_seconds())


@router.post(
    "/sessions/{session_id}/cancel",
    response_model=Head,
    tags=["sessions"],
    summary="Cancel: at once if waiting for a person, else at its next tick",
    responses=documented(404, 409, 413),
)
def cancel(
    session_id: SessionId, client: Client, who: Canceller, body: bodies.Cancel | None = None
) -> Head:
    seen_head(client, who, session_id, archived=False)
    return client.cancel(session_id, by=who.name)


@router.post(
    "/sessions/{session_id}/fork",
    status_code=201,
    response_model=Head,
    tags=["sessions"],
    summary="Fork a session from step K with a patch",
    responses=FORKS,
)
def fork(
    session_id: SessionId,
    body: bodies.Fork,
    client: Client,
    request: Request,
    response: Response,
    who: Operator,
    _key: retries.Key = None,
) -> Head:
    seen_head(client, who, session_id)
    return created(response, run_fork(client, session_id, body, request, response, by=who.name))


def run_fork(
    client: Tickwork,
    session_id: str,
    body: bodies.Fork,
    request: Request,
    response: Response,
    *,
    by: str,
) -> Head:
    # the model a submit over the API may name, and no other (a script only from the roots)
    model = allowed_model(body.model, request.app.state.api_settings)

    def same(head: Head) -> bool:
        return (head.parent_id, head.fork_step, head.submitted_by) == (
            session_id,
            body.from_step,
            by,
        )

    def make(new_id: str | None) -> Head:
        return client.fork(
            session_id,
            from_step=body.from_step,
            by=by,
            system_prompt=body.system_prompt,
            append_instruction=body.append_instruction,
            tool_outputs=body.tool_outputs,
            budgets=body.budgets,
            new_id=new_id,
            again=body.again,
            state=body.state,
            model=model,
            price=body.price,
            trusted=False,
            context_window=body.context_window,
            priority=body.priority,
            concurrency_key=body.concurrency_key,
            max_per_key=body.max_per_key,
        )

    return retries.make_once(
        client,
        request,
        response,
        asked=body.id,
        # the parent names the tenant: a fork stays in its parent's
        keyed=lambda key: retries.keyed_id(key, what="fork", tenant="", by=by, parent=session_id),
        same=same,
        make=make,
    )


@router.get(
    "/approvals",
    tags=["approvals"],
    summary="Sessions waiting for a person, oldest first, with their waiting calls",
    response_model=None,
    responses={200: {"model": list[Waiting], "description": "Oldest first, at most `limit`"}},
)
def approvals(
    client: Client,
    who: Reader,
    limit: Annotated[
        int,
        Query(ge=1, le=200, description="At most this many: those that have waited longest."),
    ] = 50,
) -> list[dict[str, Any]]:
    scope = session_filters(who)
    assert scope is not None  # no submitter asked for
    # the `limit` that have waited longest, by the key they are sorted by below: not the
    # newest, the first made, nor the least recently updated (a decision on one of several
    # waiting calls updates the session, which waits on)
    heads = client.sessions(
        status=[Status.WAITING_APPROVAL.value], limit=limit, waited_longest_first=True, **scope
    )
    found = []
    for head in heads:
        try:
            found.append(waiting_view(client.load(head.id), client))
        except LookupError:
            continue  # pruned meanwhile
    return sorted(found, key=lambda w: w["waiting_since"] or "")


@router.get(
    "/approvals/{session_id}",
    tags=["approvals"],
    summary="One session's calls waiting for a person, with previews",
    response_model=None,
    responses={200: {"model": Waiting, "description": "Its waiting calls"}, **FOUND},
)
def approval(
    session_id: SessionId,
    client: Client,
    who: Reader,
    preview: Annotated[
        bool,
        Query(
            description="false: each call's `preview` is null, no file is read nor diffed "
            "(a client that reads only the calls' fingerprints)."
        ),
    ] = True,
) -> dict[str, Any]:
    seen_head(client, who, session_id, archived=False)
    return waiting_view(client.load(session_id), client, previewed=preview)
