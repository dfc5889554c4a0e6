"""Benchmark: fair admission across tenants (docs/DESIGN.md section 15).

Tenant A submits many sessions (2,000), then tenant B submits a few (10). Without
admission B's first ticks would wait behind all of A's in the broker's queue; with A's
in-flight limit sized to the fleet (TICKWORK_TENANTS_FILE: A `max_in_flight` = 2 x the
worker's concurrency) they wait behind a handful. Prints:

- the p95 time from submit to first tick of B's sessions, busy (behind A) and on an idle
  fleet, and their ratio (target: at most 2);
- A's throughput (sessions/s) with B and without (ratio, target: at least 0.9).

Sessions are scripted (the fast fake model of the other benchmarks: no I/O) of 2 steps, 5
ticks each; one `celery worker` (prefork) on Redis and Postgres.

    python ops/bench/fairness.py [--a 2000] [--b 10] [--concurrency 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import text

from ops.bench import common, kinds

#: what counts as a session's first tick: the first event its first tick writes
FIRST_TICK = "kind NOT IN ('created', 'admitted', 'cancel_requested')"


def submit_many(tw: Any, model: str, tenant: str, n: int) -> dict[str, float]:
    """Submit `n` sessions of `tenant`; session id -> the time its submit began."""
    from ops.bench.kinds import BUDGETS, KIND

    started: dict[str, float] = {}
    for _ in range(n):
        at = time.time()
        head = tw.submit(KIND, {}, model=model, budgets=BUDGETS, tenant=tenant)
        started[head.id] = at
    return started


def first_ticks(tw: Any, ids: list[str]) -> dict[str, float]:
    with tw.store.engine.connect() as conn:
        rows = conn.execute(
            text(
                f"select session_id, extract(epoch from min(at)) from tickwork_events "
                f"where session_id = any(:ids) and {FIRST_TICK} group by session_id"
            ),
            {"ids": ids},
        ).all()
    return {r[0]: float(r[1]) for r in rows}


def finished(tw: Any, ids: list[str]) -> bool:
    with tw.store.engine.connect() as conn:
        done, bad = conn.execute(
            text(
                "select count(*) filter (where status = 'completed'), "
                "count(*) filter (where status in ('failed', 'cancelled')) "
                "from tickwork_sessions where id = any(:ids)"
            ),
            {"ids": ids},
        ).one()
    if bad:
        raise RuntimeError(f"{bad} benchmark sessions did not complete")
    return bool(done == len(ids))


def last_update(tw: Any, ids: list[str]) -> float:
    with tw.store.engine.connect() as conn:
        return float(
            conn.execute(
                text(
                    "select extract(epoch from max(updated_at)) from tickwork_sessions "
                    "where id = any(:ids)"
                ),
                {"ids": ids},
            ).scalar_one()
        )


def latencies(tw: Any, submitted: dict[str, float]) -> list[float]:
    ticked = first_ticks(tw, list(submitted))
    return [ticked[i] - at for i, at in submitted.items()]


def run(args: argparse.Namespace, url: str, folder: Path) -> dict[str, Any]:
    tenants = folder / "tenants.json"
    limit = 2 * args.concurrency
    tenants.write_text(json.dumps({"a": {"max_in_flight": limit}, "b": {"max_in_flight": 100}}))
    os.environ["TICKWORK_TENANTS_FILE"] = str(tenants)
    s = common.settings(url, "fair", relay_period_s=0.5)
    tw = common.client(s)
    model = kinds.write_script(folder, "steps2", kinds.replies(2))
    env = common.worker_env(s, TICKWORK_TENANTS_FILE=str(tenants), TICKWORK_RELAY_PERIOD_S="0.5")
    wait = 3600 if not args.quick else 300
    try:
        with common.worker(
            "tickwork.worker.tick.app", s.queue, env, concurrency=args.concurrency
        ) as w:
            warm = submit_many(tw, model, "b", 2 * args.concurrency)
            common.until(
                lambda: finished(tw, list(warm)), timeout=120, what="warm-up", check=w.check
            )

            idle = submit_many(tw, model, "b", args.b)
            common.until(
                lambda: finished(tw, list(idle)), timeout=wait, what="B idle", check=w.check
            )
            idle_lat = latencies(tw, idle)

            start = time.time()
            alone = submit_many(tw, model, "a", args.a)
            common.until(
                lambda: finished(tw, list(alone)), timeout=wait, what="A alone", check=w.check
            )
            alone_rate = args.a / (last_update(tw, list(alone)) - start)

            start = time.time()
            shared = submit_many(tw, model, "a", args.a)
            busy = submit_many(tw, model, "b", args.b)
            queued_a = sum(1 for i in shared if tw.get(i).status.value == "queued")
            common.until(
                lambda: finished(tw, list(busy)), timeout=wait, what="B busy", check=w.check
            )
            busy_lat = latencies(tw, busy)
            common.until(
                lambda: finished(tw, list(shared)), timeout=wait, what="A with B", check=w.check
            )
            shared_rate = args.a / (last_update(tw, list(shared)) - start)
    finally:
        tw.close()
    idle_p95 = common.percentile(idle_lat, 95)
    busy_p95 = common.percentile(busy_lat, 95)
    return {
        "a_sessions": args.a,
        "b_sessions": args.b,
        "a_max_in_flight": limit,
        "a_still_queued_when_b_submitted": queued_a,
        "b_p95_first_tick_idle_s": round(idle_p95, 4),
        "b_p95_first_tick_busy_s": round(busy_p95, 4),
        "b_ratio_busy_over_idle": round(busy_p95 / idle_p95, 3),
        "a_rate_alone": round(alone_rate, 2),
        "a_rate_with_b": round(shared_rate, 2),
        "a_ratio_with_over_alone": round(shared_rate / alone_rate, 3),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", type=int, default=2000, help="tenant A's sessions")
    parser.add_argument("--b", type=int, default=10, help="tenant B's sessions")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="60 of A's, 5 of B's: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.a, args.b = 60, 5
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-fair-"))
    with common.database("fairness") as url:
        figures = run(args, url, folder)
    print(
        f"B's p95 submit-to-first-tick: idle {figures['b_p95_first_tick_idle_s']:.3f}s, "
        f"behind A {figures['b_p95_first_tick_busy_s']:.3f}s: ratio "
        f"{figures['b_ratio_busy_over_idle']:.2f} (target <= 2)"
    )
    print(
        f"A's throughput: alone {figures['a_rate_alone']:.1f} sessions/s, with B "
        f"{figures['a_rate_with_b']:.1f}: ratio {figures['a_ratio_with_over_alone']:.3f} "
        f"(target >= 0.9); {figures['a_still_queued_when_b_submitted']} of A's were queued "
        f"when B submitted (A's limit {figures['a_max_in_flight']}), load {figures['load']}"
    )
    common.emit("fairness", figures)


if __name__ == "__main__":
    main()
