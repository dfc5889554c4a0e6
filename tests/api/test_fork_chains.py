"""A fork of a fork, as `tickwork show` and `GET /api/v1/sessions/{id}` show it: its own
patch under `forked_from`, and the patches of the forks it descends from, oldest first,
under `earlier_patches`, as `tickwork dlq show` lists them.

The sessions are written and forked through the store (no worker runs)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import Status
from tickwork.store.migrate import upgrade
from tickwork.worker.config.settings import Settings

from tests.api.conftest import TOKEN, TOKENS, Server
from tickwork.api import ApiSettings, make_api
from tickwork.cli import main
from tickwork.client import Tickwork
from tickwork.render import chain_lines
from tickwork.testing.store_ticks import Clock, new_session, reply, run_step, think


def chain(tmp_path: Path) -> tuple[Settings, Tickwork, list[str]]:
    """A session of three steps; a first fork of it from step 2 with an instruction and an
    output written by hand (then run a step); a second fork of the first from step 1, before
    both, with an instruction of its own. Their ids, oldest first."""
    settings = Settings(
        state_dir=tmp_path / "state", queue=f"tickwork.ticks.{uuid.uuid4().hex[:8]}"
    )
    settings.state_dir.mkdir(parents=True)
    upgrade(settings.db_url)
    client = Tickwork(settings)
    store, clock = client.store, Clock()
    original, first, second = (f"{name}-{uuid.uuid4().hex[:8]}" for name in "osf")
    store.create(new_session(original, now=clock()), now=clock())
    for number in (1, 2):
        run_step(store, original, number, now=clock())
    assert think(store, original, reply(content="done"), now=clock()).status is Status.COMPLETED
    (called,) = store.load(original).steps[1].calls
    patched = ForkPatch(
        system_prompt="You repair code, carefully.",
        append_instruction="try A",
        tool_outputs={called.call_id: "written by hand"},
    )
    store.fork(original, new_id=first, from_step=2, patch=patched, by="erin", now=clock())
    assert think(store, first, reply(content="done"), now=clock()).status is Status.COMPLETED
    again = ForkPatch(append_instruction="try B", budgets={"max_steps": 9})
    store.fork(first, new_id=second, from_step=1, patch=again, by="frank", now=clock())
    return settings, client, [original, first, second]


def shown(settings: Settings, *args: str) -> str:
    """What `tickwork ARGS` prints on this deployment, run in this process."""
    out = io.StringIO()
    env = {"TICKWORK_STATE_DIR": str(settings.state_dir), "COLUMNS": "250"}
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(out):
        try:
            main(list(args))
        except SystemExit as exc:
            assert not exc.code, out.getvalue()
    return out.getvalue()


def test_a_fork_of_a_fork_shows_the_patches_of_its_chain(tmp_path: Path) -> None:
    """`show` and the API's session view gave a fork of a fork its own patch only, while it
    runs under its chain's (the first fork's system prompt): an analyst could not tell what
    the run had. Both list the earlier forks' patches, saying what a later fork left out."""
    settings, client, (original, first, second) = chain(tmp_path)
    (called,) = client.load(original).steps[1].calls
    app = make_api(settings, ApiSettings(api_tokens=TOKENS), client=client)  # type: ignore[arg-type]
    with (
        Server(app) as server,
        httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKEN['olga']}"}
        ) as http,
    ):
        view = http.get(f"/api/v1/sessions/{second}").json()
        assert view["forked_from"]["patch"] == {
            "append_instruction": "try B",
            "budgets": {"max_steps": 9},
        }
        (earlier,) = view["earlier_patches"]
        assert {k: earlier[k] for k in ("fork", "session_id", "step", "by")} == {
            "fork": first,
            "session_id": original,
            "step": 2,
            "by": "erin",
        }
        assert earlier["patch"]["system_prompt"] == "You repair code, carefully."
        assert earlier["patch"]["append_instruction"] == "try A"
        # a fork of the original has no earlier patches; the original is no fork
        assert http.get(f"/api/v1/sessions/{first}").json()["earlier_patches"] == []
        assert http.get(f"/api/v1/sessions/{original}").json()["earlier_patches"] == []
        schema = http.get("/api/v1/openapi.json").json()["components"]["schemas"]
        assert "earlier_patches" in schema["SessionView"]["properties"]
        assert {"fork", "session_id", "step", "patch"} <= set(schema["EarlierPatch"]["properties"])

    as_json: dict[str, Any] = json.loads(shown(settings, "show", second, "--json"))
    assert as_json["earlier_patches"] == view["earlier_patches"]
    text = shown(settings, "show", second)
    lines = [" ".join(line.split()) for line in text.splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith("earlier patches"))
    assert lines[at - 2 : at] == [
        "patch appended instruction: 'try B'",
        "budgets: max_steps 9",
    ], lines
    said = " ".join(text[text.index("earlier patches") :].split())  # however it wraps
    assert said.startswith(f"earlier patches {first} from {original} at step 2: system prompt: ")
    assert "appended instruction: 'try A'; tool output of" in said
    # the second fork kept step 1 only: the instruction after step 2 is not its history
    assert (
        f"(a later fork started from step 1: its appended instruction and its output of "
        f"{called.call_id} (a call after step 1) not kept)"
    ) in said, said
    client.close()


