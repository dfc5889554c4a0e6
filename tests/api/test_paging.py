"""Paging the listings: the dead letters past the newest `limit` are reached with `offset`,
as sessions are (over the API and the remote client); and the answers a client pages
through are typed in the OpenAPI schema, as they come. The sessions are written through
the store (no worker runs)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from tickwork.fsm import machine
from tickwork.fsm.values import ErrorCode, Session

from tests.api.conftest import Server, embedded_client
from tickwork.api import ApiSettings, make_api
from tickwork.api.answers import EventPage, Identity, LetterView
from tickwork.remote import Client
from tickwork.testing.store_ticks import claim, new_session

TOKEN = "alice-approver-token-0001"
#: failed sessions, oldest first, a minute apart
FAILED = [f"f{n}-{uuid.uuid4().hex[:6]}" for n in range(3)]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("paging")
    client = embedded_client(tmp)
    settings = client.settings
    start = datetime.now(UTC) - timedelta(hours=1)
    for minute, session_id in enumerate(FAILED):
        now = start + timedelta(minutes=minute)
        client.store.create(Session(head=new_session(session_id, now=now).head), now=now)
        claimed = claim(client.store, session_id, now=now)
        change = machine.fail(claimed.head, ErrorCode.LOOP, "stagnation loop", now=now)
        client.store.save(change, version=claimed.head.version, owner="worker-1", now=now)
    tokens = {TOKEN: {"name": "alice", "roles": ["approver"]}}
    app = make_api(settings, ApiSettings(api_tokens=tokens), client=client)  # type: ignore[arg-type]
    with Server(app) as server:
        yield server.url
    client.close()


def test_dead_letters_past_the_limit_are_reached_with_offset(url: str) -> None:
    newest = list(reversed(FAILED))
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:

        def page(**params: int) -> list[str]:
            answer = http.get("/api/v1/dead-letters", params=params)
            assert answer.status_code == 200, answer.text
            return [d["session_id"] for d in answer.json()]

        assert page(limit=2) == newest[:2]
        assert page(limit=2, offset=2) == newest[2:]
        assert page(offset=3) == []
    with Client(url, token=TOKEN) as tw:
        assert [d.session_id for d in tw.dead_letters(limit=1, offset=1)] == newest[1:2]


def test_the_schema_types_the_answers_a_client_reads_as_they_come(url: str) -> None:
    """`/me`, the events page and the dead letters (listed, resolved) are named models in
    the OpenAPI schema, not free objects, and the server's answers are those models."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        paths = http.get("/api/v1/openapi.json").json()["paths"]

        def answer_schema(path: str, method: str = "get") -> dict[str, object]:
            ok = paths[path][method]["responses"]["200"]["content"]["application/json"]
            return dict(ok["schema"])

        assert answer_schema("/api/v1/me") == {"$ref": "#/components/schemas/Identity"}
        events = answer_schema("/api/v1/sessions/{session_id}/events")
        assert events == {"$ref": "#/components/schemas/EventPage"}
        assert answer_schema("/api/v1/dead-letters")["items"] == {
            "$ref": "#/components/schemas/LetterView"
        }
        Identity.model_validate(http.get("/api/v1/me").json())
        page = EventPage.model_validate(http.get(f"/api/v1/sessions/{FAILED[0]}/events").json())
        assert page.status == "failed" and page.events and page.last_id == page.events[-1].id
        for letter in http.get("/api/v1/dead-letters").json():
            assert LetterView.model_validate(letter).model_dump(mode="json").keys() <= letter.keys()
