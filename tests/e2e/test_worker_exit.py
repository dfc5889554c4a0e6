"""How `tickwork worker` ends, as a process: Celery's exit code, not 0 whatever happened,
and 130 for Ctrl-C (README, "Errors and exit codes")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from tests.e2e.conftest import ROOT
from tests.services import rabbitmq_url


def _bare_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    return {**env, "PYTHONPATH": str(ROOT), **settings}


def test_a_worker_that_celery_stops_on_an_unrecoverable_error_exits_1(tmp_path: Path) -> None:
    # before, `tickwork worker` exited 0 after Celery's "Unrecoverable error": a supervisor
    # restarting failed workers, or a check of the exit code, saw a clean stop
    from kombu import Connection, Queue

    url = rabbitmq_url()
    name = f"tickwork-test-exit-{uuid.uuid4().hex[:8]}"
    with Connection(url) as conn:  # declared classic by an earlier release, say
        Queue(name, durable=True).bind(conn.default_channel).declare()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tickwork", "worker", "--pool", "solo", "--no-dead-letters"],
            cwd=ROOT,
            env=_bare_env(
                TICKWORK_STATE_DIR=str(tmp_path / "state"),
                TICKWORK_BROKER_URL=url,
                TICKWORK_QUEUE=name,
                TICKWORK_RELAY_PERIOD_S="60",
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        with Connection(url) as conn:
            conn.default_channel.queue_delete(name)
    assert "PRECONDITION_FAILED" in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1, done.stderr[-2000:]


def test_a_worker_stopped_with_ctrl_c_exits_130(tmp_path: Path) -> None:
    # before, 0: Celery says 1 for it, which `tickwork worker` dropped as it dropped all
    with subprocess.Popen(
        [sys.executable, "-m", "tickwork", "worker", "--pool", "solo"],
        cwd=ROOT,
        env=_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as worker:
        try:
            assert worker.stderr is not None
            for line in worker.stderr:
                if " ready." in line:
                    break
            worker.send_signal(signal.SIGINT)
            worker.stderr.read()
            assert worker.wait(timeout=60) == 130
        finally:
            if worker.poll() is None:
                worker.kill()


def test_a_log_level_celery_refuses_is_a_usage_error(tmp_path: Path) -> None:
    # before, a traceback ending in Click's BadParameter, and exit 1
    done = subprocess.run(
        [sys.executable, "-m", "tickwork", "worker", "--pool", "solo", "--loglevel", "LOUD"],
        cwd=ROOT,
        env=_bare_env(TICKWORK_STATE_DIR=str(tmp_path / "state")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "'LOUD' is not one of 'DEBUG'" in done.stderr, done.stderr[-2000:]
