"""A rolling upgrade from the previous release (0.1.0, commit PREVIOUS) on one Postgres and one
Redis queue: its worker, from a git worktree of that commit in a venv of its own, runs beside
this release's worker, then stops; sessions submitted by either release's client all finish,
every call ran exactly once, and a repair session of the previous release gets its patch on
this release's worker.

What this does not show, because 0.1.0 cannot: 0.1.0 workers do not read runtime levels, so
they would run a session of a later level; `test_runtime_levels.py` shows the refusal that
protects mixed fleets from this release on (ops/RUNBOOK.md, "Upgrades").
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import RUNTIME_LEVEL, Status

from tests.services import missing
from tests.tasks.conftest import ROOT, TEST_KIND, Deployment, stop, until
from tickwork.cli_demo import DEMO_SCRIPT, demo_input, prepare_demo_workspace

pytestmark = pytest.mark.slow

#: the previous release: 0.1.0, as it was on main before 0.2.0
PREVIOUS = "118c3a7"
WRITE = "s3c0"
FIX = "-    return sum(numbers) / (len(numbers) + 1)\n+    return sum(numbers) / len(numbers)\n"
STEPS = 5

#: the previous release's client, run with its own Python (its own module names, from
#: before the one namespace): submits a session, prints its id
SUBMIT = """
import json, sys
from tickwork.client import Tickwork
from worker.settings import load_settings
kind, data, model = json.loads(sys.argv[1])
client = Tickwork(load_settings())
print(client.submit(kind, data, model=model).id)
client.close()
"""


def _run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The previous release checked out beside this one, installed in a venv of its own;
    the path of its tree (its Python: `.venv/bin/python` in it)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        missing("the previous release", f"{ROOT} is not a git checkout")
    known = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], check=False
    )
    if known.returncode != 0:
        missing("the previous release", f"commit {PREVIOUS} is not in this clone's history")
    tree = tmp_path_factory.mktemp("previous") / "tickwork"
    _run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), PREVIOUS])
    try:
        venv = tree / ".venv"
        if shutil.which("uv"):
            _run(["uv", "venv", "-q", "--python", sys.executable, str(venv)])
            _run(
                [
                    "uv",
                    "pip",
                    "install",
                    "-q",
                    "--python",
                    str(venv / "bin" / "python"),
                    "-e",
                    str(tree),
                ]
            )
        else:
            _run([sys.executable, "-m", "venv", str(venv)])
            _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(tree)])
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False
        )


def _env(deployment: Deployment, tree: Path) -> dict[str, str]:
    env = {**deployment.env(), "PYTHONPATH": str(tree), "VIRTUAL_ENV": str(tree / ".venv")}
    env.pop("PYTHONHOME", None)
    return env


def _submit_old(
    deployment: Deployment, tree: Path, kind: str, data: dict[str, Any], model: str
) -> str:
    done = _run(
        [str(tree / ".venv" / "bin" / "python"), "-c", SUBMIT, json.dumps([kind, data, model])],
        cwd=tree,
        env=_env(deployment, tree),
    )
    return done.stdout.strip().splitlines()[-1]


def _old_worker(deployment: Deployment, tree: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [
                str(tree / ".venv" / "bin" / "python"),
                "-m",
                "celery",
                "-A",
                "worker.app",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                "2",
                "-Q",
                deployment.settings.queue,
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=tree,
            env={**_env(deployment, tree), "TICKWORK_WORKSPACES_DIR": str(log.parent / "old-host")},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _replies(tag: str) -> list[dict[str, object]]:
    steps: list[dict[str, object]] = [
        {
            "content": f"step {i}",
            "tool_calls": [{"name": "effect", "arguments": {"value": f"{tag}-{i}"}}],
        }
        for i in range(STEPS)
    ]
    return [*steps, {"content": f"{tag} done"}]


@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_old_and_new_workers_side_by_side_lose_nothing(
    deployment: Deployment, previous: Path, tmp_path: Path
) -> None:
    client = deployment.client
    ticks_log = tmp_path / "old-worker.log"
    old = _old_worker(deployment, previous, ticks_log)
    try:
        sessions: dict[str, str] = {}
        for n in range(3):
            tag = f"old{n}"
            model = deployment.script(_replies(tag), name=tag)
            sessions[tag] = _submit_old(
                deployment, previous, TEST_KIND, {"sink": str(deployment.sink)}, model
            )
            tag = f"new{n}"
            sessions[tag] = deployment.submit(_replies(tag))
        workspace = prepare_demo_workspace(deployment.settings.state_dir)
        repair = _submit_old(
            deployment,
            previous,
            "repair",
            dict(demo_input(workspace)),
            f"scripted:{DEMO_SCRIPT}",
        )
        # the previous release's worker alone runs the first ticks of every session
        until(
            lambda: all(client.get(s).version >= 2 for s in sessions.values()),
            timeout=120,
            what="the old worker running the first ticks",
        )
        with deployment.worker():
            # both releases' workers on one queue for a while, then the old one stops
            until(
                lambda: (
                    sum(client.get(s).status is Status.COMPLETED for s in sessions.values()) >= 2
                ),
                timeout=120,
                what="sessions finishing on the mixed fleet",
            )
            stop(old)
            assert old.returncode is not None
            heads = {tag: client.wait(s, timeout=120) for tag, s in sessions.items()}
            waiting = client.wait(repair, timeout=120)
            assert waiting.status is Status.WAITING_APPROVAL, waiting.error_message
            client.approve(repair, WRITE, approver="alice")
            fixed = client.wait(repair, timeout=120)
    finally:
        stop(old)

    log = ticks_log.read_text(errors="replace")
    assert "succeeded" in log  # the old release's worker really ran ticks
    for tag, head in heads.items():
        assert head.status is Status.COMPLETED, (tag, head.error_message)
        assert head.final_answer == f"{tag} done"
        # the old client's sessions need level 1 (the column's default), as this release's do
        assert head.runtime_level == (1 if tag.startswith("old") else RUNTIME_LEVEL)
    # every call of every session ran exactly once across both releases' workers
    effects = [line.split()[1] for line in deployment.sink_lines("effect.log")]
    wanted = [f"{tag}-{i}" for tag in sessions for i in range(STEPS)]
    assert sorted(effects) == sorted(wanted)
    # the previous release's repair session, finished on this release's worker
    assert fixed.status is Status.COMPLETED, fixed.error_message
    assert FIX in fixed.result["patch"] and fixed.result["files_changed"] == ["calc.py"]
    assert fixed.result["tests"]["passed"] is True
    assert client.patch(repair) == fixed.result["patch"]
    assert "len(numbers) + 1" in (workspace / "calc.py").read_text()  # never edited in place
