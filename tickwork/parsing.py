"""Values a person gives as text, parsed alike by the command line and the HTTP API.

Nothing here imports Typer or FastAPI: `options.py` (the CLI) and `api/` both use it.
Parsers raise `InvalidInput` naming how the value was given and what to write instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from tickwork.fsm.approvals import FINGERPRINT_LENGTH, HEX_DIGITS, is_whole_fingerprint
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Status

#: a duration back from now, each unit with as many digits as stay after year 1
#: the longest session id (a submitted `--id` as well: `new_session_id`)
MAX_SESSION_ID = 64
#: the fewest characters of an id that name its session by their start, as git's short ids
MIN_ID_PREFIX = 6
#: the characters of a session id, as a regular expression's class: a letter or a digit
#: first (`ID_FIRST`), then letters, digits, '_', '.' and '-' (the ids tickwork makes are a
#: uuid's hex digits; a submitted `--id` may hold the others)
ID_FIRST, ID_CHARS = "A-Za-z0-9", "A-Za-z0-9_.-"
#: what a whole session id may be (`submit --id`, `fork --id`, the API's bodies): matched
#: with `re.fullmatch`, as `$` alone lets a trailing newline through
SESSION_ID_PATTERN = rf"^[{ID_FIRST}][{ID_CHARS}]{{0,{MAX_SESSION_ID - 1}}}$"
SESSION_ID = re.compile(SESSION_ID_PATTERN)
#: in words, for refusals
ID_CHARS_SAID = "letters, digits, '_', '.' and '-', a letter or digit first"
#: what the API's `id_prefix` takes: the start of a session id, of MIN_ID_PREFIX characters
#: or more (a start with another character is the start of no id)
ID_PREFIX_PATTERN = rf"^[{ID_FIRST}][{ID_CHARS}]{{{MIN_ID_PREFIX - 1},{MAX_SESSION_ID - 1}}}$"
ID_PREFIX = re.compile(ID_PREFIX_PATTERN)
#: a whole uuid, as tickwork makes a session's id (32 hex digits) or as one is written with
#: its dashes (8-4-4-4-12): taken as the id of a session, not looked up as the start of one
WHOLE_UUID = re.compile(
    r"^(?:[0-9A-Fa-f]{32}|[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12})$"
)
#: how many of the ids an ambiguous start matches its refusal lists
SHOWN_CANDIDATES = 5
#: what follows the id in SessionNotFound's message for a start too short to look up
TOO_SHORT = f" (give at least {MIN_ID_PREFIX} characters to name one by its id's start)"
#: ... and for a start that no id has
NO_START = ", and no session id starts with it"
#: ... and, over the API, for one with a character no id has, whose start is not looked up
NOT_LOOKED_UP = f" (no session id has that character: an id holds {ID_CHARS_SAID})"

_DURATION = "|".join(
    rf"[0-9]{{1,{digits}}}(?:\.[0-9]+)?{unit}"
    for unit, digits in (("s", 10), ("m", 9), ("h", 7), ("d", 5), ("w", 5))
)
#: a duration's units, in seconds
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: the units a deadline takes; the page's Deadline fields take these, served with it
#: (`DEADLINE_SECONDS` in `api.bodies.page_bounds`)
DEADLINE_UNITS = "smhd"
#: each unit a deadline takes, in seconds
DEADLINE_SECONDS = {unit: _UNITS[unit] for unit in DEADLINE_UNITS}
_YEAR = "(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
#: a day of the calendar: months of their length, February 29 of leap years only
_DATE = (
    f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    f"|{_LEAP_YEAR}-02-29)"
)
_TIME = "[Tt ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\\.[0-9]+)?)?"
_OFFSET = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#: what `since` takes, exactly (the API's schema states it): empty (no limit), a duration
#: (90s, 30m, 2h, 3d, 1w; a fraction too), or an RFC 3339 date-time whose offset may be left
#: out (naive: UTC) and whose time may be (a date: its midnight). In ECMA-262 and Python alike.
SINCE_PATTERN = f"^(?:{_DURATION}|{_DATE}(?:{_TIME}{_OFFSET}?)?)?$"
_SINCE = re.compile(SINCE_PATTERN)
_FIRST, _LAST = datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)


def since(text: str | None, *, now: datetime, name: str = "--since") -> datetime | None:
    """An ISO time (naive means UTC) or a duration back from `now`: 90s, 30m, 2h, 3d, 1w;
    exactly what SINCE_PATTERN matches. None for no text.

    `name` is how the value was given (an option, a query parameter), for the error."""
    if not text:
        return None
    if not _SINCE.fullmatch(text):
        raise InvalidInput(
            f"{name} {text!r} is neither an ISO time (2026-01-31, 2026-01-31T12:00, "
            "2026-01-31T12:00:00Z, naive: UTC) nor a duration (90s, 30m, 2h, 3d, 1w; at most "
            "10 digits of seconds, 9 of minutes, 7 of hours, 5 of days or weeks)"
        )
    if text[-1] in _UNITS:
        return now - timedelta(seconds=seconds(text, example=f"{name} 2h", units="smhdw"))
    at = datetime.fromisoformat(text[:-1] + "Z" if text[-1] == "z" else text)
    if at.tzinfo is None:
        return at.replace(tzinfo=UTC)
    try:
        return at.astimezone(UTC)
    except OverflowError:  # an offset past the first or the last day: as far as time goes
        return _FIRST if at.year == 1 else _LAST


def seconds(text: str, *, example: str, units: str = DEADLINE_UNITS) -> float:
    """The seconds a duration holds: a number of seconds, or a number with one of `units`
    (2h), in either case and spaces around. `example` ends the refusal (`--deadline 2h`);
    a number out of range is the caller's to refuse, naming what it bounds."""
    given = text.strip().lower()
    unit = _UNITS[given[-1]] if given and given[-1] in units else 0
    try:
        return float(given[:-1]) * unit if unit else float(given)
    except ValueError:
        *some, last = units
        raise InvalidInput(
            f"{text!r} is not a duration: give seconds, or a number with "
            f"{', '.join(some)} or {last}, e.g. {example}"
        ) from None


