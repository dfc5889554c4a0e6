"""The egress proxy: the only way a sandboxed command reaches the network
(docs/DESIGN.md section 13).

Every command has a network namespace of its own, with nothing but its loopback. One that
may use the network gets, for its run, an HTTP proxy in the worker listening on a unix
socket in a private directory bound into the sandbox; a forwarder inside (`forward.py`)
relays the sandbox's 127.0.0.1:3128, where HTTP_PROXY and HTTPS_PROXY point, to it.

The proxy serves plain HTTP (absolute-form requests, one per connection) and CONNECT
(TLS, end to end). It allows only hosts on the command's allow-list (`worker/config/allowlist.py`),
resolves each name itself, refuses it if any of its addresses is not public (unless the
operator listed that exact ip:port), and connects to the addresses it checked: no second
lookup. A refusal is a 403 with a one-line reason. Bounded: a connection timeout, an idle
timeout, and at most `max_connections` at once (past it: 503).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import selectors
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tickwork.worker.config.allowlist import AllowList, refusal, split_host_port

if TYPE_CHECKING:
    from tickwork.worker.config.settings import Settings

log = logging.getLogger("tickwork.egress")

#: where the proxy's directory is inside the sandbox, and the forwarder's port there
INSIDE = "/run/tickwork"
SOCKET = "proxy.sock"
PORT = 3128
FORWARDER = Path(__file__).with_name("forward.py")
#: a request's head (request line and headers) larger than this is refused
MAX_HEAD_BYTES = 64 * 1024
#: what `input.network` may say; "setup": only the environment's setup reaches the network
MODES = ("setup", "all", "none")
#: headers meant for the proxy, not passed on
_HOP = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")

Resolve = Callable[[str, int], Sequence[str]]


def resolve(host: str, port: int) -> list[str]:
    """The addresses of `host`, as the system resolves them (the proxy's default)."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


@dataclass(frozen=True)
class EgressPolicy:
    """Where one command may connect, and the proxy's bounds."""

    allow: AllowList
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0
    max_connections: int = 64
    #: how names are resolved (a test maps its own names)
    resolve: Resolve = field(default=resolve, compare=False)


def network_mode(config: Mapping[str, Any]) -> str:
    """A session's `network`: "setup" (the default), "all" or "none"; the booleans of
    sessions submitted before it had modes read as "all" and "none"."""
    value = config.get("network")
    if value is True:
        return "all"
    if value is False:
        return "none"
    return value if value in MODES else "setup"


def policy_for(
    config: Mapping[str, Any], settings: Settings, *, setup: bool = False
) -> EgressPolicy | None:
    """The egress of a command of a session (`setup`: of its environment's setup), or None
    for no network at all: the operator's allow-list narrowed by the session's
    `egress_allow`, when its `network` mode lets this command out and that list is not
    empty."""
    mode = network_mode(config)
    if mode == "none" or (mode == "setup" and not setup):
        return None
    allow = AllowList.of(settings.egress_allow)
    wanted = config.get("egress_allow")
    if wanted is not None:
        allow = allow.narrowed(wanted)
    if not allow:
        return None
    return EgressPolicy(
        allow=allow,
        connect_timeout_s=settings.egress_connect_timeout_s,
        idle_timeout_s=settings.egress_idle_timeout_s,
        max_connections=settings.egress_max_connections,
    )


#: where a session's network is explained; named in the form every message names a page
_NETWORK_DOC = "docs/REPAIR.md (`tickwork docs repair`)"


def offline_note(config: Mapping[str, Any], settings: Settings, *, setup: bool = False) -> str:
    """What a command of a session that `policy_for` gives no network is told where its
    output shows it looked for some: why, in the words of the session's own `network` and
    `egress_allow` (a session of a kind that sets none: that it asks for none), and what
    would give it some."""
    what = "this setup command" if setup else "this command"
    mode = network_mode(config)
    if "network" not in config:
        why = (
            "this session's job kind asks for no network, so the sandbox gives its commands "
            'none (a repair job gives them some with `"network": "all"` in its input)'
        )
    elif mode == "none":
        why = (
            'this session\'s input says `"network": "none"`: the sandbox gives none to its '
            'commands nor to its setup; a session submitted with `"network": "setup"` (the '
            'default) has it for its setup, with `"all"` for its commands too'
        )
    elif mode == "setup" and not setup:
        why = (
            'this session\'s input says `"network": "setup"` (the default): the sandbox gives '
            'its setup the network, not its commands; a session submitted with `"network": '
            '"all"` has it for its commands too'
        )
    elif not AllowList.of(settings.egress_allow):
        why = (
            "the workers allow no host (TICKWORK_EGRESS_ALLOW is empty): an operator lists "
            "there the hosts a session's commands may reach"
        )
    else:
        why = (
            "this session's `egress_allow` keeps none of the hosts the workers allow "
            "(TICKWORK_EGRESS_ALLOW)"
        )
    return f"{what} runs without network: {why}: {_NETWORK_DOC}"


def proxy_env() -> dict[str, str]:
    """The variables that send a command's HTTP(S) through the forwarder. NO_PROXY is empty:
    an operator may list a mirror on the worker's loopback (an exact ip:port), which only the
    proxy reaches; a client that bypassed it would find the sandbox's own loopback."""
    url = f"http://127.0.0.1:{PORT}"
    near = ""
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        "NO_PROXY": near,
        "no_proxy": near,
    }


