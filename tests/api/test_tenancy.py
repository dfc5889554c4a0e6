"""Tenants through the API: every route, the SSE stream and the page answer a session or
dead letter of another tenant (or, for an own-only token, of another submitter) exactly as
one nobody made (404, the same body), and listings hold only what the caller may see.

Every route of the app is classified below; a route added without a row here fails
`test_every_route_is_classified`, so a new route cannot skip these checks. The sessions
are written through the store (no worker runs): this is about who sees what, fast.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from tickwork.fsm import machine
from tickwork.fsm.values import ErrorCode, Session, Status
from tickwork.worker.jobs import Jobs
from tickwork.worker.observers import metrics
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.runtime import Runtime

from tests.api.conftest import Server, embedded_client
from tickwork.api import ApiSettings, make_api
from tickwork.client import Tickwork
from tickwork.remote import Client as RemoteClient
from tickwork.testing.store_ticks import claim, new_session, reply, think

EVERY = ["submitter", "approver", "operator"]
TOKENS = {
    "ann-team-a-token-00000001": {"name": "ann", "roles": EVERY, "tenant": "team-a"},
    "amy-team-a-own-only-00001": {
        "name": "amy",
        "roles": EVERY,
        "tenant": "team-a",
        "own_only": True,
    },
    "bob-team-b-token-00000001": {"name": "bob", "roles": EVERY, "tenant": "team-b"},
    "root-admin-token-00000001": {"name": "root", "roles": ["admin"]},
}
TOKEN = {spec["name"]: token for token, spec in TOKENS.items()}
#: routes that read no session, dead letter or tenant data at all
NO_TENANT_DATA = {
    ("GET", "/"),
    ("GET", "/static/index.html"),  # the page at its file's path: what / answers
    ("GET", "/api/v1/docs"),
    ("GET", "/favicon.ico"),
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/api/v1/me"),
    ("GET", "/healthz"),
    ("HEAD", "/healthz"),
    ("GET", "/readyz"),
    ("HEAD", "/readyz"),
}
#: routes that name one session or dead letter: (method, path) -> a valid body
BY_ID: dict[tuple[str, str], dict[str, Any] | None] = {
    ("GET", "/api/v1/sessions/{session_id}"): None,
    ("GET", "/api/v1/sessions/{session_id}/patch"): None,
    ("GET", "/api/v1/sessions/{session_id}/forks"): None,
    ("GET", "/api/v1/sessions/{session_id}/events"): None,
    ("GET", "/api/v1/sessions/{session_id}/stream"): None,
    ("GET", "/api/v1/approvals/{session_id}"): None,
    ("POST", "/api/v1/sessions/{session_id}/calls/{call_id}/decision"): {
        "kind": "approve",
        "fingerprint": "0" * 64,
    },
    ("POST", "/api/v1/sessions/{session_id}/cancel"): None,
    ("POST", "/api/v1/sessions/{session_id}/fork"): {"from_step": 0},
    ("GET", "/api/v1/dead-letters/{key}"): None,
    ("POST", "/api/v1/dead-letters/{key}/fork"): {"from_step": 0},
    ("POST", "/api/v1/dead-letters/{key}/resolve"): {"reason": "looked"},
    ("POST", "/api/v1/dead-letters/{key}/dismiss"): {"reason": "looked"},
}
#: routes that list many: (method, path) -> how to find the session ids in the answer
LISTS = {
    ("GET", "/api/v1/sessions"): "sessions",
    ("GET", "/api/v1/approvals"): "approvals",
    ("GET", "/api/v1/dead-letters"): "letters",
    ("GET", "/api/v1/dead-letters/stats"): "stats",
    ("GET", "/api/v1/dead-letters/timeline"): "timeline",
    ("GET", "/api/v1/dead-letters/export"): "export",
    ("GET", "/metrics"): "metrics",
    ("GET", "/api/v1/metrics"): "metrics",
}
#: submitting: its tenant is the token's (tested below)
SUBMIT = {("POST", "/api/v1/sessions")}


@dataclass
class World:
    url: str
    client: Tickwork
    clients: dict[str, httpx.Client]
    #: session ids by who submitted them: ann (team-a), amy (team-a), bob (team-b)
    ids: dict[str, list[str]]
    app: Any

    def http(self, who: str) -> httpx.Client:
        if who not in self.clients:
            self.clients[who] = httpx.Client(
                base_url=self.url, headers={"Authorization": f"Bearer {TOKEN[who]}"}, timeout=30
            )
        return self.clients[who]


def _make(client: Tickwork, session_id: str, tenant: str, by: str, end: str) -> None:
    """A session of `tenant` submitted by `by`: waiting for approval, or failed."""
    now = datetime.now(UTC)
    base = new_session(session_id, now=now)
    head = base.head.model_copy(update={"tenant": tenant, "submitted_by": by})
    store = client.store
    store.create(Session(head=head), now=now)
    if end == "waiting":
        think(store, session_id, reply(("danger", {"value": "x"})), now=now)
        assert store.get(session_id).status is Status.WAITING_APPROVAL
    else:
        claimed = claim(store, session_id, now=now)
        change = machine.fail(claimed.head, ErrorCode.LOOP, "stagnation loop", now=now)
        store.save(change, version=claimed.head.version, owner="worker-1", now=now)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("tenancy")
    client = embedded_client(tmp)
    settings = client.settings
    ids: dict[str, list[str]] = {}
    for who, tenant in (("ann", "team-a"), ("amy", "team-a"), ("bob", "team-b")):
        for end in ("waiting", "failed"):
            session_id = f"{who}-{end}-{uuid.uuid4().hex[:6]}"
            _make(client, session_id, tenant, who, end)
            ids.setdefault(who, []).append(session_id)
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    with Server(app) as server:
        found = World(server.url, client, {}, ids, app)
        yield found
        for http in found.clients.values():
            http.close()
    client.close()


def routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, into included routers too (FastAPI 0.165
    keeps them as routers of their own)."""
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        if hasattr(route, "original_router"):
            found |= routes(route.original_router)
            continue
        if isinstance(route, APIRoute):
            for method in route.methods:
                found.add((method, route.path))
        elif getattr(route, "path", "").startswith("/static"):
            continue  # the page's files: no data
        elif hasattr(route, "methods") and route.methods:
            found.update((m, route.path) for m in route.methods if m != "HEAD")
    return found


