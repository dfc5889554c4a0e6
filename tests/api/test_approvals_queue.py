"""The approvals queue through the API: oldest first, and past its `limit` the sessions that
have waited longest, never the newest. The sessions are written through the store with
times of their own (no worker runs)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from tickwork.fsm.values import Session, Status

from tests.api.conftest import Server, embedded_client
from tickwork.api import ApiSettings, make_api
from tickwork.testing.store_ticks import new_session, reply, think

TOKEN = "alice-approver-token-0001"
#: waiting sessions, oldest first: an hour apart, the first a day ago
WAITING = [f"w{n}-{uuid.uuid4().hex[:6]}" for n in range(3)]
DONE = f"done-{uuid.uuid4().hex[:6]}"
#: made before every other, but waiting only since after them all (its model took long)
LATE = f"late-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    tmp = tmp_path_factory.mktemp("approvals")
    client = embedded_client(tmp)
    settings = client.settings
    start = datetime.now(UTC) - timedelta(days=1)
    made = start - timedelta(hours=1)
    client.store.create(Session(head=new_session(LATE, now=made).head), now=made)
    for hour, session_id in enumerate(WAITING):
        now = start + timedelta(hours=hour)
        client.store.create(Session(head=new_session(session_id, now=now).head), now=now)
        # the first waits on two calls, one of which is decided last of all (below)
        asked = [("danger", {"value": v}) for v in ("x", "y")[: 2 if hour == 0 else 1]]
        think(client.store, session_id, reply(*asked), now=now)
        assert client.store.get(session_id).status is Status.WAITING_APPROVAL
    # one that waited, and whose call was approved and ran: it waits for nobody now
    now = start + timedelta(hours=len(WAITING))
    client.store.create(Session(head=new_session(DONE, now=now).head), now=now)
    think(client.store, DONE, reply(("danger", {"value": "x"})), now=now)
    client.decide(DONE, "s1c0", "approve", approver="alice")
    assert not client.store.get(DONE).awaiting
    now = start + timedelta(hours=len(WAITING) + 1)
    think(client.store, LATE, reply(("danger", {"value": "x"})), now=now)
    assert client.store.get(LATE).status is Status.WAITING_APPROVAL
    # a decision on one of its calls updates the first last of all: it still waits, as long
    client.decide(WAITING[0], "s1c0", "approve", approver="alice")
    assert client.store.get(WAITING[0]).awaiting == ("s1c1",)
    tokens = {TOKEN: {"name": "alice", "roles": ["approver"]}}
    app = make_api(settings, ApiSettings(api_tokens=tokens), client=client)  # type: ignore[arg-type]
    with (
        Server(app) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}) as found,
    ):
        yield found
    client.close()


def queue(http: httpx.Client, **params: int) -> list[str]:
    answer = http.get("/api/v1/approvals", params=params)
    assert answer.status_code == 200, answer.text
    return [w["session"]["id"] for w in answer.json()]


def test_the_queue_lists_the_waiting_sessions_oldest_first(http: httpx.Client) -> None:
    assert queue(http) == [*WAITING, LATE]


def test_past_its_limit_the_queue_keeps_those_that_waited_longest(http: httpx.Client) -> None:
    # the first's last update is a decision on one of its two calls: it waits longest still
    assert queue(http, limit=1) == WAITING[:1]
    assert queue(http, limit=2) == WAITING[:2]
    # waiting is counted from the request, not from the session's start
    assert queue(http, limit=3) == WAITING


def test_a_session_that_waits_for_nobody_says_so(http: httpx.Client) -> None:
    """Its calls are none and `waiting_since` is null: its last request is history."""
    answer = http.get(f"/api/v1/approvals/{DONE}", params={"preview": "false"})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["calls"], answer.json()["waiting_since"]) == ([], None)
    assert DONE not in queue(http)
