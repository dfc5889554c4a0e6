"""The command sandbox through real ticks: what run_command, run_tests and the final test
run of a repair session can reach, and that a cancel or the deadline kills a running
command at once. Each escape is refused or contained, and the session goes on.
(The runner itself: test_sandbox_runner.py.)"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import ErrorCode, Head, Status
from tickwork.worker.config.secrets import Masker
from tickwork.worker.observers import webhooks
from tickwork.worker.sandbox import runner
from tickwork.worker.sandbox.runner import Sandbox, check

from tests.security.conftest import Env, observations
from tests.security.test_sandbox_runner import gone
from tests.services import IN_CI
from tickwork import render, views

SECRET = "TOP SECRET: the launch codes"
ENV_SECRET = "sk-worker-env-SECRET-0123456789"

# locally skipped where bubblewrap cannot run; under CI=true these fail instead
pytestmark = pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A workspace, a secret beside it, and a secret in the worker's environment."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("inside\n")
    monkeypatch.setenv("TICKWORK_TEST_API_KEY", ENV_SECRET)
    return workspace, outside


def repair(
    env: Env,
    workspace: Path,
    calls: list[dict[str, Any]],
    *,
    test_command: str = "true",
    **data: Any,
) -> str:
    replies = [{"content": f"step {i}", "tool_calls": [c]} for i, c in enumerate(calls)]
    return env.submit(
        [*replies, {"content": "done"}],
        kind="repair",
        data={"workspace": str(workspace), "test_command": test_command, **data},
    )


def command(text: str) -> dict[str, Any]:
    return {"name": "run_command", "arguments": {"command": text}}


PROBES = [
    "cat ../secret.txt; head -1 /etc/shadow; id",
    "cat ../outside/secret.txt",
    "cat {outside}/secret.txt",
    "ls -la .. {outside}",
    "env; cat /proc/*/environ",
    "cat {state}/tickwork.db | head -c 300",
    "ls /root /run /var/run/postgresql",
]


def test_commands_see_only_the_working_copy(env: Env, places: tuple[Path, Path]) -> None:
    workspace, outside = places
    state = env.settings.state_dir.resolve()
    calls = [command(p.format(outside=outside, state=state)) for p in PROBES]
    session_id = repair(env, workspace, calls)
    head = env.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    session = env.load(session_id)
    stored = session.model_dump_json()
    assert SECRET not in stored and ENV_SECRET not in stored
    seen = observations(session)
    assert len(seen) == len(PROBES)
    first, _ = seen["s1c0"]
    assert "uid=0(" not in first and "uid=" in first
    assert "No such file" in first


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


@pytest.fixture
def index() -> Iterator[int]:
    """An HTTP server on the host's loopback that answers "index PORT PATH"."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = f"index {self.server.server_address[1]} {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def connect(port: int) -> dict[str, Any]:
    return command(
        "python3 -c 'import socket, sys\n"
        "try:\n"
        f'    socket.create_connection(("127.0.0.1", {port}), 2); print("port {port} open")\n'
        "except OSError:\n"
        f'    print("port {port} closed")\''
    )


def fetch(url: str) -> dict[str, Any]:
    """A command that GETs `url` (through HTTP_PROXY when it is set) and prints what came."""
    return command(
        "python3 -c 'import sys, urllib.request as u\n"
        "try:\n"
        f'    print("got", u.urlopen("{url}", timeout=5).read().decode())\n'
        "except Exception as e:\n"
        '    print("failed", getattr(e, "code", ""), e.read().decode() if hasattr(e, "read") '
        "else e)'"
    )


