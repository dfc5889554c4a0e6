"""Benchmark: what egress adds to one sandboxed command (docs/DESIGN.md section 13).

The same trivial command (`true`) runs N times in the sandbox without egress (its own
network namespace, nothing else) and N times with it (a proxy on a unix socket started in
the worker and stopped after, and the forwarder started inside before the command), in
alternation so drift on a shared machine falls on both; then N fetches of a small page
from a server on loopback through the proxy. Prints medians and the on/off ratio.

    python ops/bench/egress.py [--runs 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tickwork.worker.config.allowlist import AllowList
from tickwork.worker.sandbox.egress import EgressPolicy
from tickwork.worker.sandbox.runner import Sandbox, check, run_sandboxed

from ops.bench import common


class Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_: Any) -> None:
        pass


def timed(command: str, workdir: Path, egress: EgressPolicy | None) -> float:
    started = time.perf_counter()
    result = run_sandboxed(command, workdir=workdir, timeout_s=60, egress=egress)
    elapsed = time.perf_counter() - started
    if result.exit_code != 0:
        raise SystemExit(f"{command!r} failed: {result.describe()}")
    return elapsed * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    why = check(Sandbox())
    if why is not None:
        raise SystemExit(f"the sandbox cannot run here: {why}")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    egress = EgressPolicy(AllowList.of(f"127.0.0.1:{port}"))
    fetch = f"python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:{port}/\")'"
    off: list[float] = []
    on: list[float] = []
    fetched: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tickwork-bench-egress-") as tmp:
        workdir = Path(tmp)
        timed("true", workdir, None)  # warm: the probe, the page cache
        timed("true", workdir, egress)
        for _ in range(args.runs):
            off.append(timed("true", workdir, None))
            on.append(timed("true", workdir, egress))
            fetched.append(timed(fetch, workdir, egress))
    server.shutdown()
    print(common.show("a command without egress", off, " ms"))
    print(common.show("the same command with egress", on, " ms"))
    print(common.show("a fetch through the proxy (python3 start included)", fetched, " ms"))
    ratio = common.stats(on)["median"] / common.stats(off)["median"]
    added = common.stats(on)["median"] - common.stats(off)["median"]
    print(f"egress on/off: {ratio:.2f}x the median, {added:.1f} ms more per command")
    common.emit(
        "egress",
        {
            "runs": args.runs,
            "off_ms": common.stats(off),
            "on_ms": common.stats(on),
            "fetch_ms": common.stats(fetched),
            "ratio": round(ratio, 3),
        },
    )


if __name__ == "__main__":
    main()
