"""Egress and hardening of the command sandbox (issues 22 and 24): a command reaches the
network only through the worker's egress proxy, which allows the listed hosts alone and
never the host's own services; no nested user namespaces; /proc and the environment say
nothing of the worker."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tickwork.worker.config.allowlist import AllowList
from tickwork.worker.sandbox.egress import EgressPolicy, resolve
from tickwork.worker.sandbox.runner import PATH, Sandbox, check

from tests.security.test_sandbox_runner import CONNECT, ROOT, gone, pytestmark, run  # noqa: F401

BODY = "hello from the index"

#: a client that asks the proxy (HTTP_PROXY) to CONNECT to each argument, and prints the
#: first line and the reason of its answer; through a tunnel that opens, it GETs /simple/
ASK = """python3 -c '
import os, socket, sys
proxy = os.environ["HTTPS_PROXY"].rsplit(":", 1)
for target in sys.argv[1:]:
    s = socket.create_connection((proxy[0][7:], int(proxy[1])), 10)
    s.sendall(b"CONNECT " + target.encode() + b" HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    answer = s.recv(65536)
    if answer.startswith(b"HTTP/1.1 200"):
        s.sendall(b"GET /simple/ HTTP/1.0\\r\\n\\r\\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\\r\\n\\r\\n")
    print(target, head.split(b"\\r\\n")[0].decode(), "|", body.decode().strip())
' """


class Index(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = f"{BODY} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def index() -> Iterator[int]:
    """A package index on the host's loopback: its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    place = tmp_path / "workspace"
    place.mkdir()
    return place


def policy(allow: str, **kw: Any) -> EgressPolicy:
    return EgressPolicy(AllowList.of(allow), **kw)


def answers(stdout: str) -> dict[str, str]:
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in stdout.splitlines()}


def test_an_allowed_server_is_reached_through_the_proxy(
    workspace: Path, index: int, caplog: pytest.LogCaptureFixture
) -> None:
    allow = policy(f"127.0.0.1:{index}")
    plain = (
        "python3 -c 'import urllib.request, sys; "
        "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "
    )
    with caplog.at_level(logging.DEBUG, logger="tickwork.egress"):
        result = run(workspace, f"{plain} http://127.0.0.1:{index}/simple/pkg/", egress=allow)
    assert any(
        f"connecting to 127.0.0.1 (127.0.0.1:{index})" in r.getMessage() for r in caplog.records
    )
    assert result.stdout.strip() == f"{BODY} /simple/pkg/", result.describe()
    assert gone("/run/tickwork/forward.py")  # the forwarder ends with its command
    tunnel = run(workspace, ASK + f"127.0.0.1:{index}", egress=allow)
    assert answers(tunnel.stdout)[f"127.0.0.1:{index}"].endswith(f"{BODY} /simple/"), (
        tunnel.describe()
    )


def test_the_hosts_services_and_inner_addresses_are_refused(
    workspace: Path, index: int, caplog: pytest.LogCaptureFixture
) -> None:
    # every host below is on the list: the addresses are what the proxy refuses
    allow = policy("127.0.0.1,localhost,10.0.0.1,169.254.169.254,index.internal,[::1]")
    internal = policy(
        "127.0.0.1,localhost,10.0.0.1,169.254.169.254,index.internal,[::1]",
        resolve=lambda host, port: (
            ["127.0.0.1"] if host == "index.internal" else resolve(host, port)
        ),
    )
    targets = [
        "127.0.0.1:5432",
        "127.0.0.1:6379",
        "127.0.0.1:5672",
        f"127.0.0.1:{index}",  # listed as a host, not as this exact ip:port
        f"localhost:{index}",
        "[::1]:5432",
        "10.0.0.1:80",
        "169.254.169.254:80",
        "index.internal:443",
        "pypi.org:443",  # not on the list at all
    ]
    with caplog.at_level(logging.DEBUG, logger="tickwork.egress"):
        result = run(workspace, ASK + " ".join(targets), egress=internal)
    said = answers(result.stdout)
    assert sorted(said) == sorted(targets), result.describe()
    for target, answer in said.items():
        assert answer.startswith("HTTP/1.1 403 Forbidden |"), (target, answer)
    assert "loopback" in said["127.0.0.1:5432"] and "loopback" in said[f"localhost:{index}"]
    assert "private address" in said["10.0.0.1:80"]
    assert "cloud metadata" in said["169.254.169.254:80"]
    assert "index.internal -> 127.0.0.1:443 is a loopback" in said["index.internal:443"]
    assert "not on this job's allow-list" in said["pypi.org:443"]
    # refused before any connection was tried: nothing was ever sent to those addresses
    logged = [r.getMessage() for r in caplog.records if r.name == "tickwork.egress"]
    assert not [line for line in logged if "connecting to" in line], logged
    assert any("refused 10.0.0.1:80 before connecting" in line for line in logged)
    # the command's own output says what was refused and why, whatever its tool printed
    # (pip says only "Tunnel connection failed: 403"): the setup log and the card show it
    told = result.describe().split("--- refused by the sandbox ---\n", 1)[1].splitlines()
    assert "egress refused pypi.org:443: not on the allow-list (TICKWORK_EGRESS_ALLOW)" in told
    assert any(line.startswith("egress refused 10.0.0.1:80 before connecting: ") for line in told)
    plain = run(
        workspace,
        'python3 -c \'import urllib.request as u\ntry: u.urlopen("http://10.0.0.1/", timeout=5)\n'
        "except Exception as e: print(e.code, e.read().decode().strip())'",
        egress=allow,
    )
    assert plain.stdout.startswith("403 egress refused: 10.0.0.1 -> 10.0.0.1:80 is a private")


def test_with_egress_the_hosts_loopback_is_still_not_there(workspace: Path, index: int) -> None:
    result = run(
        workspace, CONNECT + f"5432 6379 5672 {index}", egress=policy(f"127.0.0.1:{index}")
    )
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [
        ["5432", "refused"],
        ["6379", "refused"],
        ["5672", "refused"],
        [str(index), "refused"],  # the sandbox's own loopback: only the proxy reaches the host
    ], result.describe()


def test_without_egress_there_is_no_proxy_and_no_network(workspace: Path, index: int) -> None:
    result = run(workspace, "env; " + CONNECT + "3128")
    assert "PROXY" not in result.stdout.upper().replace("3128", "")
    assert "3128 refused" in result.stdout
    assert not Path(workspace, "..", "proxy.sock").exists()


def test_the_environment_inside_is_tickworks_alone(
    workspace: Path, index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_DATABASE_URL", "postgresql://u:hunter2@db/x")
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", "secret.internal")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)
    monkeypatch.setenv("PATH", f"{sys.prefix}/bin:{os.environ['PATH']}")
    result = run(
        workspace, "env", env={"TICKWORK_SESSION_ID": "s1"}, egress=policy(f"127.0.0.1:{index}")
    )
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    proxy = {f"{n}_{p}" for n in ("HTTP", "HTTPS", "NO") for p in ("PROXY",)}
    proxy |= {v.lower() for v in proxy}
    expected = {"PATH", "LANG", "HOME", "TMPDIR", "PWD", "USER", "LOGNAME", "TICKWORK_SESSION_ID"}
    assert set(seen) - {"SHLVL", "OLDPWD", "_"} == expected | proxy, result.describe()
    assert seen["PATH"] == PATH == "/env/bin:/usr/local/bin:/usr/bin:/bin"
    assert "hunter2" not in result.stdout and sys.prefix not in result.stdout


def test_the_workers_venv_is_not_in_the_sandbox(workspace: Path) -> None:
    result = run(workspace, f"ls {sys.prefix}; python3 -c 'import tickwork'")
    assert result.exit_code != 0
    assert "No such file" in result.stderr and "No module named 'tickwork'" in result.stderr


def test_nested_user_namespaces_are_refused(workspace: Path, index: int) -> None:
    for egress in (None, policy(f"127.0.0.1:{index}")):
        result = run(workspace, "unshare -Urm true; echo exit=$?", egress=egress)
        assert "exit=1" in result.stdout and "Operation not permitted" in result.stderr, (
            result.describe()
        )
    # nor through clone3 (refused with ENOSYS, as the C library expects) or unshare(2)
    called = run(
        workspace,
        "python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
        "print(libc.unshare(0x10000000), ctypes.get_errno())'",
    )
    assert called.stdout.split() == ["-1", "1"], called.describe()


def test_proc_shows_no_host_path(workspace: Path, index: int) -> None:
    result = run(
        workspace,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
        egress=policy(f"127.0.0.1:{index}"),
    )
    assert result.exit_code == 0, result.describe()
    first = result.stdout.splitlines()[0]
    assert first.split()[1:3] == ["--args", first.split()[2]] and "bwrap" in first, first
    for host in (str(workspace), str(workspace.parent), sys.prefix, str(ROOT), "/tmp/"):
        assert host not in result.stdout, (host, result.stdout)


def copy_rootfs(target: Path, programs: tuple[str, ...]) -> None:
    """A small root filesystem: `programs` and the libraries they load, from the host."""
    libs: set[str] = set()
    for program in programs:
        shown = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
        libs |= {p for line in shown.splitlines() for p in line.split() if p.startswith("/")}
    for path in (*programs, *libs):
        dest = target / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(path), dest)


def test_a_root_filesystem_replaces_the_hosts_system(workspace: Path, tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    shell = os.path.realpath("/bin/sh")
    copy_rootfs(rootfs, (shell, "/usr/bin/cat", "/usr/bin/setpriv", "/usr/bin/id"))
    if shell != str(rootfs / "bin/sh"):
        (rootfs / "bin").mkdir(exist_ok=True)
        os.link(rootfs / shell.lstrip("/"), rootfs / "bin" / "sh")
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "timezone").write_text("Rootfs/Marker\n")
    sandbox = Sandbox(rootfs=str(rootfs))
    assert check(sandbox) is None
    result = run(workspace, "cat /etc/timezone; id -u; python3 -V", sandbox=sandbox)
    assert result.stdout.splitlines()[0] == "Rootfs/Marker", result.describe()
    assert "python3: not found" in result.stderr  # the host's /usr is not there


@pytest.mark.parametrize(
    ("layout", "error"),
    [(None, "is not a directory"), ("etc", "has no /bin/sh")],
)
def test_a_bad_root_filesystem_is_refused_with_what_to_do(
    tmp_path: Path, layout: str | None, error: str
) -> None:
    rootfs = tmp_path / "rootfs"
    if layout is not None:
        (rootfs / layout).mkdir(parents=True)
    why = check(Sandbox(rootfs=str(rootfs)))
    assert why is not None and error in why and "TICKWORK_SANDBOX_ROOTFS" in why
