"""The egress proxy (worker/sandbox/egress.py) spoken to directly on its unix socket, as the
forwarder inside the sandbox does: what it sends on, what it refuses, its bounds."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tickwork.worker.config.allowlist import AllowList
from tickwork.worker.config.settings import Settings
from tickwork.worker.sandbox.egress import SOCKET, EgressPolicy, network_mode, policy_for, serving


@pytest.fixture
def upstream() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on loopback that keeps each request's head and answers "ok"."""
    server = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                heads.append(data)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1], heads
    finally:
        server.close()


def ask(place: Path, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(place / SOCKET))
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


def policy(allow: str, **kw: Any) -> EgressPolicy:
    return EgressPolicy(AllowList.of(allow), **kw)


def test_a_plain_request_goes_on_in_origin_form_without_proxy_headers(
    upstream: tuple[int, list[bytes]],
) -> None:
    port, heads = upstream
    with serving(policy(f"127.0.0.1:{port}")) as place:
        answer = ask(
            place,
            f"GET http://127.0.0.1:{port}/simple/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n"
            "Connection: keep-alive\r\n\r\n".encode(),
        )
    assert answer.endswith(b"\r\n\r\nok"), answer
    (head,) = heads
    lines = head.decode().split("\r\n")
    assert lines[0] == "GET /simple/x?y=1 HTTP/1.1"
    assert "Connection: close" in lines and "Host: 127.0.0.1" in lines
    assert not [line for line in lines if line.lower().startswith(("proxy-", "connection: k"))]
    assert not place.exists()  # the proxy's directory is gone with it


@pytest.mark.parametrize(
    ("request_", "status", "why"),
    [
        (b"GET https://pypi.org/ HTTP/1.1\r\n\r\n", b"400", b"https goes by CONNECT"),
        (b"CONNECT pypi.org HTTP/1.1\r\n\r\n", b"400", b"give host:port"),
        (b"hello\r\n\r\n", b"400", b"not an HTTP/1.x proxy request"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"400", b"absolute http:// URL"),
        (b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n", b"403", b"not on this job's allow-list"),
        (b"GET http://user:pw@evil.test/ HTTP/1.1\r\n\r\n", b"403", b"evil.test:80 is not on"),
        (b"CONNECT [::ffff:127.0.0.1]:5432 HTTP/1.1\r\n\r\n", b"403", b"loopback"),
    ],
)
def test_a_bad_or_unlisted_request_gets_one_line_saying_why(
    request_: bytes, status: bytes, why: bytes
) -> None:
    with serving(policy("pypi.org,[::ffff:127.0.0.1]")) as place:
        answer = ask(place, request_)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == status and why in body, answer
    assert body.count(b"\n") == 1


def test_each_refusal_is_told_once_with_why_for_the_command_s_output() -> None:
    refused: list[str] = []
    with serving(policy("pypi.org,[::ffff:127.0.0.1]"), refused=refused) as place:
        for _ in range(2):
            ask(place, b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
        ask(place, b"CONNECT [::ffff:127.0.0.1]:5432 HTTP/1.1\r\n\r\n")
    assert refused[0] == "evil.test:443: not on the allow-list (TICKWORK_EGRESS_ALLOW)"
    assert refused[1].startswith("[::ffff:127.0.0.1]:5432 before connecting: ")
    assert "is a loopback address" in refused[1] and "TICKWORK_EGRESS_ALLOW" in refused[1]
    assert len(refused) == 2


def test_connections_past_the_bound_are_refused_and_an_idle_one_is_closed(
    upstream: tuple[int, list[bytes]],
) -> None:
    port, _ = upstream
    with serving(policy(f"127.0.0.1:{port}", max_connections=2, idle_timeout_s=0.5)) as place:
        held = []
        for _ in range(2):  # two open connections that send nothing yet
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(str(place / SOCKET))
            held.append(conn)
        third = ask(place, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode())
        assert third.startswith(b"HTTP/1.1 503") and b"too many connections" in third
        for conn in held:  # idle past the timeout: the proxy closes them
            conn.settimeout(30)
            assert conn.recv(1) == b""
            conn.close()
        again = ask(place, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode())
        assert again.endswith(b"ok"), again


@pytest.mark.parametrize(
    ("config", "setup", "given"),
    [
        ({}, False, None),
        ({}, True, ("pypi.org",)),
        ({"network": "setup"}, False, None),
        ({"network": "all"}, False, ("pypi.org",)),
        ({"network": True}, False, ("pypi.org",)),
        ({"network": "none"}, True, None),
        ({"network": False}, True, None),
        ({"network": "all", "egress_allow": ["pypi.org:443"]}, False, ("pypi.org:443",)),
        ({"network": "all", "egress_allow": ["gone.example"]}, False, None),
    ],
)
def test_who_gets_egress(config: dict[str, Any], setup: bool, given: tuple[str] | None) -> None:
    got = policy_for(config, Settings(egress_allow="pypi.org"), setup=setup)
    assert (None if got is None else tuple(str(p) for p in got.allow.patterns)) == given
    assert policy_for({"network": "all"}, Settings(), setup=True) is None  # empty list: none
    assert network_mode({"network": "bogus"}) == "setup"
