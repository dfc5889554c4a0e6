"""A cancel asked for while a tick runs, which then suspends the session: the session is
cancelled once that tick commits (a suspended session is cancelled at once), not left
waiting for a person with the cancel flag set."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tickwork.fsm.values import Session, Status
from tickwork.worker.tick.advance import after_commit

from tests.worker.ticking import Ticks
from tickwork.testing.store_ticks import claim, new_session, reply, think_change


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def test_a_cancel_during_a_tick_that_suspends_the_session_cancels_it(ticks: Ticks) -> None:
    now = datetime.now(UTC)
    store = ticks.store
    store.create(Session(head=new_session("s-1", now=now).head), now=now)
    claimed = claim(store, "s-1", now=now)
    store.request_cancel("s-1", now=now, by="alice")  # runnable: only flagged
    change = think_change(claimed, reply(("danger", {"value": "x"})), now=now)
    head = store.save(change, version=claimed.head.version, owner=claimed.owner, now=now)
    assert head.status is Status.WAITING_APPROVAL and head.cancel_requested

    after_commit(ticks.rt, change, head)

    assert store.get("s-1").status is Status.CANCELLED