def test_every_route_is_classified(world: World) -> None:
    known = NO_TENANT_DATA | set(BY_ID) | set(LISTS) | SUBMIT
    unclassified = routes(world.app) - known
    assert not unclassified, f"add these routes to the tenancy tests: {sorted(unclassified)}"
    assert not known - routes(world.app), "a route listed here is gone: take it out"


def _path(template: str, ident: str) -> str:
    return (
        template.replace("{session_id}", ident).replace("{key}", ident).replace("{call_id}", "s1c0")
    )


def _ask(http: httpx.Client, method: str, path: str, body: dict[str, Any] | None) -> httpx.Response:
    if path.endswith("/stream"):
        with http.stream(method, path) as answer:
            answer.read() if answer.status_code != 200 else None
            return answer
    return http.request(method, path, json=body)


@pytest.mark.parametrize(("method", "template"), sorted(BY_ID))
def test_another_tenants_or_submitters_session_is_404_like_none(
    world: World, method: str, template: str
) -> None:
    body = BY_ID[(method, template)]
    for who, theirs in (("bob", "ann"), ("ann", "bob"), ("amy", "ann"), ("bob", "amy")):
        for ident in world.ids[theirs]:
            before = world.client.get(ident)
            answer = _ask(world.http(who), method, _path(template, ident), body)
            nobody = f"zz-{uuid.uuid4().hex[:10]}"
            none = _ask(world.http(who), method, _path(template, nobody), body)
            assert answer.status_code == 404, (who, ident, template, answer.text)
            assert none.status_code == 404, (who, template, none.text)
            assert answer.json() == {
                k: v.replace(nobody, ident) if isinstance(v, str) else v
                for k, v in none.json().items()
            }, "the answer tells a foreign id from one nobody made"
            assert world.client.get(ident) == before  # nothing changed