#: the refusals a command's output is told of (each once)
MAX_REFUSALS = 10


class Refused(Exception):
    """A request the proxy answers with `status` and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class Proxy:
    """One command's egress proxy on a unix socket; `close` stops it and its connections."""

    def __init__(self, policy: EgressPolicy, path: Path, refused: list[str] | None = None) -> None:
        self.policy = policy
        self.path = path
        #: what it refused, and why (the first MAX_REFUSALS), for the command's own output
        self.refused = refused if refused is not None else []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(128)
        self._slots = threading.BoundedSemaphore(policy.max_connections)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="tickwork-egress", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self._listener.close()
        with self._lock:
            held = list(self._open)
        for sock in held:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                threading.Thread(target=_busy, args=(client,), daemon=True).start()
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _hold(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            self._hold(client)
            client.settimeout(self.policy.idle_timeout_s)
            try:
                head, rest = _read_head(client)
                method, host, port, forwarded = _request(head)
                upstream = self._connect(host, port, method)
            except Refused as exc:
                _answer(client, exc.status, str(exc))
                return
            except OSError:
                return
            self._hold(upstream)
            if method == b"CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.sendall(forwarded)
            if rest:
                upstream.sendall(rest)
            _relay(client, upstream, self.policy.idle_timeout_s)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(client)
                if upstream is not None:
                    self._open.discard(upstream)
            # the slot is free before the client sees its connection end: one that connects
            # again at once is served, not refused as one too many
            self._slots.release()
            for sock in (client, upstream):
                if sock is not None:
                    sock.close()

    def _connect(self, host: str, port: int, method: bytes) -> socket.socket:
        """A connection to `host:port` if the policy allows it; `Refused` says why not."""
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # IPv6 in brackets
        if not self.policy.allow.permits(host, port):
            log.info("egress refused %s: not on the allow-list", target)
            self._note(f"{target}: not on the allow-list (TICKWORK_EGRESS_ALLOW)")
            raise Refused(403, f"egress refused: {target} is not on this job's allow-list")
        try:
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in self._resolve(host, port)]
        except (OSError, UnicodeError, ValueError):
            raise Refused(502, f"egress: {host} does not resolve") from None
        if not addresses:
            raise Refused(502, f"egress: {host} does not resolve")
        for address in addresses:  # any address refused refuses the name: no lottery
            why = refusal(address, port, self.policy.allow)
            if why is not None:
                log.info("egress refused %s before connecting: %s", target, why)
                self._note(f"{target} before connecting: {why}")
                raise Refused(403, f"egress refused: {host} -> {why}")
        failed = ""
        for address in addresses:
            log.debug("egress connecting to %s (%s) for %s", address, target, method.decode())
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(self.policy.connect_timeout_s)
            try:
                sock.connect((str(address), port))
            except OSError as exc:
                sock.close()
                failed = str(exc)
                continue
            sock.settimeout(self.policy.idle_timeout_s)
            return sock
        raise Refused(502, f"egress: cannot connect to {target}: {failed}")

    def _note(self, refusal: str) -> None:
        with self._lock:
            if refusal not in self.refused and len(self.refused) < MAX_REFUSALS:
                self.refused.append(refusal)

    def _resolve(self, host: str, port: int) -> Sequence[str]:
        try:
            return [str(ipaddress.ip_address(host.strip("[]")))]  # a literal: no lookup
        except ValueError:
            return self.policy.resolve(host, port)


