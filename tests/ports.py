"""Loopback ports for the servers the tests start as processes, and for nothing at all."""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: the lowest port taken here: above the services' (Postgres 5432, Redis 6379, ...)
LOWEST = 10000


def free_port() -> int:
    """A loopback port nothing listens on now, below the kernel's ephemeral range.

    A port that bind(0) handed out and gave back is soon handed to another bind(0): under
    pytest-xdist the other workers start servers (model stubs, webhook receivers, the API)
    all the time, and a `tickwork serve` or worker started on it takes seconds (a minute
    on a loaded machine) before it binds. Below the range no bind(0) or connect() takes
    one, so only another caller of this picks among them, at random."""
    try:
        start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        start = 0
    draw = random.SystemRandom()  # not `random`: a seeded one draws alike in every worker
    for _ in range(100 if start > LOWEST + 1000 else 0):
        port = draw.randrange(LOWEST, start)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:  # no room below the range: the kernel's choice
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
