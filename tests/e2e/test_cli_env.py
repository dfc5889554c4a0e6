"""`tickwork submit repair --setup ...`, the environment on `show`, and `tickwork env
ls|show|rm` through the real entry point, with a `tickwork worker` process."""

from __future__ import annotations

import re

import pytest
from tickwork.worker.sandbox.runner import Sandbox, check

from tests.e2e.conftest import Cli, Deployment, call, stop
from tests.environments.projects import project
from tests.services import IN_CI

pytestmark = pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)


def test_setup_commands_show_and_env_ls_show_rm(deployment: Deployment, cli: Cli) -> None:
    source = project(deployment.tmp / "src")
    waits = deployment.script(
        [{"content": "edit", "tool_calls": [call("write_file", path="a.txt", content="a")]}]
    )
    worker, _ = cli.start("worker", "--concurrency", "2")
    try:
        sid = cli(
            "submit",
            "repair",
            "--workspace",
            str(source),
            "--test-cmd",
            "test -f /env/made",
            "--setup",
            "echo building",
            "--setup",
            "touch /env/made",
            "--model",
            waits,
        ).stdout.strip()
        head = deployment.client.wait(sid, timeout=90)
        assert head.status.value == "waiting_approval", head.error_message
        key = head.result["environment"]["key"]
        shown, listed, one = cli.many(
            ("show", sid), ("env", "ls", "--json"), ("env", "show", key[:8], "--json")
        )
        assert re.search(rf"environment +{key[:12]} ready · built by this session", shown.stdout)
        rows = listed.json()
        assert [(r["key"], r["status"], r["sessions"], r["live_sessions"]) for r in rows] == [
            (key, "ready", 1, 1)
        ]
        assert "building" in one.json()["log"] and one.json()["detail"]["setup"] == [
            "echo building",
            "touch /env/made",
        ]
        cli("env", "rm", key, ok=False).error(1, "used by 1 live session", "--force")
        cli("env", "show", "beef", ok=False).error(1, "no environment has the key")
        removed = cli("env", "rm", key[:10], "--force", "--json").json()
        assert removed == {"removed": key} and cli("env", "ls", "--json").json() == []
    finally:
        stop(worker)