def _busy(client: socket.socket) -> None:
    """A 503 once the request is read (closing on an unread request would lose the answer)."""
    with client:
        client.settimeout(2.0)
        with contextlib.suppress(OSError, Refused):
            _read_head(client)
        _answer(client, 503, "too many connections through the egress proxy")


def _answer(client: socket.socket, status: int, reason: str) -> None:
    phrase = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Unavailable"}
    body = (" ".join(reason.split()) + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {phrase.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        client.sendall(head.encode() + body)


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """(the request's head up to its blank line, what came after it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise Refused(400, f"the request's head passes {MAX_HEAD_BYTES} bytes")
        chunk = client.recv(65536)
        if not chunk:
            raise OSError("the client closed before its request")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _request(head: bytes) -> tuple[bytes, str, int, bytes]:
    """(method, host, port, the head to send upstream) of a proxy request."""
    line, *headers = head.split(b"\r\n")
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise Refused(400, "not an HTTP/1.x proxy request")
    method, target, version = parts
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        raise Refused(400, "the request's target is not ASCII") from None
    if method == b"CONNECT":
        try:
            host, port = split_host_port(text)
        except ValueError as exc:
            raise Refused(400, f"CONNECT {text}: {exc}") from None
        if port is None:
            raise Refused(400, f"CONNECT {text}: give host:port")
        return method, host, port, b""
    if not text.startswith("http://"):
        raise Refused(400, f"{text[:100]}: give an absolute http:// URL (https goes by CONNECT)")
    rest = text[len("http://") :]
    cut = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
    authority, path = rest[:cut], rest[cut:].split("#")[0].lstrip("/")
    authority = authority.rpartition("@")[2]  # no credentials to the proxy
    try:
        host, port = split_host_port(authority, default=80)
    except ValueError as exc:
        raise Refused(400, f"{text[:100]}: {exc}") from None
    kept = [h for h in headers if h.split(b":", 1)[0].strip().lower() not in _HOP]
    upstream = [method + b" /" + path.encode() + b" " + version, *kept, b"Connection: close"]
    assert port is not None
    return method, host, port, b"\r\n".join(upstream) + b"\r\n\r\n"


def _relay(a: socket.socket, b: socket.socket, idle_s: float) -> None:
    """Copy both ways until both sides end, or nothing moves for `idle_s`."""
    with selectors.DefaultSelector() as selector:
        selector.register(a, selectors.EVENT_READ, b)
        selector.register(b, selectors.EVENT_READ, a)
        while selector.get_map():
            ready = selector.select(idle_s)
            if not ready:
                return
            for key, _ in ready:
                source, sink = key.fileobj, key.data
                assert isinstance(source, socket.socket)
                data = source.recv(65536)
                if data:
                    sink.sendall(data)
                    continue
                selector.unregister(source)
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def serving(
    policy: EgressPolicy,
    *,
    owner: tuple[int, int] | None = None,
    refused: list[str] | None = None,
) -> Iterator[Path]:
    """A proxy for one command; yields its directory (holding the socket and the
    forwarder), to bind into the sandbox at `INSIDE`. `owner`: the sandbox's user, when it
    is not the worker's; `refused` gets each connection it refused, and why."""
    place = Path(tempfile.mkdtemp(prefix="tickwork-egress-"))
    proxy = None
    try:
        shutil.copyfile(FORWARDER, place / FORWARDER.name)
        proxy = Proxy(policy, place / SOCKET, refused)
        if owner is not None:
            for path in (place, place / SOCKET, place / FORWARDER.name):
                os.chown(path, *owner)
        yield place
    finally:
        if proxy is not None:
            proxy.close()
        shutil.rmtree(place, ignore_errors=True)
