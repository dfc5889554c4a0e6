"""Throwaway Redis and Postgres servers that the chaos run may stop, kill and restart.

The machine's own Postgres (5432) and Redis (6379) are shared with other people's test
runs, so chaos never touches them: it starts private instances on free ports in a
scratch folder and restarts those. The commands, as a person would type them:

    # Redis, no persistence: a restart loses every queued message
    redis-server --port 6390 --bind 127.0.0.1 --save "" --appendonly no \\
        --daemonize yes --dir DIR --pidfile DIR/redis.pid --logfile DIR/redis.log
    redis-cli -p 6390 shutdown nosave           # stop (then start it again as above)

    # Postgres, a private cluster (as the postgres user when run by root)
    initdb -D DIR/pg -A trust -U postgres -N
    pg_ctl -D DIR/pg -l DIR/pg.log -w -o "-p 5440 -k DIR/pg -c listen_addresses=127.0.0.1" start
    pg_ctl -D DIR/pg -m immediate -w stop        # a crash: no checkpoint, recovery on start
    pg_ctl -D DIR/pg -l DIR/pg.log -w -o "..." start

`initdb` and `pg_ctl` come from /usr/lib/postgresql/*/bin when they are not on PATH.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


class ServiceUnavailable(RuntimeError):
    """A binary needed for a private server is missing or the server would not start."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise ServiceUnavailable(f"timed out after {timeout}s waiting for {what}")


def find_binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if candidates:
        return candidates[0]
    raise ServiceUnavailable(f"{name} is not installed (looked on PATH and /usr/lib/postgresql)")


@dataclass
class PrivateRedis:
    """A Redis server of our own, without persistence."""

    folder: Path
    port: int = 0
    downtime_s: float = 0.0  #: total seconds it was down for restarts
    _binary: str = ""

    def __post_init__(self) -> None:
        self._binary = shutil.which("redis-server") or ""
        if not self._binary:
            raise ServiceUnavailable("redis-server is not installed")
        self.port = self.port or free_port()
        self.folder.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pidfile(self) -> Path:
        return self.folder / "redis.pid"

    def start(self) -> None:
        subprocess.run(
            [
                self._binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "yes",
                "--dir",
                str(self.folder),
                "--pidfile",
                str(self.pidfile),
                "--logfile",
                str(self.folder / "redis.log"),
            ],
            check=True,
            capture_output=True,
        )
        _wait(lambda: _listening(self.port), 20, f"Redis on port {self.port}")

    def stop(self) -> None:
        pid = self._pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)  # like a crash: nothing is saved (there is no persistence anyway)
        _wait(lambda: not _alive(pid), 20, f"Redis pid {pid} to exit")
        self.pidfile.unlink(missing_ok=True)

    def restart(self, down_s: float = 2.0) -> None:
        started = time.monotonic()
        self.stop()
        time.sleep(down_s)
        self.start()
        self.downtime_s += time.monotonic() - started

    def _pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (our own child not yet reaped) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class PrivatePostgres:
    """A Postgres cluster of our own; run as the `postgres` user when we are root.

    Its folder is a fresh one under the system temp directory (not under a caller's
    private folder, which the `postgres` user could not enter).
    """

    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tickwork-pg-")))
    port: int = 0
    downtime_s: float = 0.0
    _as: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.initdb = find_binary("initdb")
        self.pg_ctl = str(Path(self.initdb).with_name("pg_ctl"))
        self.port = self.port or free_port()
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if not runuser:
                raise ServiceUnavailable("running as root needs runuser to start Postgres")
            self._as = [runuser, "-u", "postgres", "--"]
            shutil.chown(self.folder, "postgres")
            self.folder.chmod(0o755)

    @property
    def data(self) -> Path:
        return self.folder / "pg"

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self._as, *argv], capture_output=True, text=True, timeout=timeout, cwd="/"
        )
        if done.returncode != 0:
            raise ServiceUnavailable(
                f"{' '.join(argv[:2])} failed ({done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-800:]}"
            )

    def init(self) -> None:
        self._run(self.initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "-N")

    def _options(self) -> str:
        return (
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
            # fsync off only risks data if the machine crashes, which chaos does not do;
            # synchronous_commit stays on: off, a crash loses commits already acknowledged
            "-c fsync=off -c full_page_writes=off "
            "-c max_connections=300 -c shared_buffers=64MB"
        )

    def start(self) -> None:
        self._run(
            self.pg_ctl,
            "-D",
            str(self.data),
            "-l",
            str(self.folder / "pg.log"),
            "-w",
            "-t",
            "60",
            "-o",
            self._options(),
            "start",
        )
        _wait(lambda: _listening(self.port), 30, f"Postgres on port {self.port}")

    def stop(self, mode: str = "immediate") -> None:
        self._run(self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, down_s: float = 2.0) -> None:
        started = time.monotonic()
        self.stop("immediate")  # a crash: connections cut, crash recovery at the next start
        time.sleep(down_s)
        self.start()
        self.downtime_s += time.monotonic() - started

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.admin_url.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def destroy(self) -> None:
        with contextlib.suppress(ServiceUnavailable):
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


def stop_quietly(*servers: PrivateRedis | PrivatePostgres) -> None:
    for server in servers:
        try:
            if isinstance(server, PrivatePostgres):
                server.destroy()
            else:
                server.stop()
        except Exception:
            pass