@pytest.mark.parametrize(
    "template", sorted(t for m, t in BY_ID if m == "GET" and not t.endswith("/stream"))
)
def test_the_owner_and_an_admin_see_it(world: World, template: str) -> None:
    for who, whose in (("ann", "ann"), ("ann", "amy"), ("amy", "amy"), ("root", "bob")):
        for ident in world.ids[whose]:
            answer = world.http(who).get(_path(template, ident))
            assert answer.status_code != 404 or answer.json()["code"] in {
                "no_patch",
                "call_not_found",
                "dead_letter_not_found",  # the waiting session has no dead letter
                "not_waiting",
            }, (who, ident, template, answer.text)
            if answer.status_code == 404 and answer.json()["code"] == "dead_letter_not_found":
                assert "waiting" in ident


def test_the_stream_follows_only_what_the_caller_sees(world: World) -> None:
    failed = next(i for i in world.ids["bob"] if "failed" in i)
    with world.http("bob").stream("GET", f"/api/v1/sessions/{failed}/stream") as answer:
        assert answer.status_code == 200
        text = "".join(answer.iter_text())
    assert "event: end" in text and '"failed"' in text
    for who in ("ann", "amy"):
        with world.http(who).stream("GET", f"/api/v1/sessions/{failed}/stream") as answer:
            assert answer.status_code == 404


def _seen(world: World, who: str, kind: str, path: str) -> set[str] | str:
    answer = world.http(who).get(path)
    assert answer.status_code == 200, (who, path, answer.text)
    if kind == "sessions":
        return {s["id"] for s in answer.json()}
    if kind == "approvals":
        return {w["session"]["id"] for w in answer.json()}
    if kind == "letters":
        return {d["session_id"] for d in answer.json()}
    return answer.text


@pytest.mark.parametrize(("method", "path"), sorted(LISTS))
def test_listings_hold_only_what_the_caller_sees(world: World, method: str, path: str) -> None:
    kind = LISTS[(method, path)]
    everyone = {i for ids in world.ids.values() for i in ids}
    sees = {
        "ann": set(world.ids["ann"]) | set(world.ids["amy"]),
        "amy": set(world.ids["amy"]),
        "bob": set(world.ids["bob"]),
        "root": everyone,
    }
    for who, mine in sees.items():
        if path == "/metrics":
            break  # the operators' scrape: checked below
        if kind == "metrics" and who == "amy":
            continue  # an own-only token has none: checked below
        found = _seen(world, who, kind, path)
        if isinstance(found, set):
            wanted = {i for i in mine if kind == "sessions" or _fits(kind, i)}
            assert found == wanted, (who, path)
        elif kind == "export":
            assert all(i in found for i in mine if "failed" in i), (who, path)
            assert not any(i in found for i in everyone - mine), (who, path)
        elif kind == "metrics":
            tenants = {"ann": {"team-a"}, "bob": {"team-b"}}.get(who)
            labelled = {line.split('tenant="')[1].split('"')[0] for line in _tenant_lines(found)}
            assert labelled, found
            assert tenants is None or labelled <= tenants, (who, labelled)
        else:  # stats and timeline: counts; the caller's dead letters only
            total = found.count('"total":')
            assert total, found
            failed = len([i for i in mine if "failed" in i])
            assert f'"total":{failed}' in found.replace(" ", ""), (who, path, found)


def test_a_session_id_filter_lists_only_a_letter_the_caller_sees(world: World) -> None:
    """`GET /dead-letters?session_id=` is scoped as the other filters: another tenant's or
    (own-only) another submitter's session's letter is listed as one nobody has."""
    everyone = [i for ids in world.ids.values() for i in ids if "failed" in i]
    sees = {
        "ann": world.ids["ann"] + world.ids["amy"],
        "amy": world.ids["amy"],
        "bob": world.ids["bob"],
        "root": everyone,
    }
    for who, mine in sees.items():
        for ident in everyone:
            answer = world.http(who).get("/api/v1/dead-letters", params={"session_id": ident})
            assert answer.status_code == 200, (who, ident, answer.text)
            wanted = [ident] if ident in mine else []
            assert [d["session_id"] for d in answer.json()] == wanted, (who, ident)


def _fits(kind: str, session_id: str) -> bool:
    return ("waiting" in session_id) if kind == "approvals" else ("failed" in session_id)


