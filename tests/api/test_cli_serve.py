"""`tickwork serve` as a real process: it serves the API, the page and /metrics, and stops
cleanly on SIGTERM; without tokens it refuses to start."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import typer
from tickwork.fsm.errors import ConfigurationError
from typer.testing import CliRunner

from tests.api.conftest import TOKEN, until
from tests.ports import free_port
from tests.tasks.conftest import ROOT
from tickwork import cli_serve

#: `tickwork` with only the serve command: what cli.py does once it lists tickwork.cli_serve
ENTRY = (
    "import typer; from tickwork import cli_serve; app = typer.Typer(); "
    "app.callback()(lambda: None); cli_serve.register(app); app()"
)
#: how long `tickwork serve` may take to answer once started: over 60 s on a machine
#: loaded ~20 deep (a CI run with every xdist worker busy)
SERVE_START_S = 120.0


def test_serve_is_a_command_with_host_and_port() -> None:
    app = typer.Typer()
    app.callback()(lambda: None)
    cli_serve.register(app)
    shown = CliRunner().invoke(app, ["serve", "--help"])
    assert shown.exit_code == 0, shown.output
    assert "--host" in shown.output and "--port" in shown.output
    assert "TICKWORK_API_TOKENS" in shown.output


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    env.update(PYTHONPATH=str(ROOT), TICKWORK_STATE_DIR=str(tmp_path / "state"), **extra)
    return env


def test_serve_runs_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    tokens = json.dumps({TOKEN["alice"]: {"name": "alice", "roles": ["approver"]}})
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "serve", "--port", str(port)],
        cwd=ROOT,
        env=_env(tmp_path, TICKWORK_API_TOKENS=tokens),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=1).json() == {"ok": True}
            except httpx.HTTPError:
                return False

        until(healthy, timeout=SERVE_START_S, what="tickwork serve")
        me = httpx.get(f"{url}/api/v1/me", headers={"Authorization": f"Bearer {TOKEN['alice']}"})
        assert me.json() == {
            "name": "alice",
            "roles": ["approver"],
            "tenant": "default",
            "own_only": False,
        }
        page = httpx.get(url)
        assert page.status_code == 200 and "<title>tickwork</title>" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert "tickwork_store_up 1.0" in httpx.get(f"{url}/metrics").text
        # a connection idle for longer than a client's pool keeps one (httpx: 5 s) is still
        # open: the client, not the server, closes it, so no request meets a closing socket
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            for pause in (0, 6.5):
                time.sleep(pause)
                conn.request("GET", "/healthz")
                answer = conn.getresponse()  # RemoteDisconnected: the server closed it
                assert (answer.status, answer.read()) == (200, b'{"ok":true}'), pause
        finally:
            conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0].decode()
    # uvicorn shuts down gracefully, then re-raises the signal it caught
    assert proc.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert f"on http://127.0.0.1:{port}/" in output


def test_serve_without_tokens_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TICKWORK_API_TOKENS", "TICKWORK_API_TOKENS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TICKWORK_STATE_DIR", str(tmp_path / "state"))
    app = typer.Typer()
    app.callback()(lambda: None)
    cli_serve.register(app)
    done = CliRunner().invoke(app, ["serve", "--port", "0"])
    assert isinstance(done.exception, ConfigurationError), done.output
    assert "no API tokens" in str(done.exception)


def test_serve_on_an_address_it_cannot_listen_on_says_so_in_one_line(tmp_path: Path) -> None:
    """A port in use, or a host that names no address of this machine: `tickwork serve`
    said it served there, then uvicorn logged `ERROR: [Errno 98] ...` among its INFO lines
    and exited 3, a code tickwork does not use."""
    tokens = json.dumps({TOKEN["alice"]: {"name": "alice", "roles": ["approver"]}})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = {
            ("--port", str(port)): (1, f"cannot listen on 127.0.0.1:{port}", "--port"),
            ("--host", "no-such-host.invalid", "--port", "0"): (
                2,
                "cannot listen on no-such-host.invalid:0",
                "--host",
            ),
        }
        for args, (code, *fragments) in cases.items():
            done = subprocess.run(
                [sys.executable, "-m", "tickwork", "serve", *args],
                cwd=tmp_path,
                env=_env(tmp_path, TICKWORK_API_TOKENS=tokens),
                capture_output=True,
                text=True,
                timeout=SERVE_START_S,
            )
            assert done.returncode == code, done
            assert "API and page on" not in done.stdout, done.stdout
            (line,) = done.stderr.splitlines()
            assert line.startswith("error: "), line
            for fragment in fragments:
                assert fragment in line, line


def test_serve_names_the_log_levels_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--log-level bogus` ended in uvicorn's KeyError traceback."""
    from tickwork.cli import main

    monkeypatch.setenv("TICKWORK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv(
        "TICKWORK_API_TOKENS", json.dumps({TOKEN["alice"]: {"name": "alice", "roles": []}})
    )
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", "0", "--log-level", "bogus"])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--log-level" in line and "'bogus' is not one of" in line, line
    assert "'warning'" in line and "'debug'" in line, line
