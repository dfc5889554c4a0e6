"""Benchmark 6: recovery time after a worker is killed with SIGKILL mid-tick.

Two `celery worker --pool solo` processes run with DEFAULT settings (lease_s, relay period,
the liveness period and grace as in worker/config/settings.py) on Postgres + Redis. A
session's second model call is slow (a local chat-completions server holds its first
request for 60 s); the worker holding the lease (read from the session's lease owner) is
killed `offset` seconds into that call. Figures, p50 and p95 over the kills: from the kill
to the model being asked again (the session's next tick runs, on the survivor: the worker's
sign of life is gone and the survivor's relay takes the session over; docs/DESIGN.md
section 3) and to the session's next saved version. The kills spread over one
lease-renewal period (lease_s / 3): with the lease alone, a renewal restarts the wait.

    python ops/bench/recovery.py [--kills 10] [--offsets S ...] [--lease-s S] [--no-liveness]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops.bench import common

SLOW = 1  #: the reply whose first request hangs


def reply(index: int) -> dict[str, Any]:
    if index >= 3:
        return {"content": "done"}
    return {"content": f"step {index}", "tool_calls": [{"name": "noop", "arguments": {"i": index}}]}


def run(url: str, offset: float, extra: dict[str, str]) -> dict[str, float]:
    s = common.settings(url, "recovery")
    fake = common.FakeChat(
        reply, delay=lambda index, attempt: 60.0 if (index, attempt) == (SLOW, 1) else 0.0
    )
    with fake.serve():
        env = common.worker_env(s, OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="", **extra)
        tw = common.client(s)
        try:
            with (
                common.worker(
                    "tickwork.worker.tick.app", s.queue, env, pool="solo", loglevel="INFO"
                ) as a,
                common.worker(
                    "tickwork.worker.tick.app", s.queue, env, pool="solo", loglevel="INFO"
                ) as b,
            ):
                a.wait_ready()
                b.wait_ready()
                session_id = common.submit(tw, "openai:fake")
                common.until(lambda: fake.arrivals.get(SLOW), timeout=60, what="the slow call")
                time.sleep(max(0.0, fake.arrivals[SLOW][0] + offset - time.time()))
                head = tw.get(session_id)
                with tw.store.engine.connect() as conn:
                    owner = conn.exec_driver_sql(
                        "select lease_owner from tickwork_sessions where id = %(id)s",
                        {"id": session_id},
                    ).scalar_one()
                pid = int(owner.split(":")[1])
                victim, survivor = (a, b) if pid == a.proc.pid else (b, a)
                assert pid == victim.proc.pid, (owner, a.proc.pid, b.proc.pid)
                killed = victim.kill()
                common.until(
                    lambda: len(fake.arrivals[SLOW]) > 1,
                    timeout=120,
                    poll=0.01,
                    what="the session to run again",
                    check=survivor.check,
                )
                asked = fake.arrivals[SLOW][1]
                common.until(
                    lambda: tw.get(session_id).version > head.version,
                    timeout=60,
                    poll=0.01,
                    what="the next save",
                    check=survivor.check,
                )
                saved = time.time()
                done = tw.wait(session_id, timeout=60)
                assert done.status.value == "completed", done.status
        finally:
            tw.close()
    return {
        "running_again": asked - killed,
        "saved": saved - killed,
        "killed_after": killed - fake.arrivals[SLOW][0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="how many kills (default 10)")
    parser.add_argument(
        "--offsets", type=float, nargs="+", default=None, help="the kills' offsets instead"
    )
    parser.add_argument(
        "--lease-s",
        type=float,
        default=None,
        help="measure a proposed lease_s instead of the default",
    )
    parser.add_argument(
        "--no-liveness",
        action="store_true",
        help="workers without signs of life (TICKWORK_LIVENESS=false): the lease alone",
    )
    args = parser.parse_args()
    extra = {} if args.lease_s is None else {"TICKWORK_LEASE_S": str(args.lease_s)}
    if args.no_liveness:
        extra["TICKWORK_LIVENESS"] = "false"
    renewal = (args.lease_s or common.settings("", "recovery").lease_s) / 3
    offsets = args.offsets or [0.5 + renewal * i / args.kills for i in range(args.kills)]
    again, saved = [], []
    with common.database("recovery") as url:
        for offset in offsets:
            result = run(url, offset, extra)
            again.append(result["running_again"])
            saved.append(result["saved"])
            print(
                f"killed {result['killed_after']:.1f}s into the model call: running again "
                f"after {result['running_again']:.2f}s, next version saved after "
                f"{result['saved']:.2f}s",
                flush=True,
            )
    for name, values in (("kill -> running again (s)", again), ("kill -> next save (s)", saved)):
        print(
            f"{name}: p50 {common.percentile(values, 50):.2f} p95 "
            f"{common.percentile(values, 95):.2f} (min {min(values):.2f}, max {max(values):.2f}, "
            f"n={len(values)})",
            flush=True,
        )
    common.emit(
        "recovery",
        {
            "lease_s": args.lease_s or "default",
            "liveness": not args.no_liveness,
            "running_again": {
                **common.stats(again),
                "p50": common.percentile(again, 50),
                "p95": common.percentile(again, 95),
            },
            "saved": {
                **common.stats(saved),
                "p50": common.percentile(saved, 50),
                "p95": common.percentile(saved, 95),
            },
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        },
    )


if __name__ == "__main__":
    main()
