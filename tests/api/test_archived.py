"""Archived sessions through the API: one whose archive cannot be read is the server's
fault (503 `archive_missing`), not a session nobody made (404).

The session is written and archived through the store (no worker runs)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from tickwork.fsm.errors import ArtifactsUnavailable
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import Status
from tickwork.store.lifecycle import Retention
from tickwork.store.migrate import upgrade
from tickwork.store.retention import Policy, archive_pass
from tickwork.store.schema import archived
from tickwork.worker.config.settings import Settings

from tests.api.conftest import TOKEN, TOKENS, Server
from tickwork import views
from tickwork.api import ApiSettings, make_api
from tickwork.client import Tickwork
from tickwork.remote import Client
from tickwork.testing.store_ticks import Clock, new_session, reply, think

#: an own-only operator's token: it sees the sessions it submitted and the forks it made
OWEN = "owen-own-only-token-00001"


def deployed(tmp_path: Path) -> tuple[Settings, Tickwork]:
    """An embedded deployment's settings, its database migrated, and a client of it."""
    settings = Settings(
        state_dir=tmp_path / "state", queue=f"tickwork.ticks.{uuid.uuid4().hex[:8]}"
    )
    settings.state_dir.mkdir(parents=True)
    upgrade(settings.db_url)
    return settings, Tickwork(settings)


def test_an_archived_session_whose_archive_is_gone_is_a_503_not_a_404(tmp_path: Path) -> None:
    settings, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    store.create(new_session("gone-1", now=clock()), now=clock())
    assert think(store, "gone-1", reply(content="done"), now=clock()).status is Status.COMPLETED
    report = archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    assert report.archived == 1
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    with (
        Server(app) as server,
        httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKEN['olga']}"}
        ) as http,
    ):
        # `show` serves live sessions only (docs/REMOTE.md); a patch reads the archive
        assert http.get("/api/v1/sessions/gone-1/patch").status_code == 404  # none: no files
        assert http.get("/api/v1/sessions/gone-1").json()["code"] == "session_not_found"
        shutil.rmtree(settings.state_dir / "archive")  # moved, or the setting changed

        answer = http.get("/api/v1/sessions/gone-1/patch")
        assert answer.status_code == 503, answer.text
        body = answer.json()
        assert body["code"] == "archive_missing", body
        assert "gone-1" in body["message"] and "TICKWORK_RETENTION_ARCHIVE_URL" in body["message"]
        assert str(settings.state_dir) not in body["message"]  # where it looked: the log's
        # a route that serves live sessions only answers as before the archive went
        assert http.get("/api/v1/sessions/gone-1").json()["code"] == "session_not_found"
        forked = http.post("/api/v1/sessions/gone-1/fork", json={"from_step": 0})
        assert (forked.status_code, forked.json()["code"]) == (503, "archive_missing")
        # one nobody made is still 404
        assert http.get("/api/v1/sessions/nobody-made-it").status_code == 404
    client.close()


def test_an_own_only_token_lists_its_archived_forks_without_the_archive(tmp_path: Path) -> None:
    """An own-only token's view of a session read each archived fork back from the archive
    to learn who made it: a whole batch read a fork, and 503 once the archive was gone. The
    archive's index keeps the submitter: the forks are listed from it alone."""
    settings, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    made = new_session("parent-1", now=clock())
    owens = made.head.model_copy(update={"submitted_by": "owen"})
    store.create(made.model_copy(update={"head": owens}), now=clock())
    for fork_id, by in (("fork-owen", "owen"), ("fork-olga", "olga"), ("live-owen", "owen")):
        store.fork("parent-1", new_id=fork_id, from_step=0, patch=ForkPatch(), by=by, now=clock())
    for fork_id in ("fork-owen", "fork-olga"):
        assert think(store, fork_id, reply(content="done"), now=clock()).status.terminal
    report = archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    assert report.archived == 2
    shutil.rmtree(settings.state_dir / "archive")  # moved, or the setting changed
    tokens = {**TOKENS, OWEN: {"name": "owen", "roles": ["operator"], "own_only": True}}
    app = make_api(settings, ApiSettings(api_tokens=tokens), client=client)  # type: ignore[arg-type]
    with Server(app) as server, httpx.Client(base_url=server.url) as http:
        for name, token, seen in (
            ("owen", OWEN, ["fork-owen", "live-owen"]),
            ("olga", TOKEN["olga"], ["fork-olga", "fork-owen", "live-owen"]),
        ):
            answer = http.get(
                "/api/v1/sessions/parent-1", headers={"Authorization": f"Bearer {token}"}
            )
            assert answer.status_code == 200, (name, answer.text)
            assert [f["id"] for f in answer.json()["forks"]] == seen, name
    client.close()


