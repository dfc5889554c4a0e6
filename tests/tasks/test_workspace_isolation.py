"""Sessions never share files: ten at once on one source each see only their own changes, and a
fork starts from the files of its step, not from its parent's latest ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tickwork.fsm.values import Status
from tickwork.store.schema import blobs

from tests.store.conftest import table_rows
from tests.tasks.conftest import Deployment

KIND = "tests.jobs:FILES"
SOURCE = "def add(a, b):\n    return a - b\n"


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"content": f"call {name}", "tool_calls": [{"name": name, "arguments": arguments}]}


def _script(line: str) -> list[dict[str, Any]]:
    return [
        _call("run_command", command="cat calc.py"),
        _call("run_command", command=f"echo '{line}' >> calc.py"),
        _call("run_command", command="cat calc.py"),
        {"content": "done"},
    ]


def _seen(deployment: Deployment, session_id: str, step: int) -> str:
    session = deployment.client.load(session_id)
    seen = session.observation(session.steps[step - 1].calls[0].call_id)
    assert seen is not None
    return seen.content


def _submit(deployment: Deployment, project: Path, line: str) -> str:
    return deployment.client.submit(
        KIND,
        {"workspace": str(project), "test_command": "python3 -c pass"},
        model=deployment.script(_script(line)),
    ).id


def test_ten_sessions_on_one_source_and_a_fork_each_see_only_their_own_files(
    deployment: Deployment,
) -> None:
    project = deployment.tmp / "project"
    project.mkdir()
    (project / "calc.py").write_text(SOURCE)
    with deployment.worker(concurrency=4):
        ids = [_submit(deployment, project, f"# session {i}") for i in range(10)]
        heads = [deployment.client.wait(i, timeout=120) for i in ids]
        assert all(h.status is Status.COMPLETED for h in heads), [h.error_message for h in heads]

        child = deployment.client.fork(ids[0], from_step=1, by="dave").id
        # before it runs: the files of step 1, not the parent's changed ones
        assert deployment.client.read_file(child, "calc.py") == SOURCE.encode()
        assert deployment.client.patch(child) == ""
        forked = deployment.client.wait(child, timeout=60)
    assert forked.status is Status.COMPLETED, forked.error_message

    for i, (session_id, head) in enumerate(zip(ids, heads, strict=True)):
        assert _seen(deployment, session_id, 1).count("# session") == 0
        after = _seen(deployment, session_id, 3)
        assert after.rstrip().endswith(f"# session {i}") and after.count("# session") == 1
        assert head.result["patch"].count("+# session") == 1
        assert f"+# session {i}\n" in head.result["patch"]
    # the fork appended once, to the source: not to its parent's already changed file
    assert _seen(deployment, child, 3).count("# session 0") == 1
    assert forked.result["patch"] == heads[0].result["patch"]
    assert project.joinpath("calc.py").read_text() == SOURCE
    # one source: its file stored once, whatever the number of sessions
    stored = {r["hash"] for r in table_rows(deployment.client.store.engine, blobs)}
    assert len(stored) == 1 + 1 + 10  # the file, the manifest, one changed file per session
