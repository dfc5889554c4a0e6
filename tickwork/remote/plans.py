"""Every operation of the remote client, written once, as a plan: a generator that yields
the requests it needs (`Call`) or a pause (`Sleep`), is sent each answer, and returns the
operation's value.

`Client` and `AsyncClient` only carry out plans (`runner.py`), so the two never differ in
what they ask, how they read the answer or how long they wait. Bodies are the API's own
models (`tickwork.api.bodies`), so a bad value is refused here, with the same message the
server would give, before anything is sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel

from tickwork.api import bodies
from tickwork.api.answers import Listed, ListedArchived
from tickwork.api.bodies import Closing
from tickwork.api.inputs import RepairInput
from tickwork.events import EventPage, Streamed
from tickwork.fsm.errors import InvalidInput, SessionFinished
from tickwork.fsm.values import DecisionKind, ErrorCode, Head, Status
from tickwork.parsing import ended_otherwise, statuses, still
from tickwork.remote.errors import RemoteError
from tickwork.store.dead_letters import DeadLetter

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
#: what the API is served under
PREFIX = "/api/v1"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how its (2xx) answer is read."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Sleep:
    """A pause between two polls."""

    seconds: float


#: an operation: yields calls and pauses, gets each call's value back, returns its own
Plan = Generator[Call[Any] | Sleep, Any, T]


@dataclass(frozen=True)
class Identity:
    """Who the token belongs to."""

    name: str
    roles: tuple[str, ...]


def model(kind: type[M], data: Any) -> M:
    """`data` as `kind`, fields a newer server added left out (the models forbid extras)."""
    if isinstance(data, dict) and kind.model_config.get("extra") == "forbid":
        data = {k: v for k, v in data.items() if k in kind.model_fields}
    return kind.model_validate(data)


def _json(response: httpx.Response) -> Any:
    return response.json()


def _head(response: httpx.Response) -> Head:
    return model(Head, response.json())


def _path(*parts: str) -> str:
    from urllib.parse import quote

    return PREFIX + "".join("/" + quote(p, safe="") for p in parts)


def _body(shape: type[BaseModel], /, **values: Any) -> dict[str, Any]:
    """`values` checked by the API's model, as JSON, without what was left at its default."""
    given = {k: v for k, v in values.items() if v is not None}
    return shape.model_validate(given).model_dump(mode="json", exclude_unset=True)


def me() -> Plan[Identity]:
    data = yield Call("GET", _path("me"), _json)
    return Identity(str(data["name"]), tuple(data["roles"]))


def submit(
    kind: str,
    input: Mapping[str, Any] | RepairInput | None = None,
    *,
    model: str | None = None,
    budgets: Mapping[str, Any] | None = None,
    session_id: str | None = None,
    price: Sequence[float] | None = None,
    context_window: int | None = None,
    tenant: str | None = None,
    priority: int = 0,
    concurrency_key: str | None = None,
    max_per_key: int | None = None,
    idempotency_key: str | None = None,
) -> Plan[Head]:
    """Submit a session of job `kind` into the token's tenant (an admin token may name
    another `tenant`); the server records the token's name as its submitter. A repair's
    input may be a `RepairInput`. Over a tenant's quota: a RemoteError with code
    `quota_exceeded` (HTTP 429), its `details["quota"]` naming the quota. `priority`,
    `concurrency_key` and `max_per_key` order and limit its admission (a session beyond a
    limit waits `queued`). `idempotency_key` makes a retry safe: the same call again is
    answered with the session the first made."""
    data = input.model_dump(exclude_unset=True) if isinstance(input, RepairInput) else input
    body = _body(
        bodies.Submit,
        kind=kind,
        input=dict(data or {}),
        model=model,
        budgets=dict(budgets) if budgets else None,
        id=session_id,
        price=list(price) if price is not None else None,
        context_window=context_window,
        tenant=tenant,
        priority=priority or None,  # a server from before admission knows no priority
        concurrency_key=concurrency_key,
        max_per_key=max_per_key,
    )
    keyed = _keyed(idempotency_key)
    return (yield Call("POST", _path("sessions"), _head, json=body, headers=keyed))