def test_a_session_s_404_says_whether_its_id_is_an_archived_session_s(tmp_path: Path) -> None:
    """A route that serves live sessions only answers an archived session 404 as before, but
    says `archived: true` (and what is served of it), and `archived: false` for an id of no
    session: the remote client refuses a uuid of nothing at once and gives an archived one
    back for `fork` and `patch`. A session another tenant's token, or an own-only token that
    did not submit it, may not see is no session: `archived: false`, the same message."""
    settings, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    old, nobody = str(uuid.uuid4()), str(uuid.uuid4())
    made = new_session(old, now=clock())
    olgas = made.head.model_copy(update={"submitted_by": "olga"})
    store.create(made.model_copy(update={"head": olgas}), now=clock())
    assert think(store, old, reply(content="done"), now=clock()).status is Status.COMPLETED
    report = archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    assert report.archived == 1
    tokens = {
        **TOKENS,
        OWEN: {"name": "owen", "roles": ["operator"], "own_only": True},
        "tess-other-tenant-token-01": {"name": "tess", "roles": ["operator"], "tenant": "t-2"},
    }
    app = make_api(settings, ApiSettings(api_tokens=tokens), client=client)  # type: ignore[arg-type]
    with Server(app) as server, httpx.Client(base_url=server.url) as http:
        olga = {"Authorization": f"Bearer {TOKEN['olga']}"}
        for path in ("", "/events"):
            answer = http.get(f"/api/v1/sessions/{old}{path}", headers=olga)
            assert answer.status_code == 404, answer.text
            body = answer.json()
            assert (body["code"], body["archived"]) == ("session_not_found", True), path
            assert f"session '{old}' is archived" in body["message"]
            assert f"/api/v1/sessions/{old}/patch" in body["message"]
        cancelled = http.post(f"/api/v1/sessions/{old}/cancel", headers=olga)
        assert (cancelled.status_code, cancelled.json()["archived"]) == (404, True)
        # its patch and fork read it back: found, as before
        assert http.get(f"/api/v1/sessions/{old}/patch", headers=olga).json()["code"] == "no_patch"

        none = http.get(f"/api/v1/sessions/{nobody}", headers=olga)
        assert none.status_code == 404
        assert none.json() == {
            "code": "session_not_found",
            "message": f"no session '{nobody}'; list sessions with `tickwork ls` "
            "(API: GET /api/v1/sessions)",
            "archived": False,
        }
        patched = http.get(f"/api/v1/sessions/{nobody}/patch", headers=olga)
        assert (patched.status_code, patched.json()["archived"]) == (404, False)
        # its dead letter went to the archive with it: the dead-letter routes say so to a
        # token that sees it, and answer another's as for an id nobody made
        letter = http.get(f"/api/v1/dead-letters/{old}", headers=olga)
        assert letter.status_code == 404 and letter.json() == {
            "code": "dead_letter_not_found",
            "message": f"session {old} is archived, and its dead letter with it: dead letters "
            "are read live only; read its patch, or fork it from a step, as an archived session",
        }
        for token in (OWEN, "tess-other-tenant-token-01"):
            theirs = {"Authorization": f"Bearer {token}"}
            hidden_letter = http.get(f"/api/v1/dead-letters/{old}", headers=theirs)
            assert hidden_letter.json()["message"] == (
                f"no dead letter has id or session id '{old}'; list the dead letters for "
                "their ids and session ids"
            ), token
        for token in (OWEN, "tess-other-tenant-token-01"):
            hidden = http.get(
                f"/api/v1/sessions/{old}", headers={"Authorization": f"Bearer {token}"}
            )
            assert hidden.status_code == 404
            assert hidden.json() == {
                "code": "session_not_found",
                "message": f"no session '{old}'; list sessions with `tickwork ls` "
                "(API: GET /api/v1/sessions)",
                "archived": False,
            }, token
    client.close()


