"""Retrying over the API by the session's own `id`: a submit or fork that names one is
409 `session_exists` the second time, saying where the first is (test_idempotency_keys
retries with a key). The sessions are written through the store (no worker runs)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from tests.api.conftest import Server, embedded_client
from tickwork.api import ApiSettings, make_api
from tickwork.client import Tickwork
from tickwork.testing.store_ticks import new_session

TOKEN = "olga-every-role-token-001"
LIVE = f"live-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Tickwork]]:
    tmp = tmp_path_factory.mktemp("retries")
    client = embedded_client(tmp)
    settings = client.settings
    now = datetime.now(UTC)
    client.store.create(new_session(LIVE, now=now), now=now)
    tokens = {TOKEN: {"name": "olga", "roles": ["submitter", "approver", "operator"]}}
    app = make_api(settings, ApiSettings(api_tokens=tokens), client=client)  # type: ignore[arg-type]
    with (
        Server(app) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}) as http,
    ):
        yield http, client
    client.close()


def test_a_fork_retried_under_its_own_id_says_where_the_first_is(
    world: tuple[httpx.Client, Tickwork],
) -> None:
    http, _ = world
    answer = http.post(f"/api/v1/sessions/{LIVE}/fork", json={"from_step": 0, "id": LIVE})
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "session_exists"
    assert f"GET /api/v1/sessions/{LIVE}" in answer.json()["message"]


def test_a_cancel_refuses_a_body_it_would_drop(world: tuple[httpx.Client, Tickwork]) -> None:
    """A cancel records no reason: one sent is refused (422 naming it), not dropped while
    the client believes it kept; no body, or `{}`, cancels."""
    http, client = world
    now = datetime.now(UTC)
    session_id = f"cancel-{uuid.uuid4().hex[:6]}"
    client.store.create(new_session(session_id, now=now), now=now)
    refused = http.post(f"/api/v1/sessions/{session_id}/cancel", json={"reason": "wrong repo"})
    assert refused.status_code == 422, refused.text
    assert "body.reason: Extra inputs are not permitted" in refused.json()["message"]
    assert not client.get(session_id).cancel_requested
    for body in (None, {}):
        answer = http.post(f"/api/v1/sessions/{session_id}/cancel", json=body)
        assert answer.status_code in (200, 409), answer.text
    assert client.get(session_id).cancel_requested


def test_a_fork_answers_the_new_session_s_url_in_location(
    world: tuple[httpx.Client, Tickwork],
) -> None:
    http, _ = world
    answer = http.post(f"/api/v1/sessions/{LIVE}/fork", json={"from_step": 0})
    assert answer.status_code == 201, answer.text
    assert answer.headers["location"] == f"/api/v1/sessions/{answer.json()['id']}"
    assert http.get(answer.headers["location"]).json()["head"]["parent_id"] == LIVE
