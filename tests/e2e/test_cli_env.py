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
        # which project each environment was built for: the key alone did not say
        assert rows[0]["project"] == "calcpkg"
        table = cli("env", "ls").stdout
        assert re.search(rf"{key[:12]} \W+ calcpkg \W+ ready", table), table
        assert "building" in one.json()["log"] and one.json()["detail"]["setup"] == [
            "echo building",
            "touch /env/made",
        ]
        # each row once: `project` was printed from the view and again from the record
        text = cli("env", "show", key[:8]).stdout
        assert re.findall(r"^(\w+) ", text, re.M).count("project") == 1, text
        cli("env", "rm", key, ok=False).error(1, "used by 1 live session", "--force")
        cli("env", "show", "beef", ok=False).error(1, "no environment has the key")
        removed = cli("env", "rm", key[:10], "--force", "--json").json()
        assert removed == {"removed": key} and cli("env", "ls", "--json").json() == []
    finally:
        stop(worker)


def test_show_says_the_environment_is_not_ready_yet_before_the_first_tick(
    deployment: Deployment, cli: Cli
) -> None:
    """`show` of a session whose environment was being built (40 s for a real project)
    had no environment line at all: nothing said what the session waited for."""
    source = project(deployment.tmp / "src")
    script = deployment.script([{"content": "done"}])
    sid = cli(
        "submit", "repair", "--workspace", str(source), "--test-cmd", "true",
        "--model", script,
    ).stdout.strip()  # fmt: skip
    shown = cli("show", sid).stdout
    assert re.search(r"environment +not ready yet \(setup auto\): the next tick builds", shown)
    given = ("--setup", "true", "--setup", "true")
    listed = cli(
        "submit", "repair", "--workspace", str(source), "--test-cmd", "true", *given,
        "--model", script,
    ).stdout.strip()  # fmt: skip
    assert "not ready yet (setup 2 commands)" in cli("show", listed).stdout
    none = cli(
        "submit", "repair", "--workspace", str(source), "--test-cmd", "true",
        "--setup", "none", "--model", script,
    ).stdout.strip()  # fmt: skip
    assert "not ready yet" not in cli("show", none).stdout