@pytest.mark.parametrize("network", [None, "setup", "none", False])
def test_run_command_has_no_network_unless_the_job_says_all(
    env: Env,
    places: tuple[Path, Path],
    index: int,
    monkeypatch: pytest.MonkeyPatch,
    network: str | bool | None,
) -> None:
    workspace, _ = places
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", f"127.0.0.1:{index}")
    data = {} if network is None else {"network": network}
    probes = [connect(5432), connect(6379), connect(index), fetch(f"http://127.0.0.1:{index}/")]
    session_id = repair(env, workspace, [*probes, command("env")], **data)
    head = env.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    assert head.config["network"] == {None: "setup", False: "none"}.get(network, network)
    seen = [text for text, _ in observations(env.load(session_id)).values()]
    assert all("closed" in text and "open" not in text for text in seen[:3]), seen
    assert "failed" in seen[3] and "got" not in seen[3] and "PROXY" not in seen[4]


@pytest.mark.parametrize("network", ["all", True])
def test_with_network_all_commands_reach_the_allowed_hosts_only(
    env: Env,
    places: tuple[Path, Path],
    index: int,
    monkeypatch: pytest.MonkeyPatch,
    network: str | bool,
) -> None:
    workspace, _ = places
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", f"127.0.0.1:{index},127.0.0.1")
    probes = [
        fetch(f"http://127.0.0.1:{index}/simple/"),
        fetch("http://127.0.0.1:5432/"),
        fetch("http://127.0.0.1:6379/"),
        fetch("http://10.0.0.1/"),
        connect(5432),
    ]
    fetched = f"python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:{index}/\")'"
    session_id = repair(env, workspace, probes, network=network, test_command=fetched)
    head = env.run(session_id)
    assert head.config["network"] == "all"
    seen = [text for text, _ in observations(env.load(session_id)).values()]
    assert f"got index {index} /simple/" in seen[0], seen[0]
    for text in seen[1:4]:
        assert "failed 403" in text and "egress refused" in text, text
    assert "closed" in seen[4]  # no way around the proxy
    assert head.result["tests"]["passed"] is True, head.result["tests"]  # the final run too


def test_the_test_command_runs_in_the_sandbox_before_and_after(
    env: Env, places: tuple[Path, Path]
) -> None:
    workspace, _ = places
    probe = "cat ../outside/secret.txt; head -1 /etc/shadow; env; id -u; touch ../pwned"
    session_id = repair(
        env, workspace, [{"name": "run_tests", "arguments": {}}], test_command=probe
    )
    head = env.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    stored = env.load(session_id).model_dump_json()
    assert SECRET not in stored and ENV_SECRET not in stored
    final = head.result["tests"]
    assert final["passed"] is False and SECRET not in final["output"]
    uid = [line for line in final["output"].splitlines() if line.isdigit()]
    assert uid and uid != ["0"]
    assert not (workspace.parent / "pwned").exists()


def test_a_write_outside_is_contained_even_when_approved(
    env: Env, places: tuple[Path, Path]
) -> None:
    workspace, outside = places
    targets = [f"{outside}/secret.txt", "../outside/new.txt", "/tmp/tickwork-e2e-pwned"]
    calls = [command(f"echo pwned > {t}") for t in targets]
    session_id = repair(env, workspace, calls)
    for step in range(1, len(calls) + 1):
        head = env.run(session_id)
        assert head.status is Status.WAITING_APPROVAL, head.error_message
        env.client.approve(session_id, f"s{step}c0", approver="careless")
    assert env.run(session_id).status is Status.COMPLETED
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET
    assert not Path("/tmp/tickwork-e2e-pwned").exists()


def test_flooding_output_and_forking_are_cut_and_the_session_goes_on(
    env: Env, places: tuple[Path, Path]
) -> None:
    workspace, _ = places
    calls = [
        {"name": "run_command", "arguments": {"command": "yes", "timeout_s": 120}},
        {"name": "run_command", "arguments": {"command": "b() { b | b & }; b", "timeout_s": 3}},
        command("(sleep 605.4242 &); nohup sleep 605.4242 >/dev/null 2>&1 & echo still here"),
    ]
    session_id = repair(env, workspace, calls)
    assert env.run(session_id).status is Status.COMPLETED
    seen = observations(env.load(session_id))
    flood, flood_error = seen["s1c0"]
    assert flood_error and "its output passed" in flood
    assert len(flood) <= env.settings.max_output_chars + 200
    assert seen["s3c0"] == ("exit code: 0\n--- stdout ---\nstill here", False)
    assert gone("605.4242"), "a background process outlived its command"
    assert gone("b | b")


