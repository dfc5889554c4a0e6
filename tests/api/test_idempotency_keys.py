"""A submit or fork sent again with its `Idempotency-Key` is answered with the session the
first try made (201, `Idempotent-Replayed: true`), never a second session: a client whose
answer was lost retries it safely. A key sent with another request is refused; two callers'
keys never meet; other POSTs take the header and are safe to retry as they are."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import TEST_KIND, TOKEN, Stack
from tickwork.testing import until

#: marks the sessions this module submits (the package's stack holds many others)
RUN = uuid.uuid4().hex


def _body(stack: Stack, **input: Any) -> dict[str, Any]:
    return {
        "kind": TEST_KIND,
        "input": {"sink": str(stack.deployment.sink), "run": RUN, **input},
        "model": stack.deployment.script([{"content": "done"}]),
    }


def _count(stack: Stack) -> int:
    """This module's sessions (the newest are listed first)."""
    return sum(h.input.get("run") == RUN for h in stack.deployment.client.sessions(limit=500))


def _keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def test_a_submit_sent_again_with_its_key_gets_the_first_session(stack: Stack) -> None:
    http, key, body = stack.http("sam"), f"k-{uuid.uuid4()}", _body(stack)
    before = _count(stack)
    first = http.post("/api/v1/sessions", json=body, headers=_keyed(key))
    again = http.post("/api/v1/sessions", json=body, headers=_keyed(key))
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    assert again.status_code == 201, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == first.headers["location"]
    assert _count(stack) == before + 1
    other = http.post("/api/v1/sessions", json=body, headers=_keyed(f"k-{uuid.uuid4()}"))
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]


def test_a_replay_answers_the_session_as_it_is_now_as_docs_api_says(stack: Stack) -> None:
    """docs/API.md said a replay came "as the first try was, the same body"; it is the
    session's head now, which a client retrying late reads as such."""
    http, key, body = stack.http("sam"), f"k-{uuid.uuid4()}", _body(stack)
    first = http.post("/api/v1/sessions", json=body, headers=_keyed(key))
    assert first.status_code == 201, first.text
    made = first.json()["id"]
    until(lambda: stack.deployment.client.get(made).status.terminal, what="the session's end")
    again = http.post("/api/v1/sessions", json=body, headers=_keyed(key))
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["version"] > first.json()["version"] == 0
    assert again.json()["status"] != first.json()["status"] == "ready"
    said = " ".join((Path(__file__).resolve().parents[2] / "docs" / "API.md").read_text().split())
    assert "the body is the session's head as it is now" in said
    assert "the same body and `Location`" not in said


def test_a_key_sent_with_another_request_is_refused_and_makes_nothing(stack: Stack) -> None:
    http, key = stack.http("sam"), f"k-{uuid.uuid4()}"
    made = http.post("/api/v1/sessions", json=_body(stack), headers=_keyed(key))
    assert made.status_code == 201, made.text
    before = _count(stack)
    changed = _body(stack, note="another request")
    refused = http.post("/api/v1/sessions", json=changed, headers=_keyed(key))
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "idempotency_key_reused"
    assert made.json()["id"] in refused.json()["message"]
    assert "new key" in refused.json()["message"]
    assert _count(stack) == before


def test_two_callers_keys_never_meet(stack: Stack) -> None:
    key, body = f"k-{uuid.uuid4()}", _body(stack)
    sams = stack.http("sam").post("/api/v1/sessions", json=body, headers=_keyed(key))
    with httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {TOKEN['fuzz']}"}
    ) as fuzz:
        fuzzs = fuzz.post("/api/v1/sessions", json=body, headers=_keyed(key))
    assert sams.status_code == fuzzs.status_code == 201, (sams.text, fuzzs.text)
    assert sams.json()["id"] != fuzzs.json()["id"]
    assert "idempotent-replayed" not in fuzzs.headers


def test_tries_at_the_same_moment_make_one_session(stack: Stack) -> None:
    key, body = f"k-{uuid.uuid4()}", _body(stack)
    before = _count(stack)

    def post(_: int) -> httpx.Response:
        with httpx.Client(
            base_url=stack.url, headers={"Authorization": f"Bearer {TOKEN['sam']}"}, timeout=30
        ) as http:
            return http.post("/api/v1/sessions", json=body, headers=_keyed(key))

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(post, range(4)))
    assert [a.status_code for a in answers] == [201] * 4, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum(a.headers.get("idempotent-replayed") == "true" for a in answers) == 3
    assert _count(stack) == before + 1


def test_a_fork_sent_again_with_its_key_gets_the_first_fork(stack: Stack) -> None:
    parent = stack.submit([{"content": "done"}], prefix="keyed")
    stack.wait(parent)
    olga, key = stack.http("olga"), f"k-{uuid.uuid4()}"
    path = f"/api/v1/sessions/{parent}/fork"
    first = olga.post(path, json={"from_step": 0}, headers=_keyed(key))
    again = olga.post(path, json={"from_step": 0}, headers=_keyed(key))
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    forks = stack.deployment.client.sessions(parent_id=parent)
    assert [h.id for h in forks] == [first.json()["id"]]
    other_step = olga.post(path, json={"from_step": 1}, headers=_keyed(key))
    assert other_step.status_code == 422, other_step.text
    assert other_step.json()["code"] == "idempotency_key_reused"


def test_a_key_with_an_own_id_replays_and_an_id_of_another_request_stays_409(
    stack: Stack,
) -> None:
    http, key = stack.http("sam"), f"k-{uuid.uuid4()}"
    body = {**_body(stack), "id": f"own-{uuid.uuid4().hex[:8]}"}
    first = http.post("/api/v1/sessions", json=body, headers=_keyed(key))
    again = http.post("/api/v1/sessions", json=body, headers=_keyed(key))
    assert (first.status_code, again.status_code) == (201, 201), again.text
    assert again.headers["idempotent-replayed"] == "true"
    other = {**_body(stack, note="another"), "id": body["id"]}
    taken = http.post("/api/v1/sessions", json=other, headers=_keyed(key))
    assert taken.status_code == 409 and taken.json()["code"] == "session_exists", taken.text


@pytest.mark.parametrize("key", ["", "x" * 256, "naïve-key", "two words"])
def test_a_key_no_client_would_send_is_refused_naming_the_header(stack: Stack, key: str) -> None:
    before = _count(stack)
    answer = stack.http("sam").post(
        "/api/v1/sessions",
        json=_body(stack),
        headers={"Idempotency-Key": key.encode()},
    )
    assert answer.status_code == 422, answer.text
    assert "Idempotency-Key" in answer.json()["message"]
    assert _count(stack) == before


def test_other_posts_take_the_header_as_they_are(stack: Stack) -> None:
    """A cancel sent twice with a key cancels once; the header refuses nothing."""
    session_id = stack.submit([{"content": "done"}], prefix="keyed-cancel")
    stack.wait(session_id)
    olga = stack.http("olga")
    answer = olga.post(f"/api/v1/sessions/{session_id}/cancel", headers=_keyed("c-1"))
    assert answer.status_code in (200, 409), answer.text
    assert answer.json()["code" if answer.status_code == 409 else "id"] in (
        session_id,
        "session_finished",
    )
