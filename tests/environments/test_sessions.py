"""Environments through real ticks (SQLite, a worker in a thread, bubblewrap): `--setup`
auto without egress, explicit commands, none, and a failed setup (ENV_SETUP)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fsm.values import Status
from tests.environments.projects import project
from tests.services import IN_CI
from tickwork.testing import SessionDriver, call, embedded_settings, reply, running_worker
from worker.tools.runner import Sandbox, check

pytestmark = pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)

FIX = "def add(a, b):\n    return a + b\n"


def _run(tmp_path: Path, data: dict[str, Any], replies: list[dict[str, Any]]) -> Any:
    settings = embedded_settings(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit("repair", data, replies=replies)
        return driver.run(sid, timeout=120)


def test_auto_without_egress_installs_the_project_and_commands_see_it(tmp_path: Path) -> None:
    source = project(tmp_path / "src")
    session = _run(
        tmp_path,
        {"workspace": str(source), "test_command": "python -m unittest discover -s tests"},
        [
            reply(
                "where",
                call(
                    "run_command",
                    command="command -v python; python -c 'import calcpkg as c; print(c.__file__)'",
                ),
            ),
            reply("fix", call("write_file", path="calcpkg/__init__.py", content=FIX)),
            reply("done"),
        ],
    )
    head = session.head
    assert head.status is Status.COMPLETED, head.error_message
    env = head.result["environment"]
    assert env["status"] == "ready" and env["built"] is True and len(env["key"]) == 64
    seen = session.observations[0].content
    assert "/env/bin/python" in seen
    # the editable install points at the session's own working copy, not a copy of it
    assert "/workspace/calcpkg/__init__.py" in seen
    assert head.result["tests"]["passed"] is True
