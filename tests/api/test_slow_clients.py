"""Issue 24: slow and greedy clients of `tickwork serve`, over raw sockets.

On main a client could trickle a request's headers or body for as long as it liked
(slowloris), each such connection holding a socket and a task, and open as many of them
as it liked. Here headers and bodies each have a deadline (408) and one address has a
bound on the connections it holds at once (429). The limits are set small so the cases
end in seconds; what is checked is that the server cut the client, not how fast.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import TOKEN, until
from tests.api.test_cli_serve import ENTRY, SERVE_START_S, _env
from tests.ports import free_port
from tests.tasks.conftest import ROOT

#: the longest a case trickles before it gives up on being cut (it is cut after ~1-2 s)
TRICKLE_S = 30.0
PER_IP = 3


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    port = free_port()
    tokens = json.dumps({TOKEN["sam"]: {"name": "sam", "roles": ["submitter"]}})
    env = _env(
        tmp_path_factory.mktemp("serve"),
        TICKWORK_API_TOKENS=tokens,
        TICKWORK_API_HEADER_TIMEOUT_S="1.5",
        TICKWORK_API_BODY_TIMEOUT_S="1.5",
        TICKWORK_API_MAX_CONNECTIONS_PER_IP=str(PER_IP),
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "serve", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        until(healthy, timeout=SERVE_START_S, what="tickwork serve")
        yield "127.0.0.1", port
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def _trickle(address: tuple[str, int], head: bytes, drip: bytes) -> tuple[bytes, float]:
    """Send `head`, then `drip` a byte every 0.2 s until the server answers or closes;
    (what it answered, seconds the trickle lasted)."""
    started = time.monotonic()
    with socket.create_connection(address, timeout=5) as conn:
        conn.sendall(head)
        conn.settimeout(0.2)
        received = b""
        for byte in (drip * 1000)[: int(TRICKLE_S / 0.2)]:
            try:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                received += chunk
            except TimeoutError:
                pass
            except ConnectionResetError:
                break
            try:
                conn.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
        conn.settimeout(2)
        with contextlib.suppress(OSError):
            while chunk := conn.recv(65536):
                received += chunk
    return received, time.monotonic() - started


def test_headers_sent_slowly_are_cut_with_a_408(served: tuple[str, int]) -> None:
    answered, lasted = _trickle(served, b"GET /healthz HTTP/1.1\r\n", b"X-Slow: aaaaaaaaaaaaa\r\n")
    assert answered.startswith(b"HTTP/1.1 408"), answered[:200]
    assert b"TICKWORK_API_HEADER_TIMEOUT_S" in answered
    assert lasted < TRICKLE_S


def test_a_connection_that_sends_nothing_is_closed(served: tuple[str, int]) -> None:
    with socket.create_connection(served, timeout=TRICKLE_S) as conn:
        answered = conn.recv(65536)  # blocks until the server writes or closes
    assert answered.startswith(b"HTTP/1.1 408"), answered[:200]


def test_a_body_sent_slowly_is_cut_with_a_408(served: tuple[str, int]) -> None:
    head = (
        "POST /api/v1/sessions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {TOKEN['sam']}\r\nContent-Length: 5000\r\n\r\n"
    ).encode()
    answered, lasted = _trickle(served, head, b'{"kind": "repair", "input": {}}')
    assert answered.startswith(b"HTTP/1.1 408"), answered[:300]
    assert b"TICKWORK_API_BODY_TIMEOUT_S" in answered
    assert lasted < TRICKLE_S


def test_one_address_holds_a_bounded_number_of_connections(served: tuple[str, int]) -> None:
    held = [socket.create_connection(served, timeout=5) for _ in range(PER_IP)]
    try:
        time.sleep(0.2)  # the server has taken them (they send nothing)
        with socket.create_connection(served, timeout=5) as extra:
            answered = extra.recv(65536)
        assert answered.startswith(b"HTTP/1.1 429"), answered[:200]
        assert b"TICKWORK_API_MAX_CONNECTIONS_PER_IP" in answered
    finally:
        for conn in held:
            conn.close()

    def served_again() -> bool:
        try:
            return (
                httpx.get(f"http://{served[0]}:{served[1]}/healthz", timeout=2).status_code == 200
            )
        except httpx.HTTPError:
            return False

    until(served_again, timeout=10, what="a connection once the others closed")