def run_in_background(env: Env, session_id: str) -> tuple[threading.Thread, list[Head]]:
    ended: list[Head] = []
    thread = threading.Thread(target=lambda: ended.append(env.run(session_id)), daemon=True)
    thread.start()
    return thread, ended


def wait_for(path: Path, thread: threading.Thread) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert thread.is_alive() and time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)


def test_cancel_kills_a_running_command_within_seconds(env: Env, places: tuple[Path, Path]) -> None:
    workspace, _ = places
    sleeper = {
        "name": "run_command",
        "arguments": {"command": "touch s; sleep 600", "timeout_s": 900},
    }
    session_id = repair(env, workspace, [sleeper])
    thread, ended = run_in_background(env, session_id)
    # the command runs in the session's working copy, never in the submitted directory
    key = hashlib.sha256(session_id.encode()).hexdigest()[:32]
    wait_for(env.settings.workspaces_path / "sessions" / key / "files" / "s", thread)
    assert not (workspace / "s").exists()
    asked = time.monotonic()
    env.client.cancel(session_id, by="ops")
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - asked < 15
    assert ended[0].status is Status.CANCELLED
    text, is_error = observations(env.load(session_id))["s1c0"]
    assert is_error and "killed: the session was cancelled" in text


def test_the_deadline_kills_a_running_command(env: Env, places: tuple[Path, Path]) -> None:
    workspace, _ = places
    sleeper = {"name": "run_command", "arguments": {"command": "sleep 600", "timeout_s": 900}}
    replies = [{"content": "wait", "tool_calls": [sleeper]}, {"content": "done"}]
    session_id = env.submit(
        replies,
        kind="repair",
        data={"workspace": str(workspace), "test_command": "true"},
        budgets={"deadline_s": 3},
    )
    started = time.monotonic()
    head = env.run(session_id)
    assert time.monotonic() - started < 30
    assert head.status is Status.FAILED and head.error_code == ErrorCode.DEADLINE
    text, is_error = observations(env.load(session_id))["s1c0"]
    assert is_error and "deadline passed" in text


def test_without_bubblewrap_a_command_is_refused_and_the_session_goes_on(
    sqlite_env: Env, places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    workspace, _ = places
    session_id = repair(sqlite_env, workspace, [command("touch ran"), command("touch again")])
    monkeypatch.setattr(runner, "_working", set())
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    head = sqlite_env.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    for text, is_error in observations(sqlite_env.load(session_id)).values():
        assert is_error and text.startswith("SandboxUnavailable: the command was not run")
        assert "apt-get install bubblewrap" in text and "TICKWORK_SANDBOX=none" in text
    assert head.result["tests"]["passed"] is False
    assert "apt-get install bubblewrap" in head.result["tests"]["error"]
    assert not (workspace / "ran").exists() and not (workspace / "again").exists()


def test_a_session_with_network_says_so_on_its_card_and_page(
    env: Env, places: tuple[Path, Path]
) -> None:
    workspace, _ = places
    session_id = repair(env, workspace, [command("rm a.txt")], network="all")
    head = env.run(session_id)
    assert head.status is Status.WAITING_APPROVAL
    card = webhooks.card(head, [], public_url="", at=head.updated_at, masker=Masker())
    assert card["session"]["network"] is True
    with render.console().capture() as captured:
        render.show(render.timeline(views.session(env.load(session_id))))
    assert "network" in captured.get() and "egress proxy" in captured.get()
    env.client.cancel(session_id)