def test_an_unreadable_archive_leaves_a_live_only_route_a_404(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An own-only token's 404 for a session archived before the index kept its submitter
    reads the archive to learn who made it: an archive that could not be reached (an object
    store away) made it a 503, where a live-only route answers 404 whatever the archive."""
    settings, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    made = new_session("owens-1", now=clock())
    owens = made.head.model_copy(update={"submitted_by": "owen"})
    store.create(made.model_copy(update={"head": owens}), now=clock())
    assert think(store, "owens-1", reply(content="done"), now=clock()).status.terminal
    archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    with store.engine.begin() as conn:  # an entry of a release before the index kept it
        conn.execute(update(archived).values(submitted_by=None))

    def away(session_id: str) -> None:
        raise ArtifactsUnavailable("the archive's object store did not answer")

    monkeypatch.setattr(client, "archived", away)
    tokens = {**TOKENS, OWEN: {"name": "owen", "roles": ["operator"], "own_only": True}}
    app = make_api(settings, ApiSettings(api_tokens=tokens), client=client)  # type: ignore[arg-type]
    with Server(app) as server, httpx.Client(base_url=server.url) as http:
        answer = http.get("/api/v1/sessions/owens-1", headers={"Authorization": f"Bearer {OWEN}"})
        assert answer.status_code == 404, answer.text
        assert (answer.json()["code"], answer.json()["archived"]) == ("session_not_found", False)
    client.close()


def test_an_id_an_archived_session_had_is_taken_as_a_live_one_s(tmp_path: Path) -> None:
    """A fork (or submit) naming the id of an archived session is 409 `session_exists`, the
    same answer as for a live session's id, of any tenant: not 422 bad input, and nothing
    of the archived session (not when it was archived) is said."""
    settings, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    old, live = str(uuid.uuid4()), str(uuid.uuid4())
    store.create(new_session(old, now=clock()), now=clock())
    assert think(store, old, reply(content="done"), now=clock()).status is Status.COMPLETED
    report = archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    assert report.archived == 1
    store.create(new_session(live, now=clock()), now=clock())
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    olga = {"Authorization": f"Bearer {TOKEN['olga']}"}
    with Server(app) as server, httpx.Client(base_url=server.url, headers=olga) as http:
        for taken in (old, live):
            answer = http.post(f"/api/v1/sessions/{live}/fork", json={"from_step": 0, "id": taken})
            assert answer.status_code == 409, answer.text
            assert answer.json() == {
                "code": "session_exists",
                "message": f"a session {taken!r} exists already; choose another id or leave "
                "it out for a random one (if an earlier try of this request was stored, it is "
                f"that session: GET /api/v1/sessions/{taken})",
            }
        # `$` let a trailing newline through: a fork was stored under "x\n"
        answer = http.post(f"/api/v1/sessions/{live}/fork", json={"from_step": 0, "id": "x\n"})
        assert answer.status_code == 422, answer.text
        assert "may only hold" in answer.json()["message"]
    client.close()


def test_an_archived_sessions_forks_are_listed_live_or_archived_from_the_index(
    tmp_path: Path,
) -> None:
    """`GET /sessions/{id}/forks` lists a session's forks, live or archived, each saying
    which, for a live session and an archived one alike (whose view is not served, and
    which the session listing leaves out): the archive's index answers, so the archive
    itself may be gone. Tenants and own-only tokens see what they see elsewhere."""
    settings, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    made = new_session("parent-2", now=clock())
    owens = made.head.model_copy(update={"submitted_by": "owen"})
    store.create(made.model_copy(update={"head": owens}), now=clock())
    assert think(store, "parent-2", reply(content="done"), now=clock()).status.terminal
    for fork_id, by in (("fork-owen", "owen"), ("fork-olga", "olga"), ("live-owen", "owen")):
        store.fork("parent-2", new_id=fork_id, from_step=1, patch=ForkPatch(), by=by, now=clock())
    for fork_id in ("fork-owen", "fork-olga"):
        assert think(store, fork_id, reply(content="done"), now=clock()).status.terminal
    report = archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    assert report.archived == 3  # the parent and two forks; the live fork is not finished
    shutil.rmtree(settings.state_dir / "archive")  # the index answers, not the archive
    tokens = {
        **TOKENS,
        OWEN: {"name": "owen", "roles": ["operator"], "own_only": True},
        "tess-other-tenant-token-01": {"name": "tess", "roles": ["operator"], "tenant": "t-2"},
    }
    app = make_api(settings, ApiSettings(api_tokens=tokens), client=client)  # type: ignore[arg-type]
    with Server(app) as server, httpx.Client(base_url=server.url) as http:

        def forks(token: str, session_id: str = "parent-2") -> httpx.Response:
            return http.get(
                f"/api/v1/sessions/{session_id}/forks",
                headers={"Authorization": f"Bearer {token}"},
            )

        answer = forks(TOKEN["olga"])
        assert answer.status_code == 200, answer.text
        listed = {f["id"]: f for f in answer.json()}
        assert {i: f["archived"] for i, f in listed.items()} == {
            "fork-owen": True,
            "fork-olga": True,
            "live-owen": False,
        }
        assert {f["fork_step"] for f in listed.values()} == {1}
        assert listed["fork-olga"]["status"] == "completed"
        assert sorted(f["id"] for f in forks(OWEN).json()) == ["fork-owen", "live-owen"]
        assert forks(TOKEN["olga"], "live-owen").json() == []  # a live session's: none yet
        # the session listing holds live sessions only (docs/API.md): the live fork alone
        olga = {"Authorization": f"Bearer {TOKEN['olga']}"}
        live = http.get("/api/v1/sessions", params={"parent_id": "parent-2"}, headers=olga)
        assert [h["id"] for h in live.json()] == ["live-owen"]
        for hidden in (forks("tess-other-tenant-token-01"), forks(TOKEN["olga"], "nobody-2")):
            assert hidden.status_code == 404, hidden.text
            assert (hidden.json()["code"], hidden.json()["archived"]) == (
                "session_not_found",
                False,
            )
    client.close()


def test_a_fork_archived_between_the_two_reads_of_a_listing_is_listed_once_as_archived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's forks are read from the live tables and from the archive's index: a fork
    archived between the two reads was missed (index read first, then live) or called live
    (the API read the live forks twice). Whichever is read first, the fork is archived
    right after it here; the listing holds it once, archived."""
    settings, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    store.create(new_session("parent-3", now=clock()), now=clock())
    store.fork("parent-3", new_id="fork-3", from_step=0, patch=ForkPatch(), by="olga", now=clock())
    assert think(store, "fork-3", reply(content="done"), now=clock()).status.terminal
    archiving = [True]  # the next read of forks archives fork-3 after reading

    def then_archive(read: Any) -> Any:
        def forks(*args: Any) -> list[dict[str, Any]]:
            found = read(*args)
            if archiving:
                archiving.pop()
                report = archive_pass(
                    store.engine,
                    store.load,
                    client.archive,
                    Policy(completed_s=60),
                    now=clock.advance(61),
                )
                assert report.archived == 1
            return found

        return forks

    monkeypatch.setattr(store, "forks", then_archive(store.forks))
    monkeypatch.setattr(Retention, "forks", then_archive(Retention.forks))
    listed = client.forks("parent-3")
    assert [(f["id"], f["archived"]) for f in listed] == [("fork-3", True)]

    archiving.append(True)  # and again through the API, on a fork live once more
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    store.fork("parent-3", new_id="fork-4", from_step=0, patch=ForkPatch(), by="olga", now=clock())
    assert think(store, "fork-4", reply(content="done"), now=clock()).status.terminal
    with (
        Server(app) as server,
        httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKEN['olga']}"}
        ) as http,
    ):
        answer = http.get("/api/v1/sessions/parent-3/forks")
    assert answer.status_code == 200, answer.text
    assert [(f["id"], f["archived"]) for f in answer.json()] == [
        ("fork-3", True),
        ("fork-4", True),
    ]


