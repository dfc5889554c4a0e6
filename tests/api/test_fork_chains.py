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
        "(a later fork started from step 1: its appended instruction and its outputs of "
        "calls after step 1 not kept)"
    ) in said, said
    client.close()
