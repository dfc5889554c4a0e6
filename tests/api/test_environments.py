"""A repair session's environment through the API: on GET session (its result), and a
submit whose `input.setup` is bad is a 422 naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.fsm.values import Status
from tickwork.worker.sandbox.runner import Sandbox, check

from tests.api.conftest import Stack
from tests.environments.projects import project
from tests.services import IN_CI


@pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)
def test_get_session_shows_its_environment(stack: Stack, tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    head = stack.deployment.client.submit(
        "repair",
        {"workspace": str(source), "test_command": "true", "setup": ["echo hello-env"]},
        model=stack.deployment.script([{"content": "done"}]),
    )
    stack.wait(head.id, Status.COMPLETED)
    shown = stack.http("alice").get(f"/api/v1/sessions/{head.id}").json()
    env = shown["head"]["result"]["environment"]
    assert env["status"] == "ready" and env["setup"] == ["echo hello-env"]
    assert "hello-env" in env["log"] and len(env["key"]) == 64


@pytest.mark.parametrize(
    ("setup", "said"),
    [(["ok", "echo \u0000"], "NUL"), (7, "`setup` must be"), (["auto", "x"], "alone")],
)
def test_a_bad_setup_is_refused(stack: Stack, setup: object, said: str) -> None:
    answer = stack.http("sam").post(
        "/api/v1/sessions",
        json={
            "kind": "repair",
            "input": {"repo": "https://example.com/x.git", "test_command": "true", "setup": setup},
            "model": stack.deployment.script([{"content": "done"}]),
        },
    )
    assert answer.status_code == 422, answer.text
    assert said in answer.text
