"""Benchmark 4: approval to action, on Redis.

Sessions whose first step calls a tool that needs approval wait for a person; each is
approved in turn (`Tickwork.approve`: the decision is committed and its tick published)
while one `celery worker` (prefork, concurrency 2, default settings) is idle. The figure is
the `tool_started` event's time minus the decision's time, both stored by tickwork.

    python ops/bench/approval_latency.py [--approvals 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import text

from ops.bench import common, kinds

LATENCY = text("""
select extract(epoch from e.at - d.at) * 1000
from tickwork_decisions d
join tickwork_events e on e.session_id = d.session_id and e.kind = 'tool_started'
where d.session_id = any(:ids)
""")


def count(tw: object, ids: list[str], status: str) -> int:
    with tw.store.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(
            conn.execute(
                text(
                    "select count(*) from tickwork_sessions where id = any(:ids)"
                    " and status = :status"
                ),
                {"ids": ids, "status": status},
            ).scalar_one()
        )


def run(url: str, approvals: int, folder: Path) -> list[float]:
    s = common.settings(url, "approve")
    tw = common.client(s)
    model = kinds.write_script(folder, "gated", kinds.replies(1, tool_name="gated"))
    try:
        with common.worker(
            "tickwork.worker.tick.app", s.queue, common.worker_env(s), concurrency=2
        ) as w:
            ids = [common.submit(tw, model) for _ in range(approvals)]
            common.until(
                lambda: count(tw, ids, "waiting_approval") == len(ids),
                timeout=300,
                poll=0.2,
                what="sessions waiting for approval",
                check=w.check,
            )
            for session_id in ids:
                tw.approve(session_id, "s1c0", approver="bench")
                common.until(
                    lambda sid=session_id: count(tw, [sid], "completed"),
                    timeout=30,
                    poll=0.005,
                    what=f"session {session_id} to finish",
                    check=w.check,
                )
        with tw.store.engine.connect() as conn:
            return [float(r[0]) for r in conn.execute(LATENCY, {"ids": ids})]
    finally:
        tw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--approvals", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-"))
    p50s, p99s, every = [], [], []
    with common.database("approve") as url:
        for rep in range(args.repeats):
            latencies = run(url, args.approvals, folder)
            assert len(latencies) == args.approvals, len(latencies)
            p50, p99 = common.percentile(latencies, 50), common.percentile(latencies, 99)
            p50s.append(p50)
            p99s.append(p99)
            every.extend(latencies)
            print(
                f"run {rep + 1}: {len(latencies)} approvals, p50 {p50:.1f} ms, "
                f"p99 {p99:.1f} ms, max {max(latencies):.1f} ms",
                flush=True,
            )
    print(common.show("p50 ms", p50s, digits=1))
    print(common.show("p99 ms", p99s, digits=1))
    print(
        f"all runs pooled: p50 {common.percentile(every, 50):.1f} ms, "
        f"p99 {common.percentile(every, 99):.1f} ms"
    )
    common.emit(
        "approval_latency",
        {
            "p50": common.stats(p50s),
            "p99": common.stats(p99s),
            "pooled_p50": common.percentile(every, 50),
            "pooled_p99": common.percentile(every, 99),
        },
    )


if __name__ == "__main__":
    main()