def get(session_id: str) -> Plan[Listed]:
    """The session's head, with its outcome."""
    view = yield from timeline(session_id)
    return model(Listed, view["head"])


def timeline(session_id: str) -> Plan[dict[str, Any]]:
    """The session as a timeline: the document `tickwork show --json` prints (head, steps
    with calls, observations and decisions, totals, events, lease, forks)."""
    return (yield Call("GET", _path("sessions", session_id), _json))


def sessions(
    *,
    status: Iterable[Status | str] | str = (),
    kind: str | None = None,
    error_code: ErrorCode | str | None = None,
    outcome: str | None = None,
    submitted_by: str | None = None,
    parent_id: str | None = None,
    tenant: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> Plan[list[Listed]]:
    """Sessions, newest first; `submitted_by` a token's name, `parent_id` for the forks of
    a session, `tenant` one tenant's (an admin token's filter; another token may name only
    its own: RemoteError 403 for another). A `kind` the server knows not and no session
    has: RemoteError 422 `unknown_kind`, naming the kinds it knows."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    params["status"] = [s.value for s in statuses(status, what="status")]
    given = {
        "kind": kind,
        "error_code": error_code,
        "outcome": outcome,
        "submitted_by": submitted_by,
        "parent_id": parent_id,
        "tenant": tenant,
    }
    params.update({k: v for k, v in given.items() if v})
    found = yield Call("GET", _path("sessions"), _json, params=params)
    return [model(Listed, h) for h in found]


def archived_sessions(
    *,
    status: Iterable[Status | str] | str = (),
    kind: str | None = None,
    submitted_by: str | None = None,
    tenant: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> Plan[list[ListedArchived]]:
    """The sessions retention archived, the latest archived first, from the archive's index
    (`tickwork ls --archived`; `GET /sessions?archived=true`): their ids open with `patch`,
    `forks` and `fork`. `tenant` as for `sessions`."""
    params: dict[str, Any] = {"archived": "true", "limit": limit, "offset": offset}
    params["status"] = [s.value for s in statuses(status, what="status")]
    given = {"kind": kind, "submitted_by": submitted_by, "tenant": tenant}
    params.update({k: v for k, v in given.items() if v})
    found = yield Call("GET", _path("sessions"), _json, params=params)
    return [model(ListedArchived, a) for a in found]


def events(session_id: str, *, after: int = 0, limit: int = 1000) -> Plan[EventPage]:
    """A page of the session's events after event id `after`."""
    page = yield Call(
        "GET", _path("sessions", session_id, "events"), _json, {"after": after, "limit": limit}
    )
    found = tuple(Streamed(int(e["id"]), str(e["kind"]), e) for e in page["events"])
    return EventPage(Status(page["status"]), found, int(page["last_id"]))


def waiting(session_id: str) -> Plan[dict[str, Any]]:
    """A waiting session's calls with previews (the approvals page's card)."""
    return (yield Call("GET", _path("approvals", session_id), _json))


def patch(session_id: str) -> Plan[str]:
    """A repair session's patch against its source (404 `no_patch` says why it has none)."""
    return (yield Call("GET", _path("sessions", session_id, "patch"), lambda r: r.text))


def forks(session_id: str) -> Plan[list[dict[str, Any]]]:
    """The sessions forked from a live or an archived session, live or archived, oldest
    first: id, fork_step, status, created_at and `archived`."""
    return (yield Call("GET", _path("sessions", session_id, "forks"), _json))


def wait(
    session_id: str,
    *,
    until: Iterable[Status | str] | str = (),
    timeout: float | None = None,
    poll: float = 0.5,
) -> Plan[Listed]:
    """Poll the session until its status is one of `until` [default: any terminal one];
    SessionFinished at once for one finished in another status (as the local client's
    `wait`), TimeoutError after `timeout` seconds."""
    wanted = set(statuses(until, what="until"))
    started = time.monotonic()
    while True:
        head = yield from get(session_id)
        if head.status in wanted or (not wanted and head.status.terminal):
            return head
        if head.status.terminal:
            raise SessionFinished(ended_otherwise(session_id, head.status, wanted))
        if timeout is not None and time.monotonic() - started >= timeout:
            raise TimeoutError(
                still(session_id, head.status, wanted, timeout, by_default="a terminal status")
            )
        yield Sleep(poll)


def _fingerprint(calls: Iterable[Mapping[str, Any]], call_id: str) -> str | None:
    for call in calls:
        if call["call_id"] == call_id:
            return str(call["fingerprint"])
    return None


def _waiting_calls(session_id: str) -> Plan[dict[str, Any]]:
    """The session's waiting calls without their previews (no file read nor diffed for
    them); from a server that does not take `?preview` (422), with them."""
    path = _path("approvals", session_id)
    try:
        return (yield Call("GET", path, _json, {"preview": False}))
    except RemoteError as exc:
        if exc.status != 422 or "preview" not in exc.message:
            raise
    return (yield Call("GET", path, _json))


def refused_for(refused: RemoteError, who: Identity, role: str) -> RemoteError:
    """The server's 403 for a read an action of `role` made first (only a token of no role
    may not read), said as the action's need: not "reading needs a role"."""
    held = ", ".join(sorted(who.roles)) or "no role"
    return RemoteError(
        f"{who.name} holds {held}; this needs the {role} role",
        code=refused.code,
        status=refused.status,
        details=refused.details,
    )


def _seen_fingerprint(session_id: str, call_id: str) -> Plan[str]:
    """The call's fingerprint as the server has it now: read from the session's waiting
    calls, not its whole timeline (every step, call and event of a long session). A call
    not waiting is looked up in the timeline, so that the decision is refused in the
    server's words (decided already, cancelled, not waiting) as locally."""
    from tickwork.fsm.errors import CallNotFound

    try:
        card = yield from _waiting_calls(session_id)
    except RemoteError as exc:
        if exc.status != 403:
            raise
        # only a token of no role may not read: say what a decision needs, not reading
        raise refused_for(exc, (yield from me()), "approver") from None
    found = _fingerprint(card["calls"], call_id)
    if found is not None:
        return found
    view = yield from timeline(session_id)
    found = _fingerprint((c for step in view["steps"] for c in step["calls"]), call_id)
    if found is not None:
        return found
    awaiting = ", ".join(view["head"].get("awaiting") or ()) or "none"
    raise CallNotFound(f"session {session_id} has no call {call_id!r}; waiting: {awaiting}")


def decide(
    session_id: str,
    call_id: str,
    kind: DecisionKind | str,
    *,
    fingerprint: str | None = None,
    comment: str = "",
    arguments: Mapping[str, Any] | None = None,
    feedback: str = "",
    output: str | None = None,
) -> Plan[Head]:
    """Decide one waiting call as the token's person. `fingerprint` binds the decision to
    the call you saw; None reads the call's fingerprint as the server has it now."""
    if fingerprint is None:
        fingerprint = yield from _seen_fingerprint(session_id, call_id)
    body = _body(
        bodies.Decide,
        kind=DecisionKind(kind),
        fingerprint=fingerprint,
        comment=comment or None,
        arguments=dict(arguments) if arguments is not None else None,
        feedback=feedback or None,
        output=output,
    )
    path = _path("sessions", session_id, "calls", call_id, "decision")
    return (yield Call("POST", path, _head, json=body))


def approve(session_id: str, call_id: str, **kw: Any) -> Plan[Head]:
    return (yield from decide(session_id, call_id, DecisionKind.APPROVE, **kw))


def edit(session_id: str, call_id: str, arguments: Mapping[str, Any], **kw: Any) -> Plan[Head]:
    return (yield from decide(session_id, call_id, DecisionKind.EDIT, arguments=arguments, **kw))


def reject(session_id: str, call_id: str, feedback: str = "", **kw: Any) -> Plan[Head]:
    return (yield from decide(session_id, call_id, DecisionKind.REJECT, feedback=feedback, **kw))


def provide_output(session_id: str, call_id: str, output: str, **kw: Any) -> Plan[Head]:
    kind = DecisionKind.PROVIDE_OUTPUT
    return (yield from decide(session_id, call_id, kind, output=output, **kw))


def cancel(session_id: str) -> Plan[Head]:
    """Cancel: at once if it waits for a person, else at its next tick."""
    return (yield Call("POST", _path("sessions", session_id, "cancel"), _head))


def _fork_body(shape: type[BaseModel], /, **values: Any) -> dict[str, Any]:
    for key in ("tool_outputs", "budgets", "state"):
        values[key] = dict(values[key]) if values.get(key) else None
    return _body(shape, **values)


def fork(
    session_id: str,
    *,
    from_step: int,
    system_prompt: str | None = None,
    append_instruction: str | None = None,
    tool_outputs: Mapping[str, str] | None = None,
    budgets: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    model: str | None = None,
    price: Sequence[float] | None = None,
    new_id: str | None = None,
    context_window: int | None = None,
    again: bool = False,
    priority: int | None = None,
    concurrency_key: str | None = None,
    max_per_key: int | None = None,
    idempotency_key: str | None = None,
) -> Plan[Head]:
    """A new session from step `from_step` of this one, with a declared patch; the
    session's dead letter, if it has one, is resolved. `again` forks one whose dead letter
    was forked or closed already. `model` is the spec the fork runs on (a submit's, as the
    server takes one), `price` its model's (a submit's, checked as the server checks
    one). `priority`, `concurrency_key` and `max_per_key` are the
    original's unless given."""
    body = _fork_body(
        bodies.Fork,
        from_step=from_step,
        system_prompt=system_prompt,
        append_instruction=append_instruction,
        tool_outputs=tool_outputs,
        budgets=budgets,
        state=state,
        model=model,
        price=list(price) if price is not None else None,
        id=new_id,
        context_window=context_window,
        again=again or None,
        priority=priority,
        concurrency_key=concurrency_key,
        max_per_key=max_per_key,
    )
    return (
        yield Call(
            "POST",
            _path("sessions", session_id, "fork"),
            _head,
            json=body,
            headers=_keyed(idempotency_key),
        )
    )


def _keyed(idempotency_key: str | None) -> dict[str, str]:
    """The header that makes a submit's or fork's retry safe (docs/API.md, Retrying). A key
    the server would refuse is refused here, the empty one too: left out, each retry
    would make a session of its own."""
    if idempotency_key is None:
        return {}
    if not bodies.IDEMPOTENCY_KEY.fullmatch(idempotency_key):
        raise InvalidInput(
            f"idempotency_key {idempotency_key[:40]!r} is not 1 to 255 visible ASCII "
            "characters; give a uuid you make for the request (str(uuid.uuid4())) and send "
            "it again with each retry, or None for no key"
        )
    return {bodies.IDEMPOTENCY_HEADER: idempotency_key}


def _letters(
    code: ErrorCode | str | None,
    kind: str | None,
    since: str | None,
    unresolved: bool,
    tenant: str | None = None,
) -> dict[str, Any]:
    params: dict[str, Any] = {"unresolved": unresolved}
    if code is not None:
        params["code"] = ErrorCode(str(code).upper()).value
    given = (("kind", kind), ("since", since), ("tenant", tenant))
    params.update({k: v for k, v in given if v is not None})
    return params


def dead_letters(
    *,
    code: ErrorCode | str | None = None,
    kind: str | None = None,
    since: str | None = None,
    unresolved: bool = False,
    limit: int = 100,
    tenant: str | None = None,
    offset: int = 0,
    session_id: str | None = None,
) -> Plan[list[DeadLetter]]:
    """Dead letters, newest first, past the first `offset`; `since` an ISO time or a
    duration ago (2h, 3d); `tenant` one tenant's (an admin token's filter; another token
    may name only its own); `session_id` that session's (none or one: how to find the
    letter of a session whose id is all digits, which `dead_letter` reads as a letter's
    number first)."""
    params: dict[str, Any] = {**_letters(code, kind, since, unresolved, tenant), "limit": limit}
    if offset:  # asked only when given: a server from before it refuses the parameter
        params["offset"] = offset
    if session_id is not None:  # the same: a server from before it refuses it
        params["session_id"] = session_id
    found = yield Call("GET", _path("dead-letters"), _json, params=params)
    return [model(DeadLetter, d) for d in found]


def dead_letter(key: str | int) -> Plan[dict[str, Any]]:
    """A dead letter (by its id or its session's id) with its session as a timeline under
    `session` and the session's forks: the document `tickwork dlq show --json` prints."""
    return (yield Call("GET", _path("dead-letters", str(key)), _json))


def dead_letter_stats(
    *,
    by: str | None = None,
    since: str | None = None,
    tenant: str | None = None,
    unresolved: bool = False,
) -> Plan[dict[str, Any]]:
    """Counts by code, kind, model, last tool and error signature: {since, total, by};
    `tenant` one tenant's (an admin token's filter); `unresolved` only those not forked,
    resolved or dismissed."""
    given = (("by", by), ("since", since), ("tenant", tenant))
    params: dict[str, Any] = {k: v for k, v in given if v is not None}
    if unresolved:
        params["unresolved"] = True
    return (yield Call("GET", _path("dead-letters", "stats"), _json, params=params))


def export_dead_letters(
    *,
    format: str = "jsonl",
    code: ErrorCode | str | None = None,
    kind: str | None = None,
    since: str | None = None,
    unresolved: bool = False,
    snapshot: bool = False,
    tenant: str | None = None,
) -> Plan[bytes]:
    """Every dead letter matching, oldest first, as JSON Lines, CSV or Parquet bytes;
    `tenant` one tenant's (an admin token's filter)."""
    letters = _letters(code, kind, since, unresolved, tenant)
    params = {**letters, "format": format, "snapshot": snapshot}
    return (yield Call("GET", _path("dead-letters", "export"), lambda r: r.content, params))


def fork_dead_letter(
    key: str | int,
    *,
    from_step: int,
    system_prompt: str | None = None,
    append_instruction: str | None = None,
    tool_outputs: Mapping[str, str] | None = None,
    budgets: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    model: str | None = None,
    price: Sequence[float] | None = None,
    new_id: str | None = None,
    again: bool = False,
    context_window: int | None = None,
    priority: int | None = None,
    concurrency_key: str | None = None,
    max_per_key: int | None = None,
    idempotency_key: str | None = None,
) -> Plan[Head]:
    """Fork a dead letter's session; the dead letter is resolved. `again` forks one that
    was forked or closed already. `model` is the spec the fork runs on (a submit's, as the
    server takes one), `price` its model's (a submit's, checked as the server checks
    one). `priority`, `concurrency_key` and `max_per_key` are the
    session's unless given."""
    body = _fork_body(
        bodies.Fork,
        from_step=from_step,
        system_prompt=system_prompt,
        append_instruction=append_instruction,
        tool_outputs=tool_outputs,
        budgets=budgets,
        state=state,
        model=model,
        price=list(price) if price is not None else None,
        id=new_id,
        again=again or None,
        context_window=context_window,
        priority=priority,
        concurrency_key=concurrency_key,
        max_per_key=max_per_key,
    )
    return (
        yield Call(
            "POST",
            _path("dead-letters", str(key), "fork"),
            _head,
            json=body,
            headers=_keyed(idempotency_key),
        )
    )


def _close(key: str | int, verb: str, reason: str) -> Plan[DeadLetter]:
    body = _body(Closing, reason=reason)
    letter = yield Call("POST", _path("dead-letters", str(key), verb), _json, json=body)
    return model(DeadLetter, letter)


def resolve_dead_letter(key: str | int, reason: str) -> Plan[DeadLetter]:
    """Mark the dead letter resolved without forking it."""
    return (yield from _close(key, "resolve", reason))


def dismiss_dead_letter(key: str | int, reason: str) -> Plan[DeadLetter]:
    """Dismiss the dead letter: nothing is to be done."""
    return (yield from _close(key, "dismiss", reason))


def close_dead_letter(key: str | int, *, state: str, reason: str) -> Plan[DeadLetter]:
    """Resolve or dismiss the dead letter by `state` ("resolved" or "dismissed"): the local
    client's `close_dead_letter`, sent as `resolve_dead_letter` or `dismiss_dead_letter`
    (the person who closed it is the token's, not a `by`)."""
    verb = {"resolved": "resolve", "dismissed": "dismiss"}.get(str(state))
    if verb is None:
        raise InvalidInput(
            f"a dead letter is closed as 'resolved' or 'dismissed', not {str(state)!r} (a "
            "fork closes it as forked: `fork_dead_letter`)"
        )
    return (yield from _close(key, verb, reason))
