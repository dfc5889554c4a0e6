"""A plain install, as a new user makes it: the built wheel in a fresh venv, no test extras.

From a directory whose `tasks.py`, `worker.py`, `store.py` and `fsm.py` would stand in for
tickwork's packages if the working directory were on `sys.path`: the demo runs, and one
repair session runs end to end on Postgres + Redis with `tickwork worker`, then (after its
approval) with `celery -A tickwork worker`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT
from tests.services import postgres_database, redis_url

pytestmark = pytest.mark.slow

#: what a source copy leaves out: caches, venvs, builds, the state of local runs
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".tickwork", ".*_cache"
)
SHADOWS = ("tasks", "worker", "store", "fsm")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this tree."""
    tmp = tmp_path_factory.mktemp("wheel")
    source, wheels = tmp / "source", tmp / "wheels"
    # built from a copy, so the build leaves nothing in the tree under test
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)])
    (built,) = wheels.glob("tickwork-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel built from this tree, with its dependencies only."""
    venv = tmp_path_factory.mktemp("install") / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)])
    return venv


@pytest.fixture
def shadowed(tmp_path: Path) -> Path:
    """A directory whose modules share the names of tickwork's packages."""
    where = tmp_path / "project"
    where.mkdir()
    for name in SHADOWS:
        (where / f"{name}.py").write_text(
            f"raise RuntimeError('the working directory\\'s {name}.py was imported')\n"
        )
    return where


def test_the_wheel_installs_one_namespace(wheel: Path) -> None:
    """Nothing but `tickwork` lands at the top of site-packages: the layers install as
    tickwork.fsm, tickwork.store, tickwork.worker and tickwork.tasks, so no other
    distribution's `worker` or `tasks` package is clobbered."""
    with zipfile.ZipFile(wheel) as built:
        names = built.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"tickwork"}, sorted(tops)
    for layer in ("fsm", "store", "worker", "tasks"):
        assert f"tickwork/{layer}/__init__.py" in names
    for part in ("config", "sandbox", "models", "tools", "files", "jobs", "observers", "tick"):
        assert f"tickwork/worker/{part}/__init__.py" in names
    # what is read at run time from beside the code ships too
    assert "tickwork/worker/sandbox/forward.py" in names
    assert "tickwork/store/migrations/script.py.mako" in names
    assert "tickwork/examples/agents_demo/planner.json" in names
    assert "tickwork/ops/RUNBOOK.md" in names  # `tickwork runbook`, which messages name
    for page in sorted((ROOT / "docs").glob("*.md")):  # `tickwork docs`, which messages name
        assert f"tickwork/docs/{page.name}" in names
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    with zipfile.ZipFile(wheel) as built:
        assert built.read(top_level).decode().split() == ["tickwork"]


def test_the_wheel_installs_what_a_plain_install_needs(venv: Path, tmp_path: Path) -> None:
    python = str(venv / "bin" / "python")
    found = _run(
        [
            python,
            "-c",
            "import importlib.util as u, json, tickwork, tickwork.cli_demo as r; "
            "import kombu.transport.redis, amqp, tickwork.remote; "
            "print(json.dumps({'tickwork': tickwork.__file__, 'script': str(r.DEMO_SCRIPT), "
            "'example': str(r.DEMO_EXAMPLE), 'pytest': u.find_spec('pytest') is not None}))",
        ],
        cwd=tmp_path,
    )
    shown = json.loads(found.stdout)
    site = str(venv / "lib")
    assert shown["tickwork"].startswith(site), shown  # the installed copy, not this tree
    assert shown["script"].startswith(site) and Path(shown["script"]).is_file()
    assert (Path(shown["example"]) / "calc.py").is_file()
    assert not shown["pytest"]  # no test extras