def _tenant_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if 'tenant="' in line and not line.startswith("#")]


def test_the_operators_scrape_labels_every_tenant(world: World) -> None:
    text = httpx.get(f"{world.url}/metrics", timeout=30).text
    labelled = {line.split('tenant="')[1].split('"')[0] for line in _tenant_lines(text)}
    assert {"team-a", "team-b"} <= labelled


def test_a_tenants_metrics_hold_the_workers_counters_of_that_tenant_only(world: World) -> None:
    """/api/v1/metrics has the per-tenant counters /metrics has (ticks, their time, model
    calls, tokens and cost, approvals asked, completions), each only under the caller's
    tenant; the series of tenants past the label cap (`other`) are nobody's but an admin's."""
    for tenant in ("team-a", "team-b", "other"):
        metrics.TICKS.labels("think", "saved", tenant).inc()
        metrics.TICK_SECONDS.labels("think", "saved", tenant).observe(0.1)
        metrics.MODEL_CALLS.labels("scripted", "ok", tenant).inc()
        metrics.MODEL_TOKENS.labels("scripted", "prompt", tenant).inc(10)
        metrics.MODEL_COST.labels("scripted", tenant).inc(0.5)
        metrics.APPROVALS_REQUESTED.labels(tenant).inc()
        metrics.SESSIONS_COMPLETED.labels("none", tenant).inc()
    counters = {
        "tickwork_ticks_total",
        "tickwork_tick_duration_seconds_count",
        "tickwork_model_calls_total",
        "tickwork_model_tokens_total",
        "tickwork_model_cost_usd_total",
        "tickwork_approvals_requested_total",
        "tickwork_sessions_completed_total",
        "tickwork_tenant_sessions",  # the store's gauge, as before
    }

    def series(who: str, **params: str) -> set[tuple[str, str]]:
        answer = world.http(who).get("/api/v1/metrics", params=params)
        assert answer.status_code == 200, (who, params, answer.text)
        if who != "root" or params:
            assert "tickwork_relay_passes" not in answer.text  # no tenant: operators' only
        return {
            (line.split("{")[0], line.split('tenant="')[1].split('"')[0])
            for line in _tenant_lines(answer.text)
        }

    for who, tenant in (("ann", "team-a"), ("bob", "team-b")):
        found = series(who)
        assert {t for _, t in found} == {tenant}, (who, found)
        assert {n for n, _ in found} >= counters, who
        assert series(who, tenant=tenant) == found
    every = series("root")
    assert every >= {(n, t) for n in counters for t in ("team-a", "team-b")}
    assert every >= {(n, "other") for n in counters - {"tickwork_tenant_sessions"}}
    assert series("root", tenant="team-b") == {(n, t) for n, t in every if t == "team-b"}
    foreign = world.http("bob").get("/api/v1/metrics", params={"tenant": "team-a"})
    nobody = world.http("bob").get("/api/v1/metrics", params={"tenant": "zz-nobody"})
    assert foreign.status_code == nobody.status_code == 404
    assert foreign.json()["message"].replace("team-a", "zz-nobody") == nobody.json()["message"]
    assert "tickwork_" not in foreign.text


def test_an_own_only_token_gets_no_metrics(world: World) -> None:
    """A tenant's series count every session of it (how many wait for a person, what the
    tenant's models cost): an own-only token, which sees only the sessions it submitted,
    is refused them, naming what to ask for."""
    for params in ({}, {"tenant": "team-a"}):
        answer = world.http("amy").get("/api/v1/metrics", params=params)
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "forbidden"
        assert "own_only" in answer.json()["message"]
        assert "tickwork_" not in answer.text


