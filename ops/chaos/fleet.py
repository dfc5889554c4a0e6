"""The `celery worker` processes of a chaos run: started, killed, replaced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from tickwork.worker.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


class Fleet:
    """`celery worker` processes, each in its own process group."""

    def __init__(self, settings: Settings, folder: Path, concurrency: int) -> None:
        self.settings, self.folder, self.concurrency = settings, folder, concurrency
        folder.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}
        self.started = self.killed = 0
        #: why each worker that exited on its own (not killed by us) went
        self.exited: list[str] = []

    def env(self) -> dict[str, str]:
        s = self.settings
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
        env.update(
            {
                "PYTHONPATH": str(ROOT),
                "TICKWORK_DATABASE_URL": s.db_url,
                "TICKWORK_BROKER_URL": s.broker_url,
                "TICKWORK_STATE_DIR": str(s.state_dir),
                "TICKWORK_QUEUE": s.queue,
                "TICKWORK_DEAD_LETTER_QUEUE": s.dead_letter_queue,
                "TICKWORK_LEASE_S": str(s.lease_s),
                "TICKWORK_RELAY_PERIOD_S": str(s.relay_period_s),
                "TICKWORK_RELAY_AFTER_S": str(s.relay_after_s),
                "TICKWORK_WORKSPACES_DIR": str(s.workspaces_path),
            }
        )
        return env

    def spawn(self) -> subprocess.Popen[bytes]:
        self.started += 1
        path = self.folder / f"worker-{self.started:03d}.log"
        with open(path, "wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "tickwork.worker.tick.app",
                    "worker",
                    "--pool",
                    "threads",
                    "--concurrency",
                    str(self.concurrency),
                    "-Q",
                    self.settings.queue,
                    "-n",
                    f"chaos{self.started}@%h",
                    "--loglevel",
                    "INFO",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ],
                cwd=ROOT,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        self.logs[proc.pid] = path
        return proc

    def replace_exited(self) -> None:
        """Start a new worker for each that exited on its own, as a supervisor would."""
        for proc in [p for p in self.procs if p.poll() is not None]:
            self.procs.remove(proc)
            lines = self.logs[proc.pid].read_text(errors="replace").splitlines()
            why = next((ln for ln in reversed(lines) if "Unrecoverable error" in ln), "")
            self.exited.append(why.split("]", 1)[-1].strip() or f"exit code {proc.returncode}")
            self.spawn()

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        self.procs.remove(proc)
        self.killed += 1

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.procs.clear()

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logs.values()))
