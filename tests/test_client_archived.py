"""The local client asked for a session retention archived: `get` and `load` serve live
sessions only, and say so and what reads it back, as the API's 404 (`archived: true`)
and the CLI do, still a SessionNotFound for callers that catch one.

The session is written and archived through the store (no worker runs)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tickwork.fsm.errors import SessionArchived, SessionNotFound
from tickwork.fsm.values import Status
from tickwork.store.migrate import upgrade
from tickwork.store.retention import Policy, archive_pass
from tickwork.worker.config.settings import Settings

from tickwork.client import Tickwork
from tickwork.testing.store_ticks import Clock, new_session, reply, think


def archived_one(tmp_path: Path) -> tuple[Tickwork, str]:
    """A client of a new embedded deployment, and the id of a session it completed and
    retention then archived."""
    settings = Settings(
        state_dir=tmp_path / "state", queue=f"tickwork.ticks.{uuid.uuid4().hex[:8]}"
    )
    settings.state_dir.mkdir(parents=True)
    upgrade(settings.db_url)
    client = Tickwork(settings)
    store, clock = client.store, Clock()
    old = str(uuid.uuid4())
    store.create(new_session(old, now=clock()), now=clock())
    assert think(store, old, reply(content="done"), now=clock()).status is Status.COMPLETED
    report = archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    assert report.archived == 1
    return client, old


def test_get_of_an_archived_session_says_it_is_archived_and_how_to_read_it(
    tmp_path: Path,
) -> None:
    """`Tickwork().get(id)` of an archived session raised "no session", as for an id
    nobody made, where the API said it was archived: a script could not tell it was gone
    to the archive, nor that `archived(id)` reads it back."""
    client, old = archived_one(tmp_path)
    nobody = str(uuid.uuid4())

    for read in (client.get, client.load):
        for given in (old, old[:8]):  # its whole id, or a start of it
            with pytest.raises(SessionNotFound) as raised:
                read(given)
            assert isinstance(raised.value, SessionArchived)
            said = str(raised.value)
            assert said.startswith(f"session '{old}' is archived"), said
            assert f"`archived('{old}')`" in said and "`tickwork ls --archived`" in said
    # what it names reads it back; an id nobody made is no session, as before
    found = client.archived(old)
    assert found is not None and found.session.head.final_answer == "done"
    with pytest.raises(SessionNotFound, match=f"no session '{nobody}'") as none:
        client.get(nobody)
    assert not isinstance(none.value, SessionArchived)
    client.close()


def test_a_dead_letter_asked_of_an_archived_session_says_it_went_with_it(tmp_path: Path) -> None:
    """`tickwork dlq show ID` of a session retention archived (its dead letter with it) said
    "no session 'ID'; list sessions with `tickwork ls`", though `tickwork show ID` reads it
    back: it says the session is archived with its dead letter, by its whole id or a start."""
    client, old = archived_one(tmp_path)
    for given in (old, old[:8]):
        with pytest.raises(LookupError) as refused:
            client.dead_letter(given)
        assert str(refused.value) == (
            f"session {old} is archived, and its dead letter with it: dead letters are read "
            "live only; read its patch, or fork it from a step, as an archived session"
        )
    client.close()
