"""The remote client's pieces that need no server: the stream's parser and resume state,
the reading of errors, and answers from a newer server (through httpx's MockTransport)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Status

from tickwork.remote import AsyncClient, Client, RemoteError
from tickwork.remote.stream import Follow

HEAD = {
    "id": "s-1",
    "kind": "repair",
    "status": "completed",
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:01Z",
    "model": "scripted",
    "outcome": None,
}


def frames(follow: Follow, text: str) -> list[tuple[int, str, Any]]:
    found = [follow.feed(line) for line in text.split("\n")]
    return [(f.id, f.kind, f.data) for f in found if f is not None]


def test_the_stream_parser_reads_frames_and_never_gives_an_event_twice() -> None:
    follow = Follow("s-1")
    text = (
        "retry: 2000\n\n"
        ": still here\n\n"
        'id: 3\nevent: created\ndata: {"id": 3,\ndata:  "kind": "created"}\n\n'
        'id: 4\nevent: model_called\ndata: {"id": 4}\n\n'
    )
    assert frames(follow, text) == [
        (3, "created", {"id": 3, "kind": "created"}),
        (4, "model_called", {"id": 4}),
    ]
    assert follow.last_id == 4 and follow.delay == 2.0
    # a resumed stream that starts again at 3 gives only what is new
    again = 'id: 4\nevent: model_called\ndata: {"id": 4}\n\nid: 5\nevent: completed\ndata: {}\n\n'
    assert frames(follow, again) == [(5, "completed", {})]
    end = 'id: 5\nevent: end\ndata: {"status": "completed", "last_id": 5}\n\n'
    assert frames(follow, end) == [(5, "end", {"status": "completed", "last_id": 5})]
    assert follow.ended


def test_a_stream_closed_by_a_refusal_raises_it_at_once() -> None:
    """A token revoked while it is followed: the server's last `error` frame is raised as
    the refusal a reconnect would get, not followed by reconnects that are refused."""
    follow = Follow("s-1", last_id=4)
    said = {"code": "invalid_token", "status": 401, "message": "was revoked", "last_id": 4}
    with pytest.raises(RemoteError) as refused:
        frames(follow, f"id: 4\nevent: error\ndata: {json.dumps(said)}\n\n")
    assert (refused.value.status, refused.value.code) == (401, "invalid_token")
    assert refused.value.message == "was revoked"


def test_a_frame_cut_by_a_dropped_connection_is_thrown_away() -> None:
    follow = Follow("s-1", last_id=2)
    assert frames(follow, 'id: 3\nevent: created\ndata: {"id"') == []
    follow.broke(httpx.ReadError("cut"), "http://x")
    assert follow.last_id == 2  # asked again from 2: event 3 comes whole
    assert frames(follow, 'id: 3\nevent: created\ndata: {"id": 3}\n\n') == [
        (3, "created", {"id": 3})
    ]


def _mock(handler: Any) -> tuple[httpx.MockTransport, httpx.MockTransport]:
    async def ahandler(request: httpx.Request) -> httpx.Response:
        return handler(request)  # type: ignore[no-any-return]

    return httpx.MockTransport(handler), httpx.MockTransport(ahandler)


def _call(
    mode: str,
    transports: tuple[httpx.MockTransport, httpx.MockTransport],
    name: str,
    *args: Any,
    url: str = "http://tw.test",
) -> Any:
    """`name(*args)` of a Client (`mode` "sync") or an AsyncClient ("async") at `url`,
    over the mock `transports` (`_mock`'s pair)."""
    sync, asynchronous = transports
    if mode == "sync":
        with Client(url, token="token-token-token-1", transport=sync) as c:
            return getattr(c, name)(*args)

    async def go() -> Any:
        async with AsyncClient(url, token="token-token-token-1", transport=asynchronous) as c:
            return await getattr(c, name)(*args)

    return asyncio.run(go())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_proxy_answer_and_a_newer_servers_fields_are_read_sensibly(mode: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer token-token-token-1"
        if request.url.path == "/api/v1/sessions/s-1":
            # a field this client does not know: left out, not refused
            return httpx.Response(200, json={"head": {**HEAD, "new_field": 1}, "steps": []})
        return httpx.Response(502, text="<html><body>Bad Gateway</body></html>")

    transports = _mock(answer)
    head = _call(mode, transports, "get", "s-1", url="http://tw.test/")
    assert head.status is Status.COMPLETED and head.id == "s-1"
    with pytest.raises(RemoteError) as proxy:
        _call(mode, transports, "me")
    assert proxy.value.status == 502 and proxy.value.code == "http_502"
    assert "http://tw.test/api/v1/me" in proxy.value.message
    assert "Bad Gateway" in proxy.value.message and "TICKWORK_SERVER" in proxy.value.message
    # a 502 is what a proxy says of a server behind it that is away, not of a wrong URL only
    assert "a proxy in front says the tickwork server behind it did not answer" in (
        proxy.value.message
    )


def test_a_proxy_page_other_than_a_gateway_s_asks_only_about_the_url() -> None:
    sync, _ = _mock(lambda request: httpx.Response(404, text="<html>Not Found</html>"))
    client = Client("http://tw.test", token="token-token-token-1", transport=sync)
    with client, pytest.raises(RemoteError) as other:
        client.me()
    assert other.value.message.endswith(
        "(<html>Not Found</html>); is TICKWORK_SERVER the tickwork API?"
    )


def test_an_idempotency_key_the_server_would_refuse_is_refused_before_it_is_sent() -> None:
    """An empty key was left out, so each retry made a session of its own."""
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201, json=HEAD)

    sync, _ = _mock(record)
    with Client("http://tw.test", token="token-token-token-1", transport=sync) as client:
        for bad in ("", "a key", "k" * 256):
            with pytest.raises(InvalidInput, match="is not 1 to 255 visible ASCII"):
                client.submit("repair", {}, idempotency_key=bad)
            with pytest.raises(InvalidInput, match="give a uuid you make for the request"):
                client.fork("s-1", from_step=0, idempotency_key=bad)
        client.submit("repair", {}, idempotency_key="k-1")
        client.submit("repair", {})
    assert [r.headers.get("idempotency-key") for r in sent] == ["k-1", None]


def test_a_wait_that_times_out_on_a_person_says_so_not_that_no_worker_runs() -> None:
    waiting = {**HEAD, "status": "waiting_approval"}
    sync, _ = _mock(lambda request: httpx.Response(200, json={"head": waiting, "steps": []}))
    client = Client("http://tw.test", token="token-token-token-1", transport=sync)
    with client, pytest.raises(TimeoutError) as late:
        client.wait("s-1", timeout=0, poll=0)
    said = str(late.value)
    assert "still waiting_approval after 0s, not a terminal status; it waits for a person" in said
    assert "worker" not in said


def test_an_api_error_keeps_its_details() -> None:
    body = {
        "code": "already_decided",
        "message": "call s1c0 was decided already",
        "decided_by": "bob",
    }
    sync, _ = _mock(lambda request: httpx.Response(409, json=body))
    client = Client("http://tw.test", token="token-token-token-1", transport=sync)
    with client, pytest.raises(RemoteError) as refused:
        client.approve("s-1", "s1c0", fingerprint="a" * 64)
    assert (refused.value.status, refused.value.code) == (409, "already_decided")
    assert refused.value.message == "call s1c0 was decided already"
    assert refused.value.details == {"decided_by": "bob"}


def test_a_body_the_apis_model_refuses_is_not_sent() -> None:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(201, json=HEAD)

    sync, _ = _mock(record)
    with Client("http://tw.test", token="token-token-token-1", transport=sync) as client:
        with pytest.raises(ValueError, match="session id"):
            client.submit("repair", {}, session_id="a b")
        with pytest.raises(ValueError, match="context_window"):
            client.submit("repair", {}, context_window=10)
        client.submit("repair", {"repo": "r", "test_cmd": "true"}, budgets={"max_steps": 3})
    assert len(sent) == 1
    assert json.loads(sent[0].content) == {
        "kind": "repair",
        "input": {"repo": "r", "test_cmd": "true"},
        "budgets": {"max_steps": 3},
    }


def test_help_shows_each_methods_own_parameters() -> None:
    """help() and IDEs read `inspect.signature`: `submit` showed no `kind` (taken for
    `self`), and a method of keywords only (`sessions`) had no signature at all."""
    import inspect

    for client in (Client("http://x:1", token="t" * 20), AsyncClient("http://x:1", token="t" * 20)):
        submit = inspect.signature(client.submit)
        assert list(submit.parameters)[:2] == ["kind", "input"], submit
        assert submit.return_annotation == "Head"
        sessions = inspect.signature(client.sessions)
        assert "tenant" in sessions.parameters and "status" in sessions.parameters
        assert list(inspect.signature(client.me).parameters) == []
        assert list(inspect.signature(type(client).get).parameters) == ["self", "session_id"]


def test_a_status_filter_takes_one_status_or_several_and_names_them_when_wrong() -> None:
    sent: list[list[str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/sessions":
            sent.append(request.url.params.get_list("status"))
            return httpx.Response(200, json=[])
        return httpx.Response(200, json={"head": {**HEAD, "status": "queued"}, "steps": []})

    sync, _ = _mock(answer)
    with Client("http://tw.test/", token="token-token-token-1", transport=sync) as c:
        c.sessions(status="queued")  # was read letter by letter: "'q' is not a valid Status"
        c.sessions(status=[Status.FAILED, "completed"])
        assert sent == [["queued"], ["failed", "completed"]]
        assert c.wait("s-1", until="queued", timeout=5).status is Status.QUEUED
        for call in (lambda: c.sessions(status=["nope"]), lambda: c.wait("s-1", until="nope")):
            with pytest.raises(InvalidInput, match="'nope' is not a session status") as bad:
                call()
            assert "waiting_approval" in str(bad.value)


def _fingerprint(call_id: str) -> str:
    return call_id[-1] * 64


def _served_decisions(sent: list[str], *, roles: tuple[str, ...] = ("approver",)) -> Any:
    """A server with session s-1 waiting on s1c1 (s1c0 ran already), for a token of `roles`."""
    call = {"call_id": "s1c1", "name": "danger", "fingerprint": _fingerprint("s1c1")}
    ran = {"call_id": "s1c0", "name": "echo", "fingerprint": _fingerprint("s1c0")}

    def answer(request: httpx.Request) -> httpx.Response:
        query = f"?{request.url.query.decode()}" if request.url.query else ""
        sent.append(f"{request.method} {request.url.path}{query}")
        path = request.url.path
        if path == "/api/v1/me":
            return httpx.Response(200, json={"name": "nora", "roles": list(roles)})
        if not roles:
            message = "nora holds no role; reading needs a role (submitter, approver or operator)"
            return httpx.Response(403, json={"code": "forbidden", "message": message})
        if path == "/api/v1/approvals/s-1":
            return httpx.Response(200, json={"session": HEAD, "calls": [call]})
        if path == "/api/v1/sessions/s-1":
            head = {**HEAD, "awaiting": ["s1c1"]}
            return httpx.Response(200, json={"head": head, "steps": [{"calls": [ran, call]}]})
        if path.endswith("/decision"):
            decided = json.loads(request.content)
            if decided["fingerprint"] != _fingerprint(path.split("/")[-2]):
                raise AssertionError(decided)
            if "s1c0" in path:
                message = "call s1c0 of session s-1 is not waiting for a decision"
                return httpx.Response(409, json={"code": "not_waiting", "message": message})
            return httpx.Response(200, json={**HEAD, "status": "ready"})
        raise AssertionError(path)

    return _mock(answer)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_decision_reads_only_the_waiting_calls_for_the_fingerprint(mode: str) -> None:
    """Without a fingerprint the client read the whole timeline (every step, call and
    event of a long session) for one call's fingerprint; the session's waiting calls do."""
    sent: list[str] = []
    transports = _served_decisions(sent)

    def approve(call_id: str) -> Any:
        return _call(mode, transports, "approve", "s-1", call_id)

    assert approve("s1c1").status is Status.READY
    assert sent == [
        "GET /api/v1/approvals/s-1?preview=false",  # its fingerprints, not its previews
        "POST /api/v1/sessions/s-1/calls/s1c1/decision",
    ]
    # a call not waiting: the server's own word, as locally
    with pytest.raises(RemoteError, match="s1c0 of session s-1 is not waiting"):
        approve("s1c0")
    # a call the session has not: named with the calls that wait, as locally
    with pytest.raises(LookupError, match=r"session s-1 has no call 's9c9'; waiting: s1c1"):
        approve("s9c9")


def test_a_server_that_takes_no_preview_parameter_is_asked_again_without_it() -> None:
    """A server from before `?preview=false` refuses a query parameter it does not take
    (422): the client asks again without it, and the decision is made."""
    sent: list[str] = []
    call = {"call_id": "s1c1", "name": "danger", "fingerprint": _fingerprint("s1c1")}

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(f"{request.method} {request.url}")
        if request.url.path == "/api/v1/approvals/s-1" and request.url.query:
            message = "GET /api/v1/approvals/{session_id} takes no query parameter 'preview'"
            return httpx.Response(422, json={"code": "invalid_input", "message": message})
        if request.url.path == "/api/v1/approvals/s-1":
            return httpx.Response(200, json={"session": HEAD, "calls": [call]})
        assert json.loads(request.content)["fingerprint"] == _fingerprint("s1c1")
        return httpx.Response(200, json={**HEAD, "status": "ready"})

    sync, _ = _mock(answer)
    with Client("http://tw.test", token="token-token-token-1", transport=sync) as client:
        assert client.approve("s-1", "s1c1").status is Status.READY
    assert [s.split(" ")[0] for s in sent] == ["GET", "GET", "POST"]


def test_a_token_of_no_role_is_told_a_decision_needs_the_approver_role() -> None:
    sent: list[str] = []
    sync, _ = _served_decisions(sent, roles=())
    client = Client("http://tw.test", token="token-token-token-1", transport=sync)
    with client, pytest.raises(RemoteError) as refused:
        client.approve("s-1", "s1c1")
    assert (refused.value.status, refused.value.code) == (403, "forbidden")
    assert refused.value.message == "nora holds no role; this needs the approver role"
    assert not any(s.startswith("POST") for s in sent)


def test_a_submit_sends_a_price_of_two_to_four_rates_and_refuses_more() -> None:
    sent: list[Any] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content)["price"])
        return httpx.Response(201, json={**HEAD, "status": "ready"})

    sync, _ = _mock(answer)
    with Client("http://tw.test/", token="token-token-token-1", transport=sync) as c:
        c.submit("repair", {}, price=(0.5, 1.5))
        c.submit("repair", {}, price=(0.5, 1.5, 0.05))
        c.submit("repair", {}, price=(0.5, 1.5, 0.05, 0.625))
        # checked before it is sent, by the API's own model of the body
        with pytest.raises(ValueError, match="price") as refused:
            c.submit("repair", {}, price=(0.5, 1.5, 0.05, 0.625, 1))
    assert sent == [[0.5, 1.5], [0.5, 1.5, 0.05], [0.5, 1.5, 0.05, 0.625]]
    assert "at most 4 items" in str(refused.value)


def _served_ids(
    sent: list[str],
    ids: list[str],
    *,
    takes_prefix: bool = True,
    archived: tuple[str, ...] = (),
    says_archived: bool = True,
) -> Any:
    """A server with the live sessions `ids` (a server from before `id_prefix` if not
    `takes_prefix`), answering a session's head, a dead letter of each, and the listing;
    a session's 404 says whether its id is one of the `archived` (a server from before
    `archived` if not `says_archived`: its 404s say nothing of it)."""

    def answer(request: httpx.Request) -> httpx.Response:
        query = f"?{request.url.query.decode()}" if request.url.query else ""
        sent.append(f"{request.method} {request.url.path}{query}")
        parts = request.url.path.split("/")[3:]
        if parts == ["sessions"]:
            prefix = request.url.params.get("id_prefix")
            if not takes_prefix:
                message = "GET /api/v1/sessions takes no query parameter 'id_prefix'"
                return httpx.Response(422, json={"code": "invalid_input", "message": message})
            found = [{**HEAD, "id": i} for i in ids if i.startswith(prefix or "")]
            return httpx.Response(200, json=found[: int(request.url.params["limit"])])
        if parts[0] == "sessions" and parts[1] in ids:
            return httpx.Response(200, json={"head": {**HEAD, "id": parts[1]}, "steps": []})
        if parts[0] == "dead-letters" and parts[1] in ids:
            return httpx.Response(200, json={"id": 7, "session_id": parts[1]})
        if parts[0] == "dead-letters":
            message = f"no dead letter has id or session id {parts[1]!r}; list them"
            return httpx.Response(404, json={"code": "dead_letter_not_found", "message": message})
        message = f"no session {parts[1]!r}; list sessions with `tickwork ls`"
        body = {"code": "session_not_found", "message": message}
        if says_archived:
            body["archived"] = parts[1] in archived
        return httpx.Response(404, json=body)

    return answer


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_whole_id_costs_no_request_more_and_a_start_is_looked_up_after_its_404(
    mode: str,
) -> None:
    ids = ["3f9a0c11", "3f9a0c22", "7d1e00aa", "123456ab"]
    sent: list[str] = []
    transports = _mock(_served_ids(sent, ids))

    def run(name: str, *args: Any) -> Any:
        sent.clear()
        return _call(mode, transports, name, *args)

    assert run("get", "3f9a0c11").id == "3f9a0c11"
    assert sent == ["GET /api/v1/sessions/3f9a0c11"]
    assert run("get", "7d1e00").id == "7d1e00aa"
    assert sent == [
        "GET /api/v1/sessions/7d1e00",
        "GET /api/v1/sessions?id_prefix=7d1e00&limit=6",
        "GET /api/v1/sessions/7d1e00aa",
    ]
    assert run("session_id", "7d1e00") == "7d1e00aa"
    assert run("session_id", "3f9a0c11") == "3f9a0c11"
    # a custom id's start is looked up too; one with a character no id has is not
    assert run("session_id", "nothing-like-it") == "nothing-like-it"
    assert sent == ["GET /api/v1/sessions?id_prefix=nothing-like-it&limit=6"]
    assert run("session_id", "nothing like it") == "nothing like it" and sent == []
    with pytest.raises(RemoteError) as several:
        run("timeline", "3f9a0c")
    assert (several.value.status, several.value.code) == (422, "invalid_input")
    assert several.value.message == (
        "'3f9a0c' is the start of 2 session ids (3f9a0c11, 3f9a0c22); give more characters "
        "of the one you mean"
    )
    assert several.value.details["candidates"] == ["3f9a0c11", "3f9a0c22"]
    with pytest.raises(RemoteError, match="'3f9a0c' is the start of 2 session ids"):
        run("session_id", "3f9a0c")
    with pytest.raises(RemoteError) as none:
        run("cancel", "abcdef")
    assert (none.value.status, none.value.code) == (404, "session_not_found")
    assert none.value.message.startswith("no session 'abcdef', and no session id starts with it")
    with pytest.raises(RemoteError) as short:
        run("events", "7d1e0")
    assert short.value.message.startswith(
        "no session '7d1e0' (give at least 6 characters to name one by its id's start)"
    )
    assert sent == ["GET /api/v1/sessions/7d1e0/events?after=0&limit=1000"]
    with pytest.raises(RemoteError) as other:
        run("get", "not an id")  # no id has a space: nothing more is asked
    assert other.value.message.startswith(
        "no session 'not an id' (no session id has that character: an id holds letters, "
        "digits, '_', '.' and '-', a letter or digit first); list"
    )

    assert run("dead_letter", "7d1e00")["session_id"] == "7d1e00aa"
    with pytest.raises(RemoteError, match="no dead letter has id or session id '123456'"):
        run("dead_letter", "123456")  # digits: a letter's id or a whole session id only
    assert "id_prefix" not in " ".join(sent)
    with pytest.raises(RemoteError, match="no dead letter has id or session id 'abcdef'"):
        run("dead_letter", "abcdef")
    with pytest.raises(RemoteError, match="'3f9a0c' is the start of 2 session ids"):
        run("resolve_dead_letter", "3f9a0c", "looked")


def test_a_whole_id_that_more_ids_start_with_than_the_listing_holds_names_itself() -> None:
    """`session_id` of a whole id that seven ids start with (itself the oldest, so not among
    the six the listing answers) said it was ambiguous, naming the six others."""
    sent: list[str] = []
    newer = [f"abcdef-{n}" for n in range(7, 1, -1)]
    sync, _ = _mock(_served_ids(sent, [*newer, "abcdef"]))
    with Client("http://tw.test", token="token-token-token-1", transport=sync) as client:
        assert client.session_id("abcdef") == "abcdef"
        assert sent[-1] == "GET /api/v1/sessions/abcdef/events?limit=1"
        with pytest.raises(RemoteError, match="'abcdef-' is the start of more than 5 session"):
            client.session_id("abcdef-")


def test_a_whole_uuid_is_asked_whole_and_one_of_no_session_is_refused_at_once() -> None:
    """`session_id` of a whole uuid (as tickwork makes an id, or with its dashes) asks for
    that session first: a live or an archived session's is given back without a listing (an
    archived one's, which `fork` and `patch` read back, is told from none by the 404's
    `archived`), and one no session has is looked up as a start (a custom id may be a uuid
    with more after it), else refused at once, as the operation would refuse it. A named
    operation refused an archived session's whole id looks for no start."""
    made, dashed, old, gone = (
        uuid.uuid4().hex,
        str(uuid.uuid4()),
        str(uuid.uuid4()),
        str(uuid.uuid4()),
    )
    sent: list[str] = []
    sync, _ = _mock(_served_ids(sent, [made, f"{dashed}-b"], archived=(old,)))
    with Client("http://tw.test", token="token-token-token-1", transport=sync) as client:
        assert client.session_id(made) == made
        assert client.session_id(old) == old
        assert sent == [f"GET /api/v1/sessions/{w}/events?limit=1" for w in (made, old)]
        sent.clear()
        assert client.session_id(dashed) == f"{dashed}-b"
        assert sent == [
            f"GET /api/v1/sessions/{dashed}/events?limit=1",
            f"GET /api/v1/sessions?id_prefix={dashed}&limit=6",
        ]
        sent.clear()
        with pytest.raises(RemoteError) as none:
            client.session_id(gone)
        assert (none.value.status, none.value.code) == (404, "session_not_found")
        assert none.value.message.startswith(
            f"no session '{gone}', and no session id starts with it; list sessions with "
            "`tickwork ls`"
        )
        assert len(sent) == 2  # the session, and the start: nothing more is asked
        sent.clear()
        assert client.get(dashed).id == f"{dashed}-b"
        assert sent == [
            f"GET /api/v1/sessions/{dashed}",
            f"GET /api/v1/sessions?id_prefix={dashed}&limit=6",
            f"GET /api/v1/sessions/{dashed}-b",
        ]
        sent.clear()
        with pytest.raises(RemoteError) as archived:
            client.timeline(old)
        assert archived.value.details["archived"] is True
        assert sent == [f"GET /api/v1/sessions/{old}"]  # a whole id: no start looked for


def test_a_server_that_does_not_say_archived_has_a_whole_uuid_given_back() -> None:
    """A server from before `archived` answers an archived session's id and one of no
    session alike: `session_id` gives a whole uuid back, for the operation to try."""
    given = str(uuid.uuid4())
    sent: list[str] = []
    sync, _ = _mock(_served_ids(sent, [], says_archived=False))
    with Client("http://tw.test", token="token-token-token-1", transport=sync) as client:
        assert client.session_id(given) == given
    assert sent == [f"GET /api/v1/sessions/{given}/events?limit=1"]


def test_a_listing_that_ignored_the_start_names_no_other_session() -> None:
    """A server (or a proxy) that answered the listing without its `id_prefix` filter: the
    ids it names that do not start with what was given are not taken for it, so a cancel of
    a start acts on no unrelated session."""
    sent: list[str] = []
    served = _served_ids(sent, ["aaaaaa11"])

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/sessions":
            sent.append(f"{request.method} {request.url.path}")
            return httpx.Response(200, json=[{**HEAD, "id": "aaaaaa11"}])
        return served(request)

    sync, _ = _mock(answer)
    client = Client("http://tw.test", token="token-token-token-1", transport=sync)
    with client, pytest.raises(RemoteError) as none:
        client.cancel("7d1e00")
    assert (none.value.status, none.value.code) == (404, "session_not_found")
    assert sent == ["POST /api/v1/sessions/7d1e00/cancel", "GET /api/v1/sessions"]


def test_a_server_that_takes_no_id_prefix_keeps_its_refusal_of_a_start() -> None:
    sent: list[str] = []
    sync, _ = _mock(_served_ids(sent, ["7d1e00aa"], takes_prefix=False))
    with Client("http://tw.test", token="token-token-token-1", transport=sync) as client:
        with pytest.raises(RemoteError, match=r"^no session '7d1e00'; list sessions"):
            client.get("7d1e00")
        assert client.session_id("7d1e00") == "7d1e00"
        assert client.get("7d1e00aa").id == "7d1e00aa"


def test_a_watch_of_a_start_follows_the_one_session_it_names() -> None:
    sent: list[str] = []
    served = _served_ids(sent, ["7d1e00aa"])

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/sessions/7d1e00aa/stream":
            sent.append(request.url.path)
            end = 'id: 3\nevent: end\ndata: {"status": "completed", "last_id": 3}\n\n'
            return httpx.Response(200, text=end, headers={"content-type": "text/event-stream"})
        if request.url.path.endswith("/stream"):
            sent.append(request.url.path)
            given = request.url.path.split("/")[4]
            message = f"no session {given!r}; list sessions with `tickwork ls`"
            return httpx.Response(404, json={"code": "session_not_found", "message": message})
        return served(request)  # type: ignore[no-any-return]

    sync, _ = _mock(answer)
    with Client("http://tw.test", token="token-token-token-1", transport=sync) as client:
        assert [f.kind for f in client.watch("7d1e00")] == ["end"]
        assert sent == [
            "/api/v1/sessions/7d1e00/stream",
            "GET /api/v1/sessions?id_prefix=7d1e00&limit=6",
            "/api/v1/sessions/7d1e00aa/stream",
        ]
        with pytest.raises(RemoteError, match="no session 'ffffff', and no session id starts"):
            list(client.watch("ffffff"))
    assert sent[-1] == "GET /api/v1/sessions?id_prefix=ffffff&limit=6"


def test_a_start_of_more_ids_than_listed_is_ambiguous_on_a_server_before_archived() -> None:
    """A server from before `archived`, whose 404s say nothing of it: a start more ids
    begin with than the listing holds is refused as ambiguous, as before; its 404 for the
    start read as a whole id is no session's."""
    sent: list[str] = []
    newer = [f"abcdef-{n}" for n in range(7, 1, -1)]
    sync, _ = _mock(_served_ids(sent, [*newer, "abcdef"], says_archived=False))
    ambiguous = "'abcdef-' is the start of more than 5 session"
    with (
        Client("http://tw.test", token="token-token-token-1", transport=sync) as client,
        pytest.raises(RemoteError, match=ambiguous),
    ):
        client.session_id("abcdef-")