def test_an_output_written_for_a_step_a_later_fork_kept_is_not_said_lost() -> None:
    """`show` said a fork's hand-written outputs were "not kept" by a later fork from an
    earlier step whenever it had any, though an output of a call at or before that step is
    kept: it names the outputs of calls after the later fork's step, and only those."""
    earlier = [
        {
            "fork": "f1",
            "session_id": "o",
            "step": 3,
            "by": "erin",
            "at": "2026-01-01T00:00:00+00:00",
            "patch": {"tool_outputs": {"s1c0": "by hand", "s3c0": "by hand", "s2c1": "too"}},
        }
    ]
    (kept_all,) = chain_lines(earlier, 3)
    assert "not kept" not in kept_all
    (kept_one,) = chain_lines(earlier, 1)
    assert kept_one.endswith(
        "(a later fork started from step 1: its outputs of s2c1, s3c0 (calls after step 1) "
        "not kept)"
    ), kept_one
    only_kept = [{**earlier[0], "patch": {"tool_outputs": {"s1c0": "by hand"}}}]
    (line,) = chain_lines(only_kept, 1)
    assert "not kept" not in line, line


def test_an_archived_parent_ends_the_chain_only_if_it_was_a_fork(tmp_path: Path) -> None:
    """A fork whose parent (no fork) was archived listed that parent as an earlier fork
    "not read", and the page linked its compare view, which archived sessions have not: an
    archived parent that was no fork ends the chain with nothing; an archived fork still
    ends it saying it was not read (`tickwork show` reads it back)."""
    from tickwork.store.retention import Policy, archive_pass

    settings, client, (_, first, second) = chain(tmp_path)
    store, clock = client.store, Clock()
    report = archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(3600)
    )
    assert report.archived == 2  # the original and the first fork; the second never ran
    assert client.earlier_patches(client.load(second)) == [{"fork": first, "unread": True}]
    plain_fork = f"p-{uuid.uuid4().hex[:8]}"
    store.create(new_session(plain_fork, now=clock()), now=clock())
    assert think(store, plain_fork, reply(content="done"), now=clock()).status.terminal
    fork_of_it = f"q-{uuid.uuid4().hex[:8]}"
    store.fork(plain_fork, new_id=fork_of_it, from_step=1, patch=ForkPatch(), by="o", now=clock())
    archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(3600)
    )
    assert client.earlier_patches(client.load(fork_of_it)) == []
    assert "earlier patches" not in shown(settings, "show", fork_of_it)
    client.close()


def test_the_chain_ends_before_a_fork_the_caller_may_not_see(tmp_path: Path) -> None:
    """The API gave a fork of a fork's whole chain to a token that may not see an earlier
    fork (another submitter's, for an own-only token): the chain ends before it."""
    _, client, (_, first, second) = chain(tmp_path)
    whole = client.load(second)
    assert [e["fork"] for e in client.earlier_patches(whole)] == [first]
    by_erin = client.get(first).submitted_by
    assert client.earlier_patches(whole, sees=lambda tenant, by: by != by_erin) == []
    assert client.earlier_patches(whole, sees=lambda tenant, by: True) == (
        client.earlier_patches(whole)
    )
    client.close()
