"""A session named by the start of its id, over the API, as the CLI names one locally
(`Reads.session_id`): its whole id, else a unique start of one, 6 characters or more.

The API looks a start up with `GET /api/v1/sessions?id_prefix=` (the characters an id
holds: `parsing.ID_CHARS`), among the sessions the token sees. `session_id`
resolves a start before anything is asked of the session, and refuses at once a whole uuid
of no session (the API's 404 says, with `archived`, whether the id is an archived session's,
which `patch` and `fork` read back); `named` and `lettered` make an operation take one: the
id is tried whole first (a whole id costs no request more), and only a 404 for it (not an
archived session's) looks for the one id it starts with. The refusals say what the local
CLI says: too short, no id starts with it, or it starts several (naming a few).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from tickwork.fsm.errors import SessionNotFound
from tickwork.parsing import (
    ID_PREFIX,
    MIN_ID_PREFIX,
    NO_START,
    NOT_LOOKED_UP,
    SHOWN_CANDIDATES,
    TOO_SHORT,
    WHOLE_UUID,
    ambiguous,
    one_id,
)

from .errors import RemoteError
from .plans import Call, Plan, _json, _path

F = TypeVar("F", bound=Callable[..., Plan[Any]])


def session_id(given: str, *, tenant: str | None = None) -> Plan[str]:
    """The whole id of the session `given` names, among those the token sees (of `tenant`
    too, if given): `given` if a live session has that id, else the one live id that
    starts with it; RemoteError 422 naming a few if several do. A whole uuid is asked for
    whole: given back if a session has it, live or archived (which `patch` and `fork` read
    back), else looked up as a start (a custom id may be a uuid with more after it), and
    if none, RemoteError 404 `session_not_found` at once, as the operation would refuse it.
    Otherwise `given` itself: a whole id the listing does not hold (an archived session's,
    or none: the operation it is given to answers 404), and a uuid from a server that does
    not say which (one from before `archived`)."""
    if WHOLE_UUID.fullmatch(given):
        refused = yield from _asked(given)
        if refused is None or refused.details.get("archived") is not False:
            return given  # a live or an archived session's, or a server that does not say
        return (yield from started(given, refused, tenant=tenant))
    found = yield from _starting(given, tenant)
    if found is None or given in found:
        return given  # no start the API looks up, or a live session's whole id
    if len(found) > SHOWN_CANDIDATES:
        # more than the listing holds start with it: a whole id among them may be older
        refused = yield from _asked(given)
        if refused is None or archived(refused):
            return given
    return one_id(given, found, none=given, several=_ambiguous)


def archived(refused: RemoteError) -> bool:
    """Whether the server's refusal says its whole id is an archived session's, one the token
    sees that the route does not read back (404 `session_not_found` with `archived`)."""
    return refused.status == 404 and refused.details.get("archived") is True


def started(
    given: str, refused: RemoteError, *, said: bool = True, tenant: str | None = None
) -> Plan[str]:
    """The one id `given` starts with (of `tenant` too, if given), after the server
    `refused` it as a whole id (404); else the refusal the local CLI gives (with `said`;
    else `refused` itself): too short, a character no id has (`NOT_LOOKED_UP`), or no id
    starts with it; and RemoteError 422 naming a few if several do."""
    if len(given) < MIN_ID_PREFIX and said:
        raise _not_found(given, TOO_SHORT, refused)
    if not ID_PREFIX.fullmatch(given) and said:
        raise _not_found(given, NOT_LOOKED_UP, refused)
    found = yield from _starting(given, tenant)
    if found is None:  # no start, or a server from before `id_prefix`: its refusal stands
        raise refused
    found = [f for f in found if f != given]  # the whole id, just refused, is gone since
    none = _not_found(given, NO_START, refused) if said else refused
    return one_id(given, found, none=none, several=_ambiguous)


def named(op: F) -> F:
    """The operation `op` of one session (its first parameter `session_id`), taking a
    unique start of the id as well as the whole id."""
    return _resolving(op, "session_id", letter=False)


def lettered(op: F) -> F:
    """The operation `op` of one dead letter (its first parameter `key`: the letter's id or
    its session's), taking a unique start of the session's id as well. Digits only name a
    letter or a whole session id, never the start of one (a mistyped letter number must
    not name the letter of a session whose id starts with those digits). No letter found
    is the server's refusal of `key`, as the local CLI's is of the key given."""
    return _resolving(op, "key", letter=True)


def _resolving(op: F, param: str, *, letter: bool) -> F:
    signature = inspect.signature(op)
    code = "dead_letter_not_found" if letter else "session_not_found"

    @functools.wraps(op)
    def plan(*args: Any, **kwargs: Any) -> Plan[Any]:
        bound = signature.bind(*args, **kwargs)
        given = str(bound.arguments[param])
        try:
            return (yield from op(*bound.args, **bound.kwargs))
        except RemoteError as exc:
            if exc.status != 404 or exc.code != code or (letter and given.isdigit()):
                raise
            if archived(exc):  # a whole id, of a session this route does not read back
                raise
            refused = exc
        bound.arguments[param] = yield from started(given, refused, said=not letter)
        try:
            return (yield from op(*bound.args, **bound.kwargs))
        except RemoteError as exc:
            if letter and exc.status == 404 and exc.code == code:
                raise refused from None  # its session has no dead letter
            raise

    return plan  # type: ignore[return-value]


def _starting(given: str, tenant: str | None) -> Plan[list[str] | None]:
    """The ids of the live sessions the token sees that start with `given`, sorted, at most
    SHOWN_CANDIDATES + 1; None, asking nothing, for a `given` no start the API looks up
    (too short, or a character an id's start has not), and from a server that takes no
    `id_prefix` (422 naming it)."""
    if len(given) < MIN_ID_PREFIX or not ID_PREFIX.fullmatch(given):
        return None
    params: dict[str, Any] = {"id_prefix": given, "limit": SHOWN_CANDIDATES + 1}
    if tenant is not None:
        params["tenant"] = tenant
    try:
        found = yield Call("GET", _path("sessions"), _json, params=params)
    except RemoteError as exc:
        if exc.status != 422 or "id_prefix" not in exc.message:
            raise
        return None
    # only ids that do start with it: a server that ignored the filter names no other session
    return sorted(i for h in found if (i := str(h["id"])).startswith(given))


def _asked(session_id: str) -> Plan[RemoteError | None]:
    """None if a live session the token sees has the whole id `session_id`; else the
    server's 404 for it, whose `archived` says whether an archived session has it (a server
    from before `archived` does not say). Asks for one event: the cheapest read of a
    session."""
    try:
        yield Call("GET", _path("sessions", session_id, "events"), _json, {"limit": 1})
    except RemoteError as exc:
        if exc.status != 404 or exc.code != "session_not_found":
            raise
        return exc
    return None


def _not_found(given: str, hint: str, refused: RemoteError) -> RemoteError:
    said = SessionNotFound.of(given, hint=hint)
    return RemoteError(said.message, code="session_not_found", status=404, details=refused.details)


def _ambiguous(given: str, found: list[str]) -> RemoteError:
    return RemoteError(
        ambiguous(given, found).message,
        code="invalid_input",
        status=422,
        details={"candidates": found[:SHOWN_CANDIDATES]},
    )
