"""The egress forwarder, run INSIDE the sandbox: `python3 -I -S forward.py PORT SOCKET CMD...`.

It listens on the sandbox's own loopback (127.0.0.1:PORT, where HTTP_PROXY points), then
starts CMD in its place and, detached from it, relays each connection to the worker's
egress proxy at the unix socket SOCKET (`egress.py`), which decides where it may go. It
runs with whatever python3 the sandbox has (the worker's venv is not there), so it uses the
standard library only and nothing of tickwork. It is no boundary: a command may talk to
SOCKET itself; the proxy is what checks.
"""

import contextlib
import os
import selectors
import socket
import sys

CHUNK = 65536
#: most bytes held for one direction of one connection before reading from it pauses
HELD = 1 << 20


class Pair:
    """A client connection and its way to the proxy, each with what waits to be written."""

    def __init__(self, client, upstream):
        self.ends = (client, upstream)
        self.pending = {client: bytearray(), upstream: bytearray()}
        self.done = set()


def _interest(selector, pair):
    for sock in pair.ends:
        other = pair.ends[1] if sock is pair.ends[0] else pair.ends[0]
        events = 0
        if sock not in pair.done and len(pair.pending[other]) < HELD:
            events |= selectors.EVENT_READ
        if pair.pending[sock]:
            events |= selectors.EVENT_WRITE
        try:
            selector.modify(sock, events, pair) if events else selector.unregister(sock)
        except KeyError:
            if events:
                selector.register(sock, events, pair)


def _close(selector, pair):
    for sock in pair.ends:
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(sock)
        sock.close()


def _step(selector, pair, sock, mask):
    other = pair.ends[1] if sock is pair.ends[0] else pair.ends[0]
    if mask & selectors.EVENT_READ:
        data = sock.recv(CHUNK)
        if data:
            pair.pending[other] += data
        else:
            pair.done.add(sock)
    if mask & selectors.EVENT_WRITE and pair.pending[sock]:
        sent = sock.send(pair.pending[sock])
        del pair.pending[sock][:sent]
    for end in pair.ends:  # a side that ended: pass the end on once its data is written
        peer = pair.ends[1] if end is pair.ends[0] else pair.ends[0]
        if end in pair.done and not pair.pending[peer]:
            with contextlib.suppress(OSError):
                peer.shutdown(socket.SHUT_WR)
    if len(pair.done) == 2 and not any(pair.pending.values()):
        _close(selector, pair)
    else:
        _interest(selector, pair)


def serve(listener, target):
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    while True:
        for key, mask in selector.select():
            if key.data is None:
                client, _ = listener.accept()
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    upstream.connect(target)
                except OSError:
                    client.sendall(
                        b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 34"
                        b"\r\n\r\ntickwork egress proxy unreachable\n"
                    )
                    client.close()
                    upstream.close()
                    continue
                client.setblocking(False)
                upstream.setblocking(False)
                pair = Pair(client, upstream)
                _interest(selector, pair)
                continue
            pair = key.data
            try:
                _step(selector, pair, key.fileobj, mask)
            except OSError:
                _close(selector, pair)


def main(argv):
    port, target, command = int(argv[1]), argv[2], argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
    except OSError as exc:
        sys.stderr.write(f"tickwork: the egress forwarder cannot listen on :{port}: {exc}\n")
        return 125
    child = os.fork()
    if child == 0:
        # twice, so the forwarder is the sandbox's init's child, not a stray child of CMD
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            try:
                serve(listener, target)
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)
    listener.close()
    os.execv(command[0], command)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
