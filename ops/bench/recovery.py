"""Benchmark 6: recovery time after a worker is killed with SIGKILL mid-tick.

Two `celery worker --pool solo` processes run with DEFAULT settings (lease_s, relay period
and threshold as in worker/config/settings.py). A session's second model call is slow (a local
chat-completions server holds its first request for 60 s); the worker holding the lease
(read from the session's lease owner) is killed `offset` seconds into that call. Figures:
from the kill to the model being asked again (the session runs again, on the survivor) and
to the session's next saved version. Offsets spread over one lease-renewal period
(lease_s / 3), since a renewal restarts the lease.

    python ops/bench/recovery.py [--offsets 0.5 5 9.5] [--lease-s SECONDS (not default)]
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--offsets", type=float, nargs="+", default=[0.5, 5.0, 9.5])
    parser.add_argument(
        "--lease-s",
        type=float,
        default=None,
        help="measure a proposed lease_s instead of the default",
    )
    args = parser.parse_args()
    extra = {} if args.lease_s is None else {"TICKWORK_LEASE_S": str(args.lease_s)}
    again, saved = [], []
    with common.database("recovery") as url:
        for offset in args.offsets:
            result = run(url, offset, extra)
            again.append(result["running_again"])
            saved.append(result["saved"])
            print(
                f"killed {result['killed_after']:.1f}s into the model call: running again "
                f"after {result['running_again']:.1f}s, next version saved after "
                f"{result['saved']:.1f}s",
                flush=True,
            )
    print(common.show("kill -> running again (s)", again, digits=1))
    print(common.show("kill -> next save (s)", saved, digits=1))
    common.emit(
        "recovery",
        {
            "lease_s": args.lease_s or "default",
            "running_again": common.stats(again),
            "saved": common.stats(saved),
        },
    )


if __name__ == "__main__":
    main()
