"""Values a person gives as text, parsed alike by the command line and the HTTP API.

Nothing here imports Typer or FastAPI: `options.py` (the CLI) and `api/` both use it.
Parsers raise `InvalidInput` naming how the value was given and what to write instead.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from tickwork.fsm.errors import InvalidInput

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since(text: str | None, *, now: datetime, name: str = "--since") -> datetime | None:
    """An ISO time (naive means UTC) or a duration back from `now`: 90s, 30m, 2h, 3d, 1w.

    `name` is how the value was given (an option, a query parameter), for the error."""
    if text is None or not text.strip():
        return None
    match = _DURATION.match(text)
    if match:
        try:
            return now - timedelta(seconds=float(match[1]) * _UNITS[match[2]])
        except (OverflowError, ValueError):
            raise InvalidInput(
                f"{name} {text!r} reaches back before year 1; give a shorter duration"
            ) from None
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"{name} {text!r} is neither an ISO time (2026-01-31T12:00) nor "
            "a duration (90s, 30m, 2h, 3d, 1w)"
        ) from None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


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
