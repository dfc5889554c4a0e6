"""The two Python clients, `tickwork.Tickwork` (local) and `tickwork.remote.Client`, offer
the same methods by name, but for a listed few that only one of them can have, each with
its reason, and docs/PYTHON.md lists the same: a script written against one runs on the
other. A method added to one client only fails here until it is added to the other or
listed (here and in the docs) with why."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from tickwork.fsm.errors import InvalidInput

import tickwork
from tickwork.remote import AsyncClient, Client

ROOT = Path(__file__).resolve().parent.parent

#: what only the local client has, and why the remote one cannot
LOCAL_ONLY = {
    "store": "the deployment's database itself; over HTTP the API is the way in",
    "app": "the Celery app the client publishes ticks with; the server publishes them",
    "artifacts": "the deployment's artifact store, read directly",
    "files": "sessions' stored files through this process's cache",
    "archive": "the archive retention fills, read directly",
    "tenants": "the tenants file the deployment reads",
    "admission": "the admission policy from the tenants file",
    "publish": "wakes a worker through the broker: the server does it for a remote write",
    "admit": "admits queued sessions as a relay pass does: the workers' relay does it",
    "budgets": "merges budget layers over the deployment's settings (a submit's helper)",
    "load": "the whole `Session` value; remotely `timeline(id)` is its JSON view",
    "tree": "remotely `timeline(id)['tree']`",
    "children": "a session's children as its tools see them; remotely `timeline(id)['tree']`",
    "earlier_patches": "the chain of forks read session by session; the API serves no chain",
    "archived": "an archived session read back whole from the archive; the API serves "
    "archived ones through `archived_sessions`, `patch`, `forks` and `fork` only",
    "bundle": "writes a git bundle to a path on this machine",
    "read_file": "a session's stored file; the API serves no files",
    "file_reader": "the previews' file reader; the API serves no files",
    "find_dead_letter": "the CLI's lookup of a letter; remotely `dead_letter(key)` takes the "
    "same keys",
    "id_starts": "whether this client takes starts of ids (`WholeIds`: the API's view)",
    "whole_ids": "this client taking whole ids only, as the API is given it",
}
#: what only the remote client has, and why the local one does not
REMOTE_ONLY = {
    "me": "who the token belongs to; locally there is no token (a change names its person "
    "with `by=` or `approver=`)",
    "watch": "the API's event stream; locally poll `events(id, after=)` or `wait(id)`",
    "export_dead_letters": "the API's export; locally `tickwork dlq export`",
    "run": "carries out a plan over HTTP",
    "send": "sends one request",
}


def public(kind: type) -> set[str]:
    return {name for name in dir(kind) if not name.startswith("_")}


def test_the_clients_differ_only_by_the_methods_listed_with_a_reason() -> None:
    local, remote = public(tickwork.Tickwork), public(Client)
    assert {n: LOCAL_ONLY.get(n, "no reason given") for n in local - remote} == LOCAL_ONLY
    assert {n: REMOTE_ONLY.get(n, "no reason given") for n in remote - local} == REMOTE_ONLY
    # the async client is the blocking one, awaited
    assert public(AsyncClient) - {"aclose"} == remote - {"close"}


def test_the_docs_list_what_only_one_client_has() -> None:
    text = (ROOT / "docs" / "PYTHON.md").read_text()
    section = text.split("### What only one client has", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    listed = {
        (name, side.strip()) for names, side in rows for name in re.findall(r"`(\w+)`", names)
    }
    assert listed == {(n, "local") for n in LOCAL_ONLY} | {(n, "remote") for n in REMOTE_ONLY}


#: the methods both have since the local client took the remote's (`by=`: the person, which
#: the remote client takes from its token)
SHARED = (
    "timeline",
    "events",
    "waiting",
    "fork_dead_letter",
    "resolve_dead_letter",
    "dismiss_dead_letter",
    "close_dead_letter",
)


@pytest.mark.parametrize("name", SHARED)
def test_a_method_both_have_takes_the_remote_ones_parameters(name: str) -> None:
    """A call written for one client runs on the other: the remote method's parameters are
    the local one's, but for the retry key only HTTP has, and in the same places."""

    def parameters(method: Any) -> list[tuple[str, Any]]:
        found = inspect.signature(method).parameters.values()
        return [(p.name, p.kind) for p in found if p.name not in ("self", "idempotency_key")]

    kinds = {inspect.Parameter.POSITIONAL_ONLY: inspect.Parameter.POSITIONAL_OR_KEYWORD}
    remote = [(n, kinds.get(k, k)) for n, k in parameters(getattr(Client, name))]
    local = dict(parameters(getattr(tickwork.Tickwork, name)))
    assert all(local.get(n) == k for n, k in remote), (remote, local)
    positional = [n for n, k in remote if k is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert list(local)[: len(positional)] == positional
    # beyond the remote's, a local method requires only the person who acts (the token's
    # name remotely): a script names it, as docs/PYTHON.md says, and nothing else
    given = {n for n, _ in remote}
    required = {
        p.name
        for p in inspect.signature(getattr(tickwork.Tickwork, name)).parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    assert required - given - {"self"} <= {"by", "approver"}, required - given


URL, TOKEN = "http://tw.test", "token-token-token-1"
LETTER = {
    "id": 7,
    "session_id": "7d1e00aa",
    "code": "MAX_STEPS",
    "message": "out of steps",
    "kind": "repair",
    "model": "scripted",
    "last_tool": None,
    "error_signature": "x",
    "at": "2026-01-01T00:00:00Z",
    "schema_version": 1,
}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_remote_close_dead_letter_resolves_or_dismisses_by_state(mode: str) -> None:
    """The local client's `close_dead_letter(key, state=, reason=)` runs on the remote one:
    sent as its `resolve_dead_letter` or `dismiss_dead_letter`; another state is refused
    before anything is sent."""
    sent: list[tuple[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append((request.url.raw_path.decode(), body))
        state = "resolved" if request.url.path.endswith("/resolve") else "dismissed"
        return httpx.Response(200, json={**LETTER, "resolution": {"state": state, **body}})

    async def aanswer(request: httpx.Request) -> httpx.Response:
        return answer(request)

    def close(key: str, state: str) -> Any:
        if mode == "sync":
            with Client(
                "http://tw.test", token="token-token-token-1", transport=httpx.MockTransport(answer)
            ) as c:
                return c.close_dead_letter(key, state=state, reason="fixed by hand")

        async def go() -> Any:
            async with AsyncClient(
                "http://tw.test",
                token="token-token-token-1",
                transport=httpx.MockTransport(aanswer),
            ) as c:
                return await c.close_dead_letter(key, state=state, reason="fixed by hand")

        return asyncio.run(go())

    assert close("7", "resolved").status == "resolved"
    assert close("#7", "dismissed").status == "dismissed"
    assert sent == [
        ("/api/v1/dead-letters/7/resolve", {"reason": "fixed by hand"}),
        ("/api/v1/dead-letters/%237/dismiss", {"reason": "fixed by hand"}),
    ]
    with pytest.raises(InvalidInput, match="'resolved' or 'dismissed', not 'forked'"):
        close("7", "forked")
    assert len(sent) == 2


def test_fork_dead_letter_takes_every_parameter_fork_takes() -> None:
    """`fork_dead_letter` lists `fork`'s parameters again by hand: an option added to `fork`
    alone would be missing from the dead letter's fork, locally and remotely."""
    for client in (tickwork.Tickwork, Client):
        fork = inspect.signature(client.fork).parameters
        of_letter = inspect.signature(client.fork_dead_letter).parameters
        assert set(fork) - {"session_id"} <= set(of_letter) | {"idempotency_key"}, (
            client,
            set(fork) - set(of_letter),
        )