def test_a_submit_goes_into_the_tokens_tenant(world: World, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"content": "done"}]')
    body = {"kind": "repair", "input": {"task": "x", "source": str(tmp_path)}}
    refused = world.http("bob").post("/api/v1/sessions", json={**body, "tenant": "team-a"})
    assert refused.status_code == 403 and "team-b only" in refused.json()["message"]
    bad = world.http("root").post("/api/v1/sessions", json={**body, "tenant": "Team A"})
    assert bad.status_code == 422
    listed = world.http("root").get("/api/v1/sessions", params={"tenant": "team-b"}).json()
    assert {s["id"] for s in listed} == set(world.ids["bob"])
    assert {s["tenant"] for s in listed} == {"team-b"}
    # another tenant's listing is refused as its dead letters are, not answered empty (an
    # empty page read as "team-a has no sessions")
    foreign = world.http("bob").get("/api/v1/sessions", params={"tenant": "team-a"})
    assert foreign.status_code == 403, foreign.text
    assert foreign.json()["code"] == "forbidden"
    assert "bob reads tenant team-b's sessions only" in foreign.json()["message"]
    own = world.http("bob").get("/api/v1/sessions", params={"tenant": "team-b"}).json()
    assert {s["id"] for s in own} == set(world.ids["bob"])
    me = world.http("amy").get("/api/v1/me").json()
    assert me == {"name": "amy", "roles": sorted(EVERY), "tenant": "team-a", "own_only": True}


def _tick_until_it_rests(rt: Runtime, session_id: str) -> Status:
    for _ in range(20):
        head = rt.store.get(session_id)
        if not head.status.runnable:
            return head.status
        advance(rt, session_id, head.version)
    raise AssertionError(f"session {session_id} did not rest in 20 ticks")


def test_a_graph_s_branches_stay_in_its_tenant(tmp_path: Path) -> None:
    """A fan-out's branches are child sessions of the fanning one's tenant: its tenant's
    token sees them, another tenant's gets 404 as for a session nobody made. (A world of
    its own: the shared one's listings are exact.)"""
    client = embedded_client(tmp_path)
    settings = client.settings
    client.publish = lambda *_: None  # type: ignore[method-assign]  # ticks run here, in turn
    script = tmp_path / "script.json"
    script.write_text('[{"content": "-"}]')
    root = client.submit(
        "tests.graphs:MAP_SUM",
        {"items": [1, 2]},
        model=f"scripted:{script}",
        tenant="team-b",
        submitted_by="bob",
    )
    rt = Runtime(settings=settings, store=client.store, jobs=Jobs(), publish_tick=lambda *_: None)
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    try:
        with Server(app) as server:
            world = World(server.url, client, {}, {}, app)
            assert _tick_until_it_rests(rt, root.id) is Status.WAITING_CHILDREN
            branches = client.store.children(root.id)
            assert len(branches) == 2
            assert {(b.tenant, b.submitted_by) for b in branches} == {("team-b", "bob")}
            listed = world.http("ann").get("/api/v1/sessions").json()
            assert listed == []
            for branch in branches:
                path = f"/api/v1/sessions/{branch.id}"
                assert world.http("bob").get(path).status_code == 200
                assert world.http("ann").get(path).status_code == 404
                assert _tick_until_it_rests(rt, branch.id) is Status.COMPLETED
            for http in world.clients.values():
                http.close()
        assert _tick_until_it_rests(rt, root.id) is Status.COMPLETED
        assert client.get(root.id).result["state"]["total"] == 5
    finally:
        rt.close()
        client.close()


def test_the_page_reads_only_routes_checked_here(world: World) -> None:
    """The page is static: what it shows comes from the API calls in its scripts, each of
    them a route whose tenant checks are tested above (a new call must be one of them)."""
    import re

    from tickwork.api.app import STATIC

    called: set[str] = set()
    for script in STATIC.glob("*.js"):
        text = script.read_text(encoding="utf-8")
        called |= set(re.findall(r"\bapi\(\s*[`\"]([^`\"?]+)", text))
        called |= {p for p in re.findall(r"\$\{API\}([^`\"?]+)", text)}
    assert "/sessions/${enc(id)}/stream" in called and "/approvals" in called
    checked = {t for _, t in NO_TENANT_DATA | set(BY_ID) | set(LISTS) | SUBMIT}
    routes_ = {re.sub(r"\{[^}]+\}", "x", t) for t in checked}
    for path in called:
        shape = re.compile("^/api/v1" + re.sub(r"\$\{[^}]+\}", "[^/]+", path) + "$")
        assert any(shape.match(r) for r in routes_), f"the page calls {path}, unchecked"
    page = httpx.get(f"{world.url}/", timeout=30).text
    assert not any(i in page for ids in world.ids.values() for i in ids)