def test_the_demo_runs_from_the_wheel_in_any_directory(
    venv: Path, shadowed: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    done = _run(
        [str(venv / "bin" / "tickwork"), "demo", "--yes"],
        cwd=shadowed,
        env=_plain_env(venv, TICKWORK_STATE_DIR=str(state)),
        timeout=150,
    )
    assert ": completed" in done.stdout and "pass" in done.stdout, done.stdout
    repaired = next((state / "demo").glob("buggy_calc-*"))
    assert "/ len(numbers)\n" in (repaired / "calc.py").read_text()


def test_the_agents_demo_runs_from_the_wheel_in_any_directory(
    venv: Path, shadowed: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    done = _run(
        [str(venv / "bin" / "tickwork"), "demo", "--agents", "--yes"],
        cwd=shadowed,
        env=_plain_env(venv, TICKWORK_STATE_DIR=str(state), COLUMNS="200"),
        timeout=300,
    )
    assert "outcome: repaired" in done.stdout and "cost of the tree" in done.stdout, done.stdout
    assert done.stdout.count(": completed, outcome tests_failing,") == 2, done.stdout
    # the scripts shipped in the wheel, copied into the state folder for the workers
    (planner,) = (state / "demo").glob("agents-*/planner.json")
    assert "explorer_divisor.json" in planner.read_text() and "{SCRIPTS}" not in planner.read_text()


def test_the_runbook_messages_point_to_is_read_from_the_wheel(
    venv: Path, shadowed: Path, tmp_path: Path
) -> None:
    """Messages sent operators to ops/RUNBOOK.md, which a wheel did not hold; they name
    `tickwork runbook TOPIC`, which prints the section from the installed copy."""
    env = _plain_env(venv, TICKWORK_STATE_DIR=str(tmp_path / "state"))
    done = _run([str(venv / "bin" / "tickwork"), "runbook", "upgrades"], cwd=shadowed, env=env)
    assert done.stdout.startswith("## Upgrades\n") and "tickwork db upgrade" in done.stdout
    listed = _run([str(venv / "bin" / "tickwork"), "runbook"], cwd=shadowed, env=env)
    assert "Rolling out a new graph version" in listed.stdout


def test_the_docs_messages_point_to_are_read_from_the_wheel(
    venv: Path, shadowed: Path, tmp_path: Path
) -> None:
    """Messages sent users to docs/*.md, which a wheel did not hold; they name `tickwork docs
    TOPIC` too, which prints the page (or a section of it) from the installed copy."""
    env = _plain_env(venv, TICKWORK_STATE_DIR=str(tmp_path / "state"))
    tickwork = str(venv / "bin" / "tickwork")
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import tickwork.cli_docs as d; print(d.DOCS)"],
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(venv / "lib")), where.stdout  # the installed copy
    listed = _run([tickwork, "docs"], cwd=shadowed, env=env).stdout
    for page in (ROOT / "docs").glob("*.md"):
        topic = page.stem.lower().replace("_", "-")
        assert f"\n  {topic} " in listed, listed
    assert "Environments: what a repair job's commands run with" in listed
    page = _run([tickwork, "docs", "environments"], cwd=shadowed, env=env).stdout
    assert page == (ROOT / "docs" / "ENVIRONMENTS.md").read_text()
    section = _run([tickwork, "docs", "design", "16"], cwd=shadowed, env=env).stdout
    assert section.startswith("## 16. Session trees\n") and "## 17." not in section


def test_the_eval_demo_runs_from_the_wheel_without_extras(
    venv: Path, shadowed: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = _plain_env(venv, TICKWORK_STATE_DIR=str(state), COLUMNS="200")
    done = _run([str(venv / "bin" / "tickwork"), "eval", "--demo"], cwd=shadowed, env=env)
    assert "2/4 repaired" in done.stdout and "tests_failing" in done.stdout, done.stdout
    assert str(venv / "lib") in done.stdout  # the shipped task set, read from the wheel
    chart = tmp_path / "chart.png"
    drawn = _run(
        [str(venv / "bin" / "tickwork"), "eval", "chart", "last", "--png", str(chart)],
        cwd=shadowed,
        env=env,
    )
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", drawn.stdout
    refused = subprocess.run(
        [str(venv / "bin" / "tickwork"), "eval", "show", "last", "--parquet", "r.parquet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 2 and "pip install 'tickwork[parquet]'" in refused.stderr


def test_a_session_runs_on_redis_with_the_installed_worker(
    venv: Path, shadowed: Path, tmp_path: Path
) -> None:
    redis = redis_url()
    queue = f"tickwork.install.{uuid.uuid4().hex[:8]}"
    bin_ = venv / "bin"
    workspace = tmp_path / "buggy_calc"
    shutil.copytree(ROOT / "examples" / "buggy_calc", workspace)
    script = _run(
        [str(bin_ / "python"), "-c", "import tickwork.cli_demo as r; print(r.DEMO_SCRIPT)"],
        cwd=tmp_path,
    ).stdout.strip()
    with postgres_database() as url:
        env = _plain_env(
            venv,
            TICKWORK_DATABASE_URL=url,
            TICKWORK_BROKER_URL=redis,
            TICKWORK_QUEUE=queue,
            TICKWORK_DEAD_LETTER_QUEUE=f"{queue}.dead",
            TICKWORK_STATE_DIR=str(tmp_path / "state"),
        )

        def tickwork(*args: str) -> subprocess.CompletedProcess[str]:
            return _run([str(bin_ / "tickwork"), *args], cwd=shadowed, env=env)

        tickwork("db", "upgrade")
        with _started([str(bin_ / "tickwork"), "worker", "-c", "2"], shadowed, env, tmp_path):
            submitted = tickwork(
                "submit",
                "repair",
                "--workspace",
                str(workspace),
                "--test-cmd",
                "python3 -m unittest -q",  # the sandbox's system Python, not the venv's
                "--model",
                f"scripted:{script}",
            )
            assert not submitted.stderr, submitted.stderr  # published: no warning
            session_id = submitted.stdout.strip()
            tickwork("watch", session_id, "--timeout", "60")
            waiting = json.loads(tickwork("show", session_id, "--json").stdout)["head"]
            assert waiting["status"] == "waiting_approval", waiting
        # the rest on Celery's own command line, from the same directory
        celery = [str(bin_ / "celery"), "-A", "tickwork", "worker", "-Q", queue, "-P", "solo"]
        with _started(celery, shadowed, env, tmp_path):
            tickwork("approve", session_id, *waiting["awaiting"])
            tickwork("watch", session_id, "--timeout", "60")
        head = json.loads(tickwork("show", session_id, "--json").stdout)["head"]
        assert head["status"] == "completed", head
        assert head["result"]["tests"]["passed"] is True
        # the submitted directory is never changed: the result is a patch the user applies
        assert (workspace / "calc.py").read_text() == (
            ROOT / "examples/buggy_calc/calc.py"
        ).read_text()
        tickwork("patch", session_id, "--apply", str(workspace))
    assert "/ len(numbers)\n" in (workspace / "calc.py").read_text()


def _plain_env(venv: Path, **settings: str) -> dict[str, str]:
    """The environment of a user of that venv: no TICKWORK_* but these, no PYTHONPATH."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TICKWORK_", "PYTHON", "VIRTUAL_ENV"))
    }
    path = f"{venv / 'bin'}{os.pathsep}{keep.get('PATH', '')}"
    return {**keep, "PATH": path, "VIRTUAL_ENV": str(venv), **settings}


def _run(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


class _started:
    """A long-running command in its own process group, stopped (and checked) at the end."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], logs: Path) -> None:
        self.argv, self.cwd, self.env = argv, cwd, env
        self.log = logs / f"{Path(argv[0]).name}-{uuid.uuid4().hex[:6]}.log"

    def __enter__(self) -> subprocess.Popen[bytes]:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self.proc

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        log = self.log.read_text(errors="replace")
        assert "Traceback" not in log and "was imported" not in log, log[-3000:]
        assert self.proc.returncode == 0, log[-3000:]
