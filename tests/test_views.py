"""The dates the views give (`show --json`, `ls --json`, `ls --archived --json`, the API's
JSON): each ISO 8601 in UTC ending in `Z`, as the heads', steps' and events' are."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from tickwork.fsm.values import Event, EventKind
from tickwork.store.archived import Entry

from tickwork import views
from tickwork.testing.store_ticks import new_session

#: the start of an ISO 8601 date and time
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


def dates(document: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every date in a JSON document, by where it is (`refused.0.at`)."""
    if isinstance(document, dict):
        for key, value in document.items():
            yield from dates(value, f"{where}.{key}" if where else str(key))
    elif isinstance(document, list | tuple):
        for i, value in enumerate(document):
            yield from dates(value, f"{where}.{i}")
    elif isinstance(document, str) and ISO.match(document):
        yield where, document


def test_every_date_a_view_gives_is_utc_ending_in_z() -> None:
    """The heads, steps and events gave `...Z` (pydantic's), but a refused tick's `at`, the
    lease's `expires_at`, the forks' `created_at`, `forked_from.at` and the archive's rows
    gave `+00:00`: a script that parsed one form failed on the other."""
    now = datetime(2026, 12, 6, 3, 50, 7, 123456, tzinfo=UTC)
    made = new_session("fork-1", now=now)
    later = (
        Event(
            kind=EventKind.FORKED,
            at=now,
            data={"parent_id": "sess-0", "from_step": 1, "by": "erin"},
        ),
        Event(
            kind=EventKind.TICK_REFUSED,
            at=now,
            data={"worker": "beta@host:42", "version": 0, "reason": "no kind"},
        ),
    )
    view = views.session(made.model_copy(update={"events": made.events + later}))
    view["lease"] = views.lease(("alpha@host:41", now), now=now)
    fork = {"id": "f", "fork_step": 1, "status": "ready", "created_at": now, "submitted_by": "x"}
    view["forks"] = views.forks([fork])
    entry = Entry(
        session_id="old-1",
        location="day=2026-12-06/old-1.jsonl.gz",
        state="archived",
        status="completed",
        kind="repair",
        parent_id=None,
        fork_step=None,
        created_at=now,
        finished_at=now,
        archived_at=now.replace(tzinfo=None),  # as a naive database might give it
        submitted_by="owen",
    )
    row = views.archived_entry(entry)

    found = dict(dates({"show": view, "archived": row}))
    assert {
        "show.refused.0.at",
        "show.forked_from.at",
        "show.lease.expires_at",
        "show.forks.0.created_at",
        "show.head.created_at",
        "archived.created_at",
        "archived.finished_at",
        "archived.archived_at",
    } <= set(found), found
    assert {at for at in found.values()} == {"2026-12-06T03:50:07.123456Z"}, found
    assert row["submitted_by"] == "owen"  # as a live session's row says who submitted it
    # another zone, or none (taken as UTC): the same instant, in UTC
    assert views.date(now.astimezone(timezone(timedelta(hours=2)))) == found["archived.created_at"]
    assert views.date(None) is None


def test_a_dead_letters_resolution_gives_its_dates_as_the_rest() -> None:
    """A closed dead letter's `resolution.at` and its forks' `at` are kept as the text they
    were written in (`+00:00`); its `at` and `resolved_at` gave `Z` beside them."""
    from tickwork.store.dead_letters import DeadLetter

    now = datetime(2026, 12, 6, 3, 50, 7, 123456, tzinfo=UTC)
    stored = now.isoformat()  # as the store writes it
    letter = DeadLetter(
        id=7,
        session_id="dies",
        code="MODEL_ERROR",
        message="boom",
        kind="repair",
        model="gpt-test",
        last_tool=None,
        error_signature="MODEL_ERROR:boom",
        at=now,
        schema_version=1,
        resolved_at=now,
        resolution={
            "state": "forked",
            "by": "erin",
            "at": stored,
            "fork": "try-1",
            "forks": [{"fork": "try-1", "by": "erin", "at": stored}],
        },
    )
    found = dict(dates(views.dead_letter(letter)))
    assert {"at", "resolved_at", "resolution.at", "resolution.forks.0.at"} <= set(found), found
    assert set(found.values()) == {"2026-12-06T03:50:07.123456Z"}, found
    assert views.dead_letter(letter)["resolution"]["forks"][0]["fork"] == "try-1"