def new_session_id(value: str, *, what: str) -> str:
    """The id a new session is given (`submit --id`, `fork --id`, the API bodies' `id`, the
    client's), checked once for all: SESSION_ID_PATTERN. `what` is how it was given; the
    refusal says whether it is empty, too long or holds a character no id has."""
    again = f"or leave {what} out for a random one"
    if not value:
        raise InvalidInput(f"invalid {what}: it is empty; give an id, {again}")
    if len(value) > MAX_SESSION_ID:
        raise InvalidInput(
            f"invalid {what}: it is {len(value):,} characters long; at most {MAX_SESSION_ID} "
            f"characters are taken; give a shorter id, {again}"
        )
    if not SESSION_ID.fullmatch(value):
        raise InvalidInput(
            f"invalid {what}: session id {value!r} may only hold letters, digits, '_', '-' "
            f"and '.', up to {MAX_SESSION_ID} characters, and starts with a letter or digit"
        )
    return value


def bad_text(value: str) -> str | None:
    """What is wrong with a text no database can store, or None. A lone surrogate is how
    Python reads bytes that are not UTF-8 (from a command line) or a JSON `\\udcff`."""
    if "\x00" in value:
        return "contains a NUL byte"
    if any("\ud800" <= c <= "\udfff" for c in value):
        return "is not valid UTF-8 (it holds a lone surrogate)"
    return None


def storable(value: object, *, name: str) -> None:
    """Refuse text the database cannot store (`bad_text`), naming where it is. `value` may be
    a string or JSON-like data; `name` is what it was given as ("" for the input's keys)."""
    todo: list[tuple[object, str]] = [(value, name)]
    while todo:
        item, where = todo.pop()
        if isinstance(item, dict):
            todo.extend((k, f"a key of {where or 'the input'}") for k in item)
            todo.extend((v, f"{where}.{k}" if where else f"the {k}") for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            todo.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, str) and (wrong := bad_text(item)):
            raise InvalidInput(f"{where} {wrong}; give it as UTF-8 text without NUL bytes")


def id_prefix(value: str, *, what: str = "id_prefix") -> str:
    """The start of a session id to look sessions up by (`what`: how it was given), checked:
    MIN_ID_PREFIX to MAX_SESSION_ID characters a session id holds (ID_CHARS)."""
    if ID_PREFIX.fullmatch(value):
        return value
    shown = quoted(value)
    if len(value) < MIN_ID_PREFIX:
        wrong = f"is {len(value)} characters long; give at least {MIN_ID_PREFIX}"
    elif len(value) > MAX_SESSION_ID:
        wrong = f"is {len(value):,} characters long, more than any id ({MAX_SESSION_ID})"
    else:
        wrong = "holds a character no session id has there; give the start of an id"
    raise InvalidInput(f"{what} {shown} {wrong} (a session id holds {ID_CHARS_SAID})")