def _tree_ids(node: dict[str, Any] | None) -> set[str]:
    if node is None:
        return set()
    return {node["id"]} | {i for c in node.get("children") or () for i in _tree_ids(c)}


def test_a_sessions_tree_shows_only_what_the_caller_sees(tmp_path: Path) -> None:
    """A parent of amy's (own-only, team-a) with children: hers, ann's (team-a) and a stray
    row of team-b with a child of its own; the runtime never writes such rows (children
    inherit tenant and submitter), so this is the API's own check."""
    client = embedded_client(tmp_path)
    settings = client.settings
    now = datetime.now(UTC)

    def make(session_id: str, tenant: str, by: str, parent: str | None) -> None:
        head = new_session(session_id, now=now).head.model_copy(
            update={
                "tenant": tenant,
                "submitted_by": by,
                "parent_id": parent,
                "root_id": "root" if parent else None,
                "role": "helper" if parent else "",
            }
        )
        client.store.create(Session(head=head), now=now)

    make("root", "team-a", "amy", None)
    make("amys-child", "team-a", "amy", "root")
    make("anns-child", "team-a", "ann", "root")
    make("stray-b", "team-b", "bob", "root")
    make("under-stray", "team-a", "amy", "stray-b")
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    with Server(app) as server:

        def tree(who: str, session_id: str) -> set[str] | int:
            answer = httpx.get(
                f"{server.url}/api/v1/sessions/{session_id}",
                headers={"Authorization": f"Bearer {TOKEN[who]}"},
                timeout=30,
            )
            return (
                _tree_ids(answer.json()["tree"])
                if answer.status_code == 200
                else answer.status_code
            )

        assert tree("amy", "root") == {"root", "amys-child"}
        assert tree("amy", "amys-child") == {"root", "amys-child"}
        assert tree("ann", "root") == {"root", "amys-child", "anns-child"}
        assert tree("root", "root") == {
            "root",
            "amys-child",
            "anns-child",
            "stray-b",
            "under-stray",
        }
        assert tree("bob", "root") == 404
        assert tree("amy", "anns-child") == 404
        # a team-b token that may see the stray row sees no tree of team-a around it
        assert tree("bob", "stray-b") == set()
    client.close()


