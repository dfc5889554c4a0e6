"""The API given a Python client (which takes a unique start of a session's id) takes whole
ids in its paths only: a start is looked up among the sessions a token sees (`id_prefix`),
never among every tenant's, whose ids a refusal naming the candidates would show."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
from tickwork.fsm.values import Session

from tests.api.conftest import Server, embedded_client
from tickwork.api import ApiSettings, make_api
from tickwork.remote import Client
from tickwork.testing.store_ticks import new_session

TOKEN = "ann-team-a-token-00000001"
TOKENS = {TOKEN: {"name": "ann", "roles": ["approver"], "tenant": "team-a"}}


def test_a_path_takes_a_whole_id_while_the_client_given_takes_a_start(tmp_path: Path) -> None:
    client = embedded_client(tmp_path)
    now = datetime.now(UTC)
    for session_id, tenant in (("cafe01aaaa", "team-a"), ("cafe01bbbb", "team-b")):
        head = new_session(session_id, now=now).head.model_copy(update={"tenant": tenant})
        client.store.create(Session(head=head), now=now)
    app = make_api(client.settings, ApiSettings(api_tokens=TOKENS), client=client)
    with Server(app) as server:
        answer = httpx.get(
            f"{server.url}/api/v1/sessions/cafe01", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert answer.status_code == 404, answer.text
        assert "cafe01bbbb" not in answer.text
        with Client(server.url, token=TOKEN) as remote:  # looks it up among team-a's
            assert remote.get("cafe01").id == "cafe01aaaa"
    assert client.get("cafe01a").id == "cafe01aaaa"  # the client given still takes a start
    client.close()