def test_the_session_listing_lists_the_archived_ones_as_ls_archived_does(
    tmp_path: Path,
) -> None:
    """`GET /sessions` listed live sessions only, with no way to ask for the archived ones
    (`tickwork ls --archived` lists them where the database is). `archived=true` lists
    them from the archive's index, the latest archived first, with the filters the index
    answers; an own-only token its own; a filter the index cannot answer is refused."""
    settings, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    for session_id, by in (("old-sam", "sam"), ("old-owen", "owen"), ("live-owen", "owen")):
        made = new_session(session_id, now=clock())
        head = made.head.model_copy(update={"submitted_by": by})
        store.create(made.model_copy(update={"head": head}), now=clock())
        if session_id.startswith("old"):
            assert think(store, session_id, reply(content="done"), now=clock()).status.terminal
            clock.advance(1)
    report = archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    assert report.archived == 2
    shutil.rmtree(settings.state_dir / "archive")  # the index alone answers
    tokens = {**TOKENS, OWEN: {"name": "owen", "roles": ["operator"], "own_only": True}}
    app = make_api(settings, ApiSettings(api_tokens=tokens), client=client)  # type: ignore[arg-type]
    with Server(app) as server, httpx.Client(base_url=server.url) as http:

        def listed(token: str, **query: object) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"}
            return http.get("/api/v1/sessions", params=query, headers=headers)

        answer = listed(TOKEN["olga"], archived="true")
        assert answer.status_code == 200, answer.text
        rows = answer.json()
        assert [r["id"] for r in rows] == ["old-owen", "old-sam"]
        assert rows[0]["status"] == "completed" and rows[0]["archived_at"]
        assert rows[0] == {**rows[0], "tenant": "default", "parent_id": None}
        assert "location" not in rows[0]  # where the archive keeps it: the server's to know
        cli = [views.archived_entry(e) for e in store.retention.listing()]
        assert [r["id"] for r in cli] == [r["id"] for r in rows]  # `ls --archived --json`'s
        assert set(rows[0]) == set(cli[0]) - {"location"}
        # who submitted each, as a live session's row says; dates in one form, both ways:
        # the local rows gave `+00:00` where the API's gave `Z`
        assert [(r["submitted_by"], c["submitted_by"]) for r, c in zip(rows, cli, strict=True)] == [
            ("owen", "owen"),
            ("sam", "sam"),
        ]
        for key in ("created_at", "finished_at", "archived_at"):
            assert rows[0][key] == cli[0][key] and rows[0][key].endswith("Z"), key
        assert [r["id"] for r in listed(TOKEN["olga"]).json()] == ["live-owen"]
        assert listed(TOKEN["olga"], archived="true", status="failed").json() == []
        assert [r["id"] for r in listed(OWEN, archived="true").json()] == ["old-owen"]
        mine = listed(TOKEN["olga"], archived="true", submitted_by="sam").json()
        assert [r["id"] for r in mine] == ["old-sam"]
        paged = listed(TOKEN["olga"], archived="true", limit=1, offset=1).json()
        assert [r["id"] for r in paged] == ["old-sam"]
        refused = listed(TOKEN["olga"], archived="true", outcome="repaired")
        assert (refused.status_code, refused.json()["code"]) == (422, "invalid_input")
        assert "`outcome` does not go with `archived`" in refused.json()["message"]
        # refused as well where the token sees nothing: the request is wrong, not its answer
        other = listed(OWEN, archived="true", submitted_by="sam", outcome="repaired")
        assert (other.status_code, other.json()["code"]) == (422, "invalid_input")
        unknown = listed(TOKEN["olga"], archived="true", kind="nosuchkind")
        assert (unknown.status_code, unknown.json()["code"]) == (422, "unknown_kind")
        with Client(server.url, token=TOKEN["olga"]) as remote:  # the Python client's
            found = remote.archived_sessions(status="completed", limit=1)
            assert [(a.id, a.status, a.parent_id, a.submitted_by) for a in found] == [
                ("old-owen", "completed", None, "owen")
            ]
    client.close()