def test_a_number_that_is_another_tenants_letter_id_finds_the_callers_session(
    tmp_path: Path,
) -> None:
    """`/dead-letters/{key}` tries the key as a letter id, then as a session id: another
    tenant's letter under that id neither answers nor hides the caller's own session."""
    client = embedded_client(tmp_path)
    settings = client.settings
    try:
        _make(client, "ann-failed", "team-a", "ann", "failed")
        number = str(client.dead_letter("ann-failed").id)
        _make(client, number, "team-b", "bob", "failed")
        app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
        with Server(app) as server:
            headers = {"Authorization": f"Bearer {TOKEN['bob']}"}
            answer = httpx.get(
                f"{server.url}/api/v1/dead-letters/{number}", headers=headers, timeout=30
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["session_id"] == number
            headers = {"Authorization": f"Bearer {TOKEN['ann']}"}
            mine = httpx.get(
                f"{server.url}/api/v1/dead-letters/{number}", headers=headers, timeout=30
            )
            assert mine.status_code == 200 and mine.json()["session_id"] == "ann-failed"
            # ann's letter is dead letter `number`; the session of that id is reached by its
            # id through the filter, over the remote client as in-process
            with RemoteClient(server.url, token=TOKEN["root"]) as root:
                (letter,) = root.dead_letters(session_id=number)
                assert letter.session_id == number and str(letter.id) != number
                assert root.dead_letters(session_id="nobody-failed") == []
            assert [d.id for d in client.dead_letters(session_id=number)] == [letter.id]
    finally:
        client.close()


def test_a_kind_filter_says_nothing_of_others_sessions_to_an_own_only_token(
    tmp_path: Path,
) -> None:
    """`?kind=` of a kind the server does not know lists nothing (200) when a session the
    caller's scope holds has it, else 422 `unknown_kind`: an own-only token's scope is its
    own sessions, so another submitter's kind is answered as one nobody has."""
    client = embedded_client(tmp_path)
    settings = client.settings
    now = datetime.now(UTC)
    for session_id, by, kind in (("anns", "ann", "lab:Secret"), ("amys", "amy", "lab:Mine")):
        head = new_session(session_id, now=now, kind=kind).head.model_copy(
            update={"tenant": "team-a", "submitted_by": by}
        )
        client.store.create(Session(head=head), now=now)
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    try:
        with Server(app) as server:

            def listing(who: str, kind: str) -> httpx.Response:
                headers = {"Authorization": f"Bearer {TOKEN[who]}"}
                url = f"{server.url}/api/v1/sessions"
                return httpx.get(url, params={"kind": kind}, headers=headers, timeout=30)

            assert listing("ann", "lab:Secret").status_code == 200  # her tenant's: known
            assert listing("amy", "lab:Mine").status_code == 200
            secret, nobody = listing("amy", "lab:Secret"), listing("amy", "lab:Nobody")
            assert secret.status_code == nobody.status_code == 422, secret.text
            assert secret.json()["message"].replace("Secret", "Nobody") == nobody.json()["message"]
            assert listing("bob", "lab:Secret").status_code == 422
    finally:
        client.close()


def test_id_prefix_lists_the_sessions_the_caller_sees_starting_with_it(world: World) -> None:
    """`GET /api/v1/sessions?id_prefix=` (what a remote client resolves a start of an id
    with) holds only the sessions the token sees, as every listing: another tenant's or
    submitter's id is not said, even by its start."""
    start = f"id{uuid.uuid4().hex[:6]}"  # letters in it: its upper case is another start
    made = {}
    for who, tenant in (("ann", "team-a"), ("amy", "team-a"), ("bob", "team-b")):
        made[who] = f"{start}-{uuid.uuid4().hex[:6]}"
        _make(world.client, made[who], tenant, who, "waiting")

    def listed(who: str, **params: str) -> set[str]:
        answer = world.http(who).get("/api/v1/sessions", params={"id_prefix": start, **params})
        assert answer.status_code == 200, answer.text
        return {h["id"] for h in answer.json()}

    assert listed("ann") == {made["ann"], made["amy"]}
    assert listed("amy") == {made["amy"]}
    assert listed("bob") == {made["bob"]}
    assert listed("root") == set(made.values())
    assert listed("root", tenant="team-b") == {made["bob"]}
    assert listed("ann", id_prefix=made["ann"]) == {made["ann"]}
    assert listed("ann", id_prefix=start.upper()) == set()  # the case of an id is its own
    assert listed("bob", id_prefix=made["ann"][:12]) == set()


@pytest.mark.parametrize(
    ("given", "wrong"),
    [
        ("3f9a0", "5 characters long; give at least 6"),
        ("3f9a0%", "a character no session id has"),
        ("3f9a0 c", "a character no session id has"),
        ("-3f9a0", "a character no session id has"),
        ("_job-1", "a character no session id has"),
        ("3f9a0c\n", "a character no session id has"),
    ],
)
def test_an_id_prefix_that_is_no_start_of_an_id_is_a_422_naming_it(
    world: World, given: str, wrong: str
) -> None:
    answer = world.http("ann").get("/api/v1/sessions", params={"id_prefix": given})
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "invalid_input"
    message = answer.json()["message"]
    assert message.startswith("id_prefix ") and wrong in message, message
    long = world.http("ann").get("/api/v1/sessions", params={"id_prefix": "a" * 65})
    assert long.status_code == 422 and "id_prefix" in long.json()["message"]
    schema = world.http("ann").get("/api/v1/openapi.json").json()
    listing = schema["paths"]["/api/v1/sessions"]["get"]["parameters"]
    stated = next(p for p in listing if p["name"] == "id_prefix")["schema"]
    import jsonschema

    if not given.endswith("\n"):  # Python's `$` (jsonschema's) matches before a last newline
        assert not jsonschema.Draft202012Validator(stated["anyOf"][0]).is_valid(given)
    for start in ("3f9a0c-1b", "job_1.v2"):  # a custom id's characters too
        assert jsonschema.Draft202012Validator(stated["anyOf"][0]).is_valid(start)
