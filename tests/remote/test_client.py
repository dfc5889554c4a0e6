"""`tickwork.remote.Client` and `AsyncClient` against a live `tickwork serve`, on SQLite and
on Postgres: every method, each through both clients."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import functools
import io
import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tickwork.fsm.errors import ConfigurationError, SessionFinished
from tickwork.fsm.values import Status

from tests.e2e.conftest import Cli
from tests.ports import free_port
from tests.remote.conftest import TEST_KIND, TOKEN, Remote, until
from tickwork.remote import (
    AsyncClient,
    Client,
    RemoteError,
    RepairInput,
    ServerUnreachable,
    Streamed,
)

ECHO = [
    {"content": "say it", "tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]},
    {"content": "said"},
]
DANGERS = [
    {
        "content": "three risky calls",
        "tool_calls": [{"name": "danger", "arguments": {"value": v}} for v in ("a", "b", "c")],
    },
    {"content": "all done"},
]


class Api:
    """One client's methods called alike: the blocking client, or the async one run in an
    event loop of its own for each call."""

    def __init__(self, remote: Remote, mode: str, who: str) -> None:
        self.remote, self.mode, self.who = remote, mode, who

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.mode == "sync":
                with self.remote.client(self.who) as client:
                    return getattr(client, name)(*args, **kwargs)

            async def run() -> Any:
                async with self.remote.aclient(self.who) as client:
                    return await getattr(client, name)(*args, **kwargs)

            return asyncio.run(run())

        return call

    def watch(self, session_id: str, **kw: Any) -> list[Streamed]:
        if self.mode == "sync":
            with self.remote.client(self.who) as client:
                return list(client.watch(session_id, **kw))

        async def run() -> list[Streamed]:
            async with self.remote.aclient(self.who) as client:
                return [f async for f in client.watch(session_id, **kw)]

        return asyncio.run(run())


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def api(remote: Remote, mode: str, who: str = "fuzz") -> Api:
    return Api(remote, mode, who)


def submitted(remote: Remote, mode: str, replies: list[dict[str, Any]], **kw: Any) -> str:
    head = api(remote, mode, "sam").submit(
        TEST_KIND,
        remote.input(),
        model=remote.script(replies),
        session_id=f"r-{uuid.uuid4().hex[:10]}",
        **kw,
    )
    return str(head.id)


def test_submit_get_list_wait_events_and_timeline(remote: Remote, mode: str) -> None:
    sam, alice = api(remote, mode, "sam"), api(remote, mode, "alice")
    assert sam.me().name == "sam" and sam.me().roles == ("submitter",)
    session_id = submitted(remote, mode, ECHO, budgets={"max_steps": 7})
    done = alice.wait(session_id, timeout=60, poll=0.1)
    assert done.status is Status.COMPLETED and done.final_answer == "said"
    assert done.submitted_by == "sam" and done.budgets.max_steps == 7
    assert done.outcome is None  # not a repair
    assert alice.get(session_id) == done
    listed = alice.sessions(status=[Status.COMPLETED], kind=TEST_KIND, limit=500)
    assert session_id in [h.id for h in listed]
    assert session_id not in [h.id for h in alice.sessions(status=["failed"], limit=500)]

    page = alice.events(session_id)
    kinds = [e.kind for e in page.events]
    assert page.status is Status.COMPLETED and kinds[0] == "created" and kinds[-1] == "completed"
    assert page.last_id == page.events[-1].id and page.events[0].event is not None
    rest = alice.events(session_id, after=page.events[1].id, limit=2)
    assert [e.id for e in rest.events] == [e.id for e in page.events[2:4]]

    view = alice.timeline(session_id)
    assert view["head"]["id"] == session_id and view["forks"] == [] and view["lease"] is None
    assert view["steps"][0]["calls"][0]["observation"]["content"] == "hi"
    # a finished session never reaches another status: said at once, not polled to the end
    with pytest.raises(SessionFinished, match="it is completed and will never be failed"):
        alice.wait(session_id, until=[Status.FAILED], timeout=30, poll=0.05)


def test_decide_each_way_then_fork_and_cancel(remote: Remote, mode: str) -> None:
    alice, olga = api(remote, mode, "alice"), api(remote, mode, "olga")
    session_id = submitted(remote, mode, DANGERS)
    waiting = alice.wait(session_id, until=[Status.WAITING_APPROVAL], timeout=60, poll=0.1)
    assert waiting.awaiting == ("s1c0", "s1c1", "s1c2")
    card = alice.waiting(session_id)
    assert [c["call_id"] for c in card["calls"]] == ["s1c0", "s1c1", "s1c2"]
    seen = remote.deployment.client.load(session_id).call("s1c0")
    assert seen is not None
    head = alice.approve(session_id, "s1c0", fingerprint=seen.fingerprint, comment="fine")
    assert head.awaiting == ("s1c1", "s1c2")
    alice.edit(session_id, "s1c1", {"value": "B"})
    with pytest.raises(RemoteError) as stale:
        alice.decide(session_id, "s1c2", "reject", fingerprint="0" * 64)
    assert stale.value.status == 409 and stale.value.code
    with pytest.raises(RemoteError) as not_in_doubt:
        alice.provide_output(session_id, "s1c2", "made up")
    assert not_in_doubt.value.status == 409 and not_in_doubt.value.code == "not_in_doubt"
    assert "not in doubt" in not_in_doubt.value.message
    alice.reject(session_id, "s1c2", feedback="not c")
    done = alice.wait(session_id, timeout=60, poll=0.1)
    assert done.status is Status.COMPLETED
    decisions = {d.call_id: d for d in remote.deployment.client.load(session_id).decisions}
    assert {d.approver for d in decisions.values()} == {"alice"}
    assert decisions["s1c0"].comment == "fine" and decisions["s1c1"].arguments == {"value": "B"}
    assert decisions["s1c2"].feedback == "not c"

    fork = olga.fork(
        session_id,
        from_step=1,
        tool_outputs={"s1c2": "patched by hand"},
        budgets={"max_steps": 9},
        new_id=f"f-{uuid.uuid4().hex[:8]}",
    )
    assert fork.parent_id == session_id and fork.fork_step == 1 and fork.submitted_by == "olga"
    assert alice.wait(fork.id, timeout=60, poll=0.1).final_answer == "all done"
    assert [f["id"] for f in alice.timeline(session_id)["forks"]] == [fork.id]
    assert [h.id for h in alice.sessions(parent_id=session_id)] == [fork.id]
    by_olga = alice.sessions(submitted_by="olga", limit=500)
    assert fork.id in [h.id for h in by_olga] and session_id not in [h.id for h in by_olga]

    held = submitted(remote, mode, DANGERS)
    alice.wait(held, until=[Status.WAITING_APPROVAL], timeout=60, poll=0.1)
    assert alice.cancel(held).status is Status.CANCELLED
    with pytest.raises(RemoteError, match="already cancelled") as again:
        alice.cancel(held)
    assert again.value.status == 409


def test_dead_letters_list_show_stats_export_fork_resolve_dismiss(
    remote: Remote, mode: str
) -> None:
    olga = api(remote, mode, "olga")
    over = [submitted(remote, mode, ECHO, budgets={"max_steps": 1}) for _ in range(3)]
    for session_id in over:
        assert olga.wait(session_id, timeout=60, poll=0.1).status is Status.FAILED
    letters = olga.dead_letters(code="budget_steps", since="1h", unresolved=True, limit=1000)
    mine = {d.session_id: d for d in letters if d.session_id in over}
    assert set(mine) == set(over) and {d.code for d in mine.values()} == {"BUDGET_STEPS"}
    shown = olga.dead_letter(mine[over[0]].id)
    assert shown == olga.dead_letter(over[0])
    assert shown["session"]["head"]["id"] == over[0] and shown["forks"] == []
    stats = olga.dead_letter_stats()
    assert set(stats["by"]) == {"code", "kind", "model", "last_tool", "error_signature"}
    assert stats["total"] >= 3
    assert list(olga.dead_letter_stats(by="code", since="1d")["by"]) == ["code"]

    jsonl = olga.export_dead_letters(code="BUDGET_STEPS", snapshot=True)
    rows = [json.loads(line) for line in jsonl.decode().splitlines()]
    assert set(over) <= {r["session_id"] for r in rows}
    assert all(r["snapshot"]["session"]["head"]["id"] == r["session_id"] for r in rows)
    table = list(csv.DictReader(io.StringIO(olga.export_dead_letters(format="csv").decode())))
    assert set(over) <= {r["session_id"] for r in table}

    with pytest.raises(RemoteError) as bad_model:
        olga.fork_dead_letter(over[0], from_step=1, budgets={"max_steps": 5}, model="gemini:pro")
    assert bad_model.value.status == 422 and bad_model.value.code == "invalid_model_spec"
    assert bad_model.value.message.startswith("`model`: ")
    assert olga.dead_letter(over[0])["forks"] == []
    model = remote.script(ECHO)
    fork = olga.fork_dead_letter(over[0], from_step=1, budgets={"max_steps": 5}, model=model)
    assert fork.parent_id == over[0] and fork.model == model
    with pytest.raises(RemoteError, match="already forked") as twice:
        olga.fork_dead_letter(over[0], from_step=1, budgets={"max_steps": 5})
    assert twice.value.status == 409
    again = olga.fork_dead_letter(over[0], from_step=1, budgets={"max_steps": 5}, again=True)
    assert again.parent_id == over[0]
    resolved = olga.resolve_dead_letter(over[1], "fixed upstream")
    assert resolved.resolution is not None and resolved.resolution["state"] == "resolved"
    assert resolved.resolution["by"] == "olga" and resolved.resolved_at is not None
    dismissed = olga.dismiss_dead_letter(mine[over[2]].id, "a test run")
    assert dismissed.resolution is not None and dismissed.resolution["state"] == "dismissed"
    left = olga.dead_letters(unresolved=True, limit=1000)
    assert not set(over) & {d.session_id for d in left}


def test_the_api_errors_arrive_as_one_exception_with_code_status_and_message(
    remote: Remote, mode: str
) -> None:
    alice = api(remote, mode, "alice")
    with pytest.raises(RemoteError) as missing:
        alice.get("no-such-session")
    assert missing.value.status == 404 and "no-such-session" in missing.value.message
    assert missing.value.code == "session_not_found"
    with pytest.raises(RemoteError) as forbidden:
        alice.submit(TEST_KIND, remote.input(), model=remote.script(ECHO))
    assert forbidden.value.status == 403 and "submitter" in forbidden.value.message
    with pytest.raises(RemoteError) as bad:
        api(remote, mode, "sam").submit(TEST_KIND, {"x": 1}, model="scripted:/etc/passwd")
    assert bad.value.status == 422 and bad.value.code == "model_not_allowed"
    assert "TICKWORK_API_SCRIPTED_ROOTS" in bad.value.message
    with pytest.raises(RemoteError) as unknown_token:
        if mode == "sync":
            with Client(remote.url, token="not-a-token-of-this-server") as client:
                client.me()
        else:
            from tickwork.remote import AsyncClient

            async def run() -> None:
                async with AsyncClient(remote.url, token="not-a-token-of-this-server") as c:
                    await c.me()

            asyncio.run(run())
    assert unknown_token.value.status == 401
    nowhere = Client(f"http://127.0.0.1:{free_port()}", token="x" * 20)
    with nowhere, pytest.raises(ServerUnreachable, match="cannot reach the tickwork server"):
        nowhere.me()
    # the server answers, but the address has a wrong path: say so, naming the URL asked
    astray = Client(remote.url + "/tickwork", token=TOKEN["alice"])
    with astray, pytest.raises(RemoteError) as no_route:
        astray.me()
    assert no_route.value.status == 404 and no_route.value.code == "not_found"
    said = no_route.value.message
    assert f"GET {remote.url}/tickwork/api/v1/me is no route" in said, said
    assert "TICKWORK_SERVER (--server)" in said, said


def test_server_and_token_come_from_the_constructor_or_the_environment(
    remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_SERVER", remote.url + "/api/v1/")
    monkeypatch.setenv("TICKWORK_TOKEN", TOKEN["olga"])
    with Client() as client:
        assert client.me().name == "olga" and client.base_url == remote.url
    with Client(token=TOKEN["alice"]) as client:
        assert client.me().name == "alice"
    monkeypatch.delenv("TICKWORK_TOKEN")
    with pytest.raises(ConfigurationError, match="TICKWORK_TOKEN"):
        Client()
    monkeypatch.delenv("TICKWORK_SERVER")
    with pytest.raises(ConfigurationError, match="TICKWORK_SERVER"):
        Client(token="x" * 20)
    with pytest.raises(ConfigurationError, match="http:// or https://"):
        Client("ftp://example.com", token="x" * 20)


def test_a_watch_gives_every_event_once_then_end(remote: Remote, mode: str) -> None:
    session_id = submitted(remote, mode, ECHO)
    frames = api(remote, mode, "alice").watch(session_id)
    ids = [f.id for f in frames if f.kind != "end"]
    assert frames[-1].kind == "end" and frames[-1].data["status"] == "completed"
    assert ids == sorted(set(ids)) and frames[-2].kind == "completed"
    everything = remote.deployment.client.store.events_after(session_id, 0, 1000)
    assert ids == [i for i, _ in everything]
    later = api(remote, mode, "alice").watch(session_id, after=ids[2])
    assert [f.id for f in later if f.kind != "end"] == ids[3:]


def test_a_watch_survives_a_server_restart_without_losing_or_doubling_events(
    remote: Remote, mode: str
) -> None:
    session_id = submitted(remote, mode, DANGERS)
    got: list[Streamed] = []
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            if mode == "sync":
                with remote.client("alice") as client:
                    got.extend(client.watch(session_id, give_up_after=90))
                return

            async def run() -> None:
                async with remote.aclient("alice") as client:
                    async for frame in client.watch(session_id, give_up_after=90):
                        got.append(frame)

            asyncio.run(run())
        except BaseException as exc:
            failed.append(exc)

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    until(
        lambda: any(f.kind == "approval_requested" for f in got),
        timeout=60,
        what="the watch to see the approval request",
    )
    remote.served.stop()
    try:
        client = remote.deployment.client
        for call_id in ("s1c0", "s1c1", "s1c2"):
            client.approve(session_id, call_id, approver="alice")
        remote.wait(session_id, Status.COMPLETED)
    finally:
        remote.served.start()
    watcher.join(90)
    assert not watcher.is_alive() and not failed, failed
    ids = [f.id for f in got if f.kind != "end"]
    everything = remote.deployment.client.store.events_after(session_id, 0, 1000)
    assert ids == [i for i, _ in everything]  # none lost, none twice, in order
    assert got[-1].kind == "end" and got[-1].data["status"] == "completed"
    assert [f.kind for f in got].count("approval_decided") == 3


def test_a_watch_gives_up_with_a_clear_error_when_the_server_stays_away() -> None:
    nowhere = Client(f"http://127.0.0.1:{free_port()}", token="x" * 20)
    with nowhere, pytest.raises(ServerUnreachable, match="cannot reach"):
        next(iter(nowhere.watch("any", give_up_after=0.5)))


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that takes every connection and request and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for conn in held:
        conn.close()


def test_an_answer_that_never_comes_says_the_request_may_have_been_carried_out(
    silent: str,
) -> None:
    """A submit whose answer does not come in time may have been stored: the error says
    so and how to retry safely, not that the server cannot be reached; a read says to try
    again; an address nobody listens on still asks whether the server runs there."""
    with Client(silent, token="x" * 20, timeout=0.3) as client:
        with pytest.raises(ServerUnreachable) as lost:
            client.submit(TEST_KIND, {}, model="scripted:/s.json", idempotency_key="k-1")
        with pytest.raises(ServerUnreachable) as late:
            client.get("3f9a0c2e")
    said = lost.value.message
    assert said.startswith(f"the tickwork server at {silent} did not answer POST /api/v1/sessions")
    assert "within 0.3s (the client's timeout); it may have been carried out" in said
    assert "the same idempotency_key gets the session the first made" in said
    assert lost.value.code == "unreachable" and lost.value.status is None
    assert "did not answer GET /api/v1/sessions/3f9a0c2e within 0.3s" in late.value.message
    assert "try again" in late.value.message and "cannot reach" not in late.value.message

    async def lost_async() -> str:
        async with AsyncClient(silent, token="x" * 20, timeout=0.3) as client:
            with pytest.raises(ServerUnreachable) as lost:
                await client.cancel("3f9a0c2e")
            return lost.value.message

    assert "did not answer" in asyncio.run(lost_async())
    nowhere = Client(f"http://127.0.0.1:{free_port()}", token="x" * 20)
    with nowhere, pytest.raises(ServerUnreachable, match=r"cannot reach .* is `tickwork serve`"):
        nowhere.submit(TEST_KIND, {}, model="scripted:/s.json")


def test_the_cli_with_a_server_takes_its_request_timeout_from_the_environment(
    silent: str, tmp_path: Path
) -> None:
    """A submit whose repository the server clones may take more than the client's 30 s;
    the command line had no way to wait longer (nor shorter)."""
    env = {"TICKWORK_SERVER": silent, "TICKWORK_TOKEN": "x" * 20, "HOME": str(tmp_path)}
    cli = Cli(env, tmp_path)
    late = cli.inline("ls", ok=False, TICKWORK_SERVER_TIMEOUT_S="0.4")
    late.error(1, "did not answer GET /api/v1/sessions within 0.4s (the client's timeout)")
    for bad in ("soon", "0", "inf"):
        refused = cli.inline("ls", ok=False, TICKWORK_SERVER_TIMEOUT_S=bad)
        refused.error(2, "TICKWORK_SERVER_TIMEOUT_S must be a number of seconds above 0")


def test_the_repair_input_is_typed_in_the_schema_and_takes_the_cli_names(remote: Remote) -> None:
    schema = httpx.get(f"{remote.url}/api/v1/openapi.json").json()
    found = schema["components"]["schemas"]
    submit = found["Submit"]
    assert submit["discriminator"]["propertyName"] == "kind"
    assert submit["discriminator"]["mapping"] == {"repair": "#/components/schemas/RepairSubmit"}
    assert {"$ref": "#/components/schemas/KindSubmit"} in submit["oneOf"]
    repair = found["RepairSubmit"]
    assert repair["properties"]["input"] == {"$ref": "#/components/schemas/RepairInput"}
    fields = found["RepairInput"]["properties"]
    assert {"repo", "ref", "workspace", "test_command", "goal", "setup", "network"} <= set(fields)
    assert {"egress_allow", "test_timeout_s"} <= set(fields)
    assert "test_cmd" in fields["test_command"]["description"]
    assert found["RepairInput"]["required"] == ["test_command"]


def test_a_repair_takes_test_cmd_as_well_as_test_command(remote: Remote, mode: str) -> None:
    project = remote.deployment.tmp / "project"
    project.mkdir(exist_ok=True)
    (project / "a.py").write_text("A = 1\n")
    sam = api(remote, mode, "sam")
    done = remote.script([{"content": "done"}])
    given = RepairInput(workspace=str(project), test_cmd="true", setup="none")
    typed = sam.submit("repair", given, model=done)
    raw = sam.submit(
        "repair", {"workspace": str(project), "test_cmd": "true", "setup": "none"}, model=done
    )
    for head in (typed, raw):
        assert head.config["test_command"] == "true"
    with pytest.raises(RemoteError, match="not both") as both:
        sam.submit(
            "repair",
            {"workspace": str(project), "test_cmd": "true", "test_command": "false"},
            model=done,
        )
    assert both.value.status == 422


def test_a_start_of_an_id_names_one_session(remote: Remote, mode: str) -> None:
    """A method of one session (and `watch`) takes a unique start of its id, and refuses
    one that starts several ids, naming them, or none."""
    sam = api(remote, mode, "sam")
    start = uuid.uuid4().hex[:8]
    ids = sorted(
        sam.submit(
            TEST_KIND, remote.input(), model=remote.script(ECHO), session_id=f"{start}{tail}"
        ).id
        for tail in ("a1", "b1", "b2")
    )
    fuzz = api(remote, mode, "fuzz")
    assert fuzz.session_id(f"{start}a") == ids[0]
    assert fuzz.wait(f"{start}a", timeout=60, poll=0.1).id == ids[0]
    assert [f.kind for f in fuzz.watch(f"{start}a")][-1] == "end"
    with pytest.raises(RemoteError) as several:
        fuzz.get(f"{start}b")
    assert several.value.status == 422 and several.value.details["candidates"] == ids[1:]
    with pytest.raises(RemoteError, match=f"no session '{start}c', and no session id starts"):
        fuzz.timeline(f"{start}c")


def test_a_fork_and_a_dead_letter_s_fork_take_a_price(remote: Remote, mode: str) -> None:
    """`fork` and `fork_dead_letter` take `price` for the fork's model, checked as a
    submit's: a rate the body refuses before any request, one below the configured price
    or for a model the server has no price for by the server (422 naming `price`), and
    nothing is stored for a refused one."""
    from pydantic import ValidationError

    olga = api(remote, mode, "olga")
    done = submitted(remote, mode, ECHO)
    failed = submitted(remote, mode, ECHO, budgets={"max_steps": 1})
    olga.wait(done, timeout=60, poll=0.1)
    assert olga.wait(failed, timeout=60, poll=0.1).status is Status.FAILED
    other = remote.script(ECHO)

    fork = olga.fork(done, from_step=0, model=other, price=[1, 2])
    assert remote.deployment.client.get(fork.id).config["price"] == {"prompt": 1, "completion": 2}
    letter = olga.fork_dead_letter(failed, from_step=1, budgets={"max_steps": 5}, price=(3, 4))
    assert letter.parent_id == failed
    assert remote.deployment.client.get(letter.id).config["price"] == {
        "prompt": 3,
        "completion": 4,
    }

    forks = len(olga.timeline(done)["forks"])
    with pytest.raises(ValidationError, match="price"):
        olga.fork(done, from_step=0, price=[1])
    for spec, price, said in (
        ("openai:gpt-4o-mini", [0.001, 0.002], "is below the configured price"),
        ("openai:other", [3, 4], "a fork over the API may not price a model"),
    ):
        again = functools.partial(olga.fork_dead_letter, again=True)
        for fork_it, target in ((olga.fork, done), (again, failed)):
            with pytest.raises(RemoteError, match=said) as refused:
                fork_it(target, from_step=0, model=spec, price=price)
            assert refused.value.status == 422 and "`price`" in refused.value.message
    assert len(olga.timeline(done)["forks"]) == forks
    assert len(olga.timeline(failed)["forks"]) == 1


def test_a_whole_uuid_of_no_session_is_refused_once(remote: Remote, mode: str) -> None:
    """A whole uuid of no session is refused by every method of one session: "no session",
    once (after one look for a custom id it starts), and `watch` stops at the first 404.
    (`session_id` refuses it too: `test_session_id_refuses_a_uuid_of_no_session_at_once`.)"""
    fuzz = api(remote, mode, "fuzz")
    for given in (uuid.uuid4().hex, str(uuid.uuid4())):
        for name, method, more in (
            ("approve", fuzz.approve, ("s1c0",)),
            ("cancel", fuzz.cancel, ()),
            ("wait", functools.partial(fuzz.wait, timeout=5, poll=0.1), ()),
            ("watch", fuzz.watch, ()),
        ):
            with pytest.raises(RemoteError) as refused:
                method(given, *more)
            assert (refused.value.status, refused.value.code) == (404, "session_not_found"), name
            said = f"no session '{given}', and no session id starts with it; list sessions"
            assert refused.value.message.startswith(said), name
        # the access log is written as the server answers: wait for each refusal's look-up
        until(
            lambda given=given: remote.served.log.read_text().count(f"id_prefix={given}&") >= 4,
            timeout=10,
            what="the server's access log",
        )
        asked = remote.served.log.read_text()
        assert asked.count(f"/sessions/{given}/stream") == 1  # the watch asked once
        assert asked.count(f"id_prefix={given}&") == 4  # once for each refusal


def test_session_id_refuses_a_uuid_of_no_session_at_once(remote: Remote, mode: str) -> None:
    """`session_id` of a whole uuid gives back an archived session's (whose patch and forks
    the server reads back from the archive, though its live routes answer 404) and refuses
    one of no session at once, "no session" naming it and `tickwork ls`, after one look for
    a custom id it starts: the 404 says which it is (`archived`)."""
    from tickwork.store.retention import Policy, archive_pass

    from tickwork.testing.store_ticks import Clock, new_session

    deployment = remote.deployment.client
    store, clock = deployment.store, Clock()
    old = str(uuid.uuid4())
    # dated long ago, so the pass archives this session and none of the other tests'; made
    # completed, with no tick for the fixture's worker to take
    store.create(new_session(old, now=clock(), status=Status.COMPLETED), now=clock())
    policy = Policy(completed_s=60)
    archive_pass(store.engine, store.load, deployment.archive, policy, now=clock.advance(61))
    assert store.retention.entry(old) is not None
    fuzz = api(remote, mode, "fuzz")
    assert fuzz.session_id(old) == old
    with pytest.raises(RemoteError) as unchanged:  # read back: a repair that changed no file
        fuzz.patch(fuzz.session_id(old))
    assert (unchanged.value.status, unchanged.value.code) == (404, "no_patch")
    with pytest.raises(RemoteError) as live_only:  # named whole: no start is looked for
        fuzz.timeline(old)
    assert live_only.value.details["archived"] is True
    assert f"session '{old}' is archived" in live_only.value.message
    assert fuzz.forks(old) == []  # its forks are served, as its patch is
    forked = fuzz.fork(old, from_step=0)
    assert [(f["id"], f["archived"]) for f in fuzz.forks(old)] == [(forked.id, False)]

    for given in (uuid.uuid4().hex, str(uuid.uuid4())):
        with pytest.raises(RemoteError) as refused:
            fuzz.session_id(given)
        assert (refused.value.status, refused.value.code) == (404, "session_not_found")
        assert refused.value.message.startswith(
            f"no session '{given}', and no session id starts with it; list sessions with "
            "`tickwork ls`"
        )
        until(
            lambda given=given: f"id_prefix={given}&" in remote.served.log.read_text(),
            timeout=10,
            what="the server's access log",
        )
        asked = [line for line in remote.served.log.read_text().splitlines() if given in line]
        assert len(asked) == 2, asked  # the session itself, and the start: nothing more
    assert f"id_prefix={old}" not in remote.served.log.read_text()  # logged before those


def test_a_submit_and_a_fork_with_an_idempotency_key_are_safe_to_retry(
    remote: Remote, mode: str
) -> None:
    sam, olga = api(remote, mode, "sam"), api(remote, mode, "olga")
    key, script = f"k-{uuid.uuid4()}", remote.script(ECHO)
    first = sam.submit(TEST_KIND, remote.input(), model=script, idempotency_key=key)
    again = sam.submit(TEST_KIND, remote.input(), model=script, idempotency_key=key)
    assert again.id == first.id
    other = sam.submit(TEST_KIND, remote.input(), model=script, idempotency_key=f"{key}-2")
    assert other.id != first.id
    olga.wait(first.id, timeout=60, poll=0.1)
    fork = olga.fork(first.id, from_step=0, idempotency_key=key)
    assert olga.fork(first.id, from_step=0, idempotency_key=key).id == fork.id
    with pytest.raises(RemoteError) as refused:
        olga.fork(first.id, from_step=1, idempotency_key=key)
    assert refused.value.code == "idempotency_key_reused"