def test_an_archived_listing_by_a_kind_only_archived_sessions_have_is_no_unknown_kind(
    tmp_path: Path,
) -> None:
    """The kind of an archived session (one no worker here runs) was called unknown (422)
    where the listing also named a submitter: an admin's `submitted_by`, or an own-only
    token's own, made only the live sessions count, though the index keeps submitters."""
    settings, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    made = new_session("old-refund", now=clock(), kind="refund")
    head = made.head.model_copy(update={"submitted_by": "owen"})
    store.create(made.model_copy(update={"head": head}), now=clock())
    assert think(store, "old-refund", reply(content="done"), now=clock()).status.terminal
    report = archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    assert report.archived == 1
    tokens = {**TOKENS, OWEN: {"name": "owen", "roles": ["operator"], "own_only": True}}
    app = make_api(settings, ApiSettings(api_tokens=tokens), client=client)  # type: ignore[arg-type]
    with Server(app) as server, httpx.Client(base_url=server.url) as http:

        def listed(token: str, **query: object) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"}
            return http.get("/api/v1/sessions", params=query, headers=headers)

        for token, query in (
            (TOKEN["olga"], {"submitted_by": "sam"}),
            (OWEN, {"status": "failed"}),
        ):
            for archived in ("true", "false"):
                answer = listed(token, kind="refund", archived=archived, **query)
                assert (answer.status_code, answer.json()) == (200, []), (token, query, archived)
        assert [r["id"] for r in listed(OWEN, kind="refund", archived="true").json()] == [
            "old-refund"
        ]
    client.close()