def fingerprint(value: str, *, what: str, shown: str) -> str:
    """A call's whole fingerprint, as a decision carries it (`what`: how it was given;
    `shown`: where the person finds it), checked: FINGERPRINT_LENGTH lower-case hex digits.
    A start of one, as an id's start names a session, names no call. The value is not
    echoed: a refusal shows no part of a fingerprint."""
    if is_whole_fingerprint(value):
        return value
    if len(value) != FINGERPRINT_LENGTH:
        wrong = f"is {len(value):,} characters long"
    else:
        wrong = "holds a character that is not a lower-case hex digit"
        if set(value.lower()) <= HEX_DIGITS:
            wrong = "holds upper-case letters"
    raise InvalidInput(
        f"{what} {wrong}, not a call's whole fingerprint: give all its "
        f"{FINGERPRINT_LENGTH} hex digits, lower-case, as {shown} (a start of one names no call)"
    )


def quoted(value: str, length: int = 40) -> str:
    """The start of `value`, quoted, to tell it from another."""
    return repr(value if len(value) <= length else value[:length] + "...")


def ambiguous(given: str, found: list[str]) -> InvalidInput:
    """The refusal of a start of an id that `found` (sorted, up to SHOWN_CANDIDATES + 1 of
    them) all start with, naming a few."""
    shown = ", ".join(found[:SHOWN_CANDIDATES])
    if len(found) > SHOWN_CANDIDATES:
        count, shown = f"more than {SHOWN_CANDIDATES}", f"{shown}, ..."
    else:
        count = str(len(found))
    return InvalidInput(
        f"{given!r} is the start of {count} session ids ({shown}); give more characters of the "
        "one you mean"
    )


def one_id(
    given: str,
    found: list[str],
    *,
    none: Exception | str,
    several: Callable[[str, list[str]], Exception] = ambiguous,
) -> str:
    """The id that `given` names by its start, of `found` (the ids that start with it,
    sorted, up to SHOWN_CANDIDATES + 1): the one found; `several(given, found)` raised if
    more are (`ambiguous`: InvalidInput naming a few); `none` if none is, raised if it is
    an error, else the id to take instead."""
    if not found:
        if isinstance(none, Exception):
            raise none
        return none
    if len(found) > 1:
        raise several(given, found)
    return found[0]


def statuses(given: Iterable[Status | str] | str, *, what: str) -> list[Status]:
    """The statuses `given`: one (a string) or several; InvalidInput naming the statuses
    for one that is none (`status="queued"` was read letter by letter: "'q' is not a valid
    Status")."""
    found = []
    for name in [given] if isinstance(given, str) else given:
        try:
            found.append(Status(name))
        except ValueError:
            raise InvalidInput(
                f"{what}: {name!r} is not a session status; give one or several of "
                f"{', '.join(s.value for s in Status)}"
            ) from None
    return found


#: what holds a session in a status no worker moves on, as both clients' `wait` say when
#: it times out
STILL = {
    Status.WAITING_APPROVAL: "it waits for a person: decide its calls (`approve`, `edit`, "
    "`reject`), or wait with until='waiting_approval'",
    Status.WAITING_CHILDREN: "it waits for its child sessions to end",
    Status.QUEUED: "it waits to be admitted: its tenant is at its in-flight limit, or its "
    "concurrency key's sessions run",
}


def still(
    session_id: str, status: Status, wanted: Iterable[Status], timeout: float, *, by_default: str
) -> str:
    """Why a `wait` for `wanted` statuses (none: `by_default`) timed out on a session still
    in `status`, the same from the local and the remote client."""
    names = ", ".join(sorted(s.value for s in wanted)) or by_default
    return (
        f"session {session_id} is still {status.value} after {timeout:g}s, not {names}; "
        f"{STILL.get(status, 'is a worker running?')}"
    )


def ended_otherwise(session_id: str, status: Status, wanted: Iterable[Status]) -> str:
    """Why a `wait` for `wanted` statuses ends at once on a session that has finished in
    another `status`: it will never be in one of them."""
    names = " or ".join(sorted(s.value for s in wanted))
    return (
        f"session {session_id} has finished: it is {status.value} and will never be "
        f"{names} (fork it to go on)"
    )
