"""A TCP proxy on loopback that can stop forwarding and resume: a network partition.

    with Proxy("127.0.0.1", 5432) as proxy:       # listens on 127.0.0.1:proxy.port
        url = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/db"
        proxy.blackhole()   # bytes stop flowing both ways; every connection stays open
        proxy.resume()      # what was held back flows on, in order

A blackhole is what a partition looks like to both ends: nothing arrives, nothing is
refused, no connection is closed, so a client blocks (or times out by its own clock)
instead of seeing an error at once. Bytes sent meanwhile are held (in the proxy and in
the kernels' buffers) and delivered on `resume()`, as TCP retransmits them when a real
partition heals. New connections made during a blackhole are accepted and held too.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit


class Proxy:
    """Forwards every connection made to `127.0.0.1:port` to `(host, target_port)`."""

    def __init__(self, host: str, target_port: int) -> None:
        self.target = (host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        #: connections accepted so far
        self.accepted = 0
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._acceptor.start()

    def url_for(self, url: str) -> str:
        """`url` (a database or broker URL naming the target's port) through this proxy."""
        parts = urlsplit(url)
        if parts.port != self.target[1]:
            raise ValueError(f"{parts.hostname}:{parts.port} is not the target {self.target}")
        user, at, _ = parts.netloc.rpartition("@")
        return urlunsplit(parts._replace(netloc=f"{user}{at}127.0.0.1:{self.port}"))

    @property
    def forwarding(self) -> bool:
        return self._flowing.is_set()

    def blackhole(self) -> None:
        """Stop forwarding, both ways, on every connection (new ones included)."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again, starting with what was held back."""
        self._flowing.set()

    def close(self) -> None:
        """Close the listener and every connection (the partition ends in resets)."""
        self._closed.set()
        self._flowing.set()  # wake the pumps so they see the close
        with suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with suppress(OSError):
                    sock.close()
            self._sockets.clear()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self.accepted += 1
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy `source` to `sink`; during a blackhole, hold what was read (and stop
        reading, so the sender's kernel buffers fill as on a dead link)."""
        try:
            while True:
                self._flowing.wait()
                data = source.recv(65536)
                if not data or self._closed.is_set():
                    break
                self._flowing.wait()
                if self._closed.is_set():
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            # one side ended: end the other as the target or client would see it
            for sock in (source, sink):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
