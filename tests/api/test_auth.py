"""Bearer tokens and roles: 401 without a valid token, 403 with the wrong role."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest
from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.values import Status

from tests.api.conftest import TOKEN, Server, Stack
from tickwork.api import ApiSettings, make_api
from tickwork.api.auth import Tokens


def test_without_a_token_every_endpoint_answers_401(stack: Stack) -> None:
    for method, path in [
        ("GET", "/api/v1/sessions"),
        ("GET", "/api/v1/approvals"),
        ("POST", "/api/v1/sessions"),
        ("GET", "/api/v1/dead-letters"),
        ("GET", "/api/v1/sessions/x/stream"),
        ("POST", "/api/v1/sessions/x/calls/s1c0/decision"),
    ]:
        answer = stack.http().request(method, path, json={})
        assert answer.status_code == 401, (method, path, answer.text)
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["code"] == "unauthenticated"


def test_a_wrong_token_is_401(stack: Stack) -> None:
    answer = stack.http().get("/api/v1/me", headers={"Authorization": "Bearer not-a-token"})
    assert answer.status_code == 401
    assert answer.json() == {
        "code": "invalid_token",
        "message": "the token is not valid; ask an operator for one",
    }
    basic = stack.http().get("/api/v1/me", headers={"Authorization": "Basic YWxpY2U6eA=="})
    assert basic.status_code == 401


def test_me_names_the_token_holder(stack: Stack) -> None:
    assert stack.http("alice").get("/api/v1/me").json() == {
        "name": "alice",
        "roles": ["approver"],
        "tenant": "default",
        "own_only": False,
    }


def test_the_wrong_role_is_403_and_names_the_role_needed(stack: Stack) -> None:
    cases = [
        ("nobody", "POST", "/api/v1/sessions", {"kind": "repair"}, "submitter"),
        ("alice", "POST", "/api/v1/sessions", {"kind": "repair"}, "submitter"),
        (
            "sam",
            "POST",
            "/api/v1/sessions/x/calls/s1c0/decision",
            {"kind": "approve", "fingerprint": "0" * 64},
            "approver",
        ),
        (
            "olga",
            "POST",
            "/api/v1/sessions/x/calls/s1c0/decision",
            {"kind": "approve", "fingerprint": "0" * 64},
            "approver",
        ),
        ("sam", "POST", "/api/v1/sessions/x/cancel", None, "approver or operator"),
        ("alice", "POST", "/api/v1/sessions/x/fork", {"from_step": 0}, "operator"),
        ("alice", "POST", "/api/v1/dead-letters/1/fork", {"from_step": 0}, "operator"),
        ("sam", "POST", "/api/v1/dead-letters/1/fork", {"from_step": 0}, "operator"),
        # any role reads: not "the submitter or approver or operator role", which read as
        # the one a decision needs where a client reads a call's fingerprint first
        ("nobody", "GET", "/api/v1/sessions", None, ANY_ROLE),
        ("nobody", "GET", "/api/v1/dead-letters", None, ANY_ROLE),
    ]
    for who, method, path, body, role in cases:
        answer = stack.http(who).request(method, path, json=body)
        assert answer.status_code == 403, (who, path, answer.text)
        assert answer.json()["code"] == "forbidden"
        said = role if role == ANY_ROLE else f"needs the {role} role"
        assert said in answer.json()["message"], answer.text
        assert who in answer.json()["message"]


ANY_ROLE = (
    "holds no role; reading needs a role (submitter, approver or operator): ask an operator "
    "for the one you need"
)


def test_any_role_may_read_sessions_and_dead_letters_alike(stack: Stack) -> None:
    # a dead letter's snapshot is the failed session: whoever reads one reads the other
    failed = stack.submit([{"error": {"transient": False, "message": "model said no"}}])
    stack.wait(failed, Status.FAILED)
    for who in ("alice", "sam", "olga"):
        http = stack.http(who)
        assert http.get("/api/v1/sessions").status_code == 200
        assert http.get("/api/v1/approvals").status_code == 200
        assert http.get(f"/api/v1/sessions/{failed}").status_code == 200
        letter = http.get(f"/api/v1/dead-letters/{failed}")
        assert letter.status_code == 200, letter.text
        assert letter.json()["session"]["head"]["id"] == failed
        assert http.get("/api/v1/dead-letters/stats").status_code == 200
    for path in (f"/api/v1/sessions/{failed}", f"/api/v1/dead-letters/{failed}"):
        assert stack.http("nobody").get(path).status_code == 403
    assert stack.http("nobody").get("/api/v1/me").status_code == 200


def test_tokens_may_be_given_as_digests_and_in_a_file(tmp_path: Path) -> None:
    token = "a-long-random-token-for-carol"
    path = tmp_path / "tokens.json"
    path.write_text(
        json.dumps(
            {
                "sha256:" + hashlib.sha256(token.encode()).hexdigest(): {
                    "name": "carol",
                    "roles": ["operator"],
                }
            }
        )
    )
    settings = ApiSettings(
        api_tokens_file=path,
        api_tokens={  # type: ignore[arg-type]
            TOKEN["alice"]: {"name": "alice", "roles": ["approver"]}
        },
    )
    tokens = Tokens(settings.tokens())
    carol = tokens.find(token)
    assert carol is not None and carol.name == "carol" and carol.roles == {"operator"}
    assert tokens.find(TOKEN["alice"]) is not None
    assert tokens.find("sha256:" + hashlib.sha256(token.encode()).hexdigest()) is None


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ({}, "no API tokens"),
        ({"short": {"name": "x", "roles": []}}, "shorter than 16 characters"),
        ({"sha256:abc": {"name": "x", "roles": []}}, "not sha256:<64 hex digits>"),
    ],
)
def test_bad_token_settings_stop_the_server_from_starting(
    tokens: dict[str, object], message: str
) -> None:
    settings = ApiSettings(api_tokens=tokens)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=message):
        Tokens(settings.tokens())


def test_a_bad_tokens_file_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text('{"a-long-random-token-xyz": {"name": "x", "roles": ["superuser"]}}')
    with pytest.raises(ConfigurationError, match="roles"):
        ApiSettings(api_tokens_file=path).tokens()
    path.write_text('{"a-long-random-token-xyz": {"name": "x", "tenant": "Team A"}}')
    with pytest.raises(ConfigurationError, match="tenant: String should match"):
        ApiSettings(api_tokens_file=path).tokens()
    # which entry is wrong, by its holder's name (else its place), never by the token; and a
    # tenant name metrics keep for others ('other': past the label cap) is refused, as a
    # submit into it is
    ok = {"name": "ann", "roles": ["approver"]}
    for entry, said in (
        ({"name": "olga", "tenant": "other"}, "the token of 'olga': tenant: .*reserved"),
        ({"name": "nils", "tenant": "none"}, "the token of 'nils': tenant: .*reserved"),
        ({"name": 7, "roles": ["approver"]}, "entry 2: name"),
        ({"name": "eve\x1b[2J", "roles": []}, "name: .*control character U\\+001B"),
    ):
        path.write_text(json.dumps({"a-long-random-token-ann": ok, "a-long-secret-token": entry}))
        with pytest.raises(ConfigurationError, match=said) as refused:
            ApiSettings(api_tokens_file=path).tokens()
        assert "a-long-secret-token" not in str(refused.value)
    # an entry that is no object is told what one holds, not pydantic's words for it
    for entry, said in (
        (["approver"], "entry 2: is a list, not an object of its holder"),
        ("alice", "entry 2: is a string, not an object"),
    ):
        path.write_text(json.dumps({"a-long-random-token-ann": ok, "a-long-secret-token": entry}))
        with pytest.raises(ConfigurationError, match=said) as refused:
            ApiSettings(api_tokens_file=path).tokens()
        assert '{"name": "alice", "roles": ["approver"]}' in str(refused.value)
        assert "TokenSpec" not in str(refused.value) and ": :" not in str(refused.value)
    path.write_text('{"a-long-random-token-xyz": {"name": "x", "own_only": "maybe"}}')
    with pytest.raises(ConfigurationError, match="own_only"):
        ApiSettings(api_tokens_file=path).tokens()
    with pytest.raises(ConfigurationError, match="cannot read"):
        ApiSettings(api_tokens_file=tmp_path / "missing.json").tokens()


def test_a_token_revoked_in_the_tokens_file_stops_working_without_a_restart(
    stack: Stack, tmp_path: Path
) -> None:
    keep, revoke = "kept-token-of-kim-000001", "revoked-token-of-rex-0001"
    path = tmp_path / "tokens.json"
    both = {
        keep: {"name": "kim", "roles": ["approver"]},
        revoke: {"name": "rex", "roles": ["operator"]},
    }
    path.write_text(json.dumps(both))
    api = ApiSettings(api_tokens_file=path)
    with Server(make_api(stack.deployment.settings, api)) as server:

        def me(token: str) -> int:
            headers = {"Authorization": f"Bearer {token}"}
            return httpx.get(f"{server.url}/api/v1/me", headers=headers, timeout=10).status_code

        assert me(keep) == 200 and me(revoke) == 200
        path.write_text(json.dumps({keep: both[keep]}))
        assert me(revoke) == 401 and me(keep) == 200
        # a half-written file is not taken: the tokens in use stay
        path.write_text('{"kept-token-of-kim-000001": {"name": ')
        assert me(keep) == 200 and me(revoke) == 401
        path.write_text(json.dumps(both))
        assert me(revoke) == 200


def test_an_open_stream_ends_when_its_token_is_revoked_or_moved(
    stack: Stack, tmp_path: Path
) -> None:
    """A session may wait for a person for days: a stream opened with a token that is then
    removed from the tokens file, or moved to another tenant, stops within a poll or two
    instead of handing that session's events to whoever held it, and says why in a last
    `error` frame (what a request with the token would now be answered), not by closing."""
    import threading
    import time

    rex, tess, kim = (
        "rex-will-be-revoked-00001",
        "tess-will-be-moved-00001",
        "kim-keeps-her-token-0001",
    )
    path = tmp_path / "tokens.json"
    specs = {
        rex: {"name": "rex", "roles": ["approver"]},
        tess: {"name": "tess", "roles": ["approver"]},
        kim: {"name": "kim", "roles": ["approver"]},
    }
    path.write_text(json.dumps(specs))
    session_id = stack.waiting()
    with Server(make_api(stack.deployment.settings, ApiSettings(api_tokens_file=path))) as server:
        ended: dict[str, float] = {}
        last: dict[str, list[str]] = {}

        def follow(token: str) -> None:
            headers = {"Authorization": f"Bearer {token}"}
            url = f"{server.url}/api/v1/sessions/{session_id}/stream"
            with httpx.stream("GET", url, headers=headers, timeout=30) as answer:
                assert answer.status_code == 200
                lines: list[str] = []
                for line in answer.iter_lines():
                    lines = [] if lines and lines[-1] == "" else lines
                    lines.append(line)
            ended[token] = time.monotonic()
            last[token] = [line for line in lines if line]

        readers = [threading.Thread(target=follow, args=(t,), daemon=True) for t in specs]
        for reader in readers:
            reader.start()
        time.sleep(1.5)
        assert not ended, "a stream of a waiting session ended by itself"
        moved = {**specs, tess: {**specs[tess], "tenant": "team-z"}}
        del moved[rex]
        path.write_text(json.dumps(moved))
        for reader in readers[:2]:
            reader.join(10)
        assert set(ended) == {rex, tess}, "a stream outlived its token's revocation"
        assert kim not in ended
        for token, (status, code, said) in {
            rex: (401, "invalid_token", "was revoked"),
            tess: (404, "session_not_found", "no longer sees session"),
        }.items():
            kind, data = last[token][1:]
            assert kind == "event: error", last[token]
            refused = json.loads(data.removeprefix("data: "))
            assert (refused["status"], refused["code"]) == (status, code)
            assert said in refused["message"] and refused["last_id"] >= 1
        stack.http("alice").post(
            f"/api/v1/sessions/{session_id}/cancel"
        ).raise_for_status()  # kim's ends with the session
        readers[2].join(30)
        assert kim in ended
