"""Benchmark: fair admission across tenants (docs/DESIGN.md section 15).

Tenant A submits many sessions (2,000), then tenant B submits a few (10). Without
admission B's first ticks would wait behind all of A's in the broker's queue; with A's
in-flight limit sized to the fleet (TICKWORK_TENANTS_FILE: A `max_in_flight` = the
worker's concurrency, `--a-limit` to change it) they wait behind a handful. Prints:

- the p95 time from submit to first tick of B's sessions, busy (behind A) and on an idle
  fleet, and their ratio (target: at most 2);
- A's throughput (sessions/s) with B and without (ratio, target: at least 0.9).

Sessions are scripted (the fast fake model of the other benchmarks: no I/O) of 2 steps, 5
ticks each; one `celery worker` (prefork) on Redis and Postgres. Each round runs B idle,
then A alone and A with B, in alternating order from round to round, with a VACUUM
ANALYZE before each A run where the server's autovacuum is off (each run writes 10,000
ticks: without it the second run of a round is the slower for the first's dead rows).

    python ops/bench/fairness.py [--a 2000] [--b 10] [--steps 2] [--concurrency 2] [--quick]
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


def queued(tw: Any, ids: list[str]) -> int:
    """How many of `ids` wait as `queued`: one statement, so the count costs the fleet
    nothing measurable (a read per session would compete with the worker for the CPU)."""
    with tw.store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "select count(*) from tickwork_sessions "
                    "where id = any(:ids) and status = 'queued'"
                ),
                {"ids": ids},
            ).scalar_one()
        )


def one_round(
    tw: Any, model: str, args: argparse.Namespace, w: Any, *, url: str, b_first: bool
) -> dict[str, float]:
    """B on an idle fleet, then A alone and A with B behind it, in the order `b_first`
    says (rounds alternate it: whichever runs second finds more rows in the tables)."""
    wait = 3600 if not args.quick else 300
    tidy = common.autovacuum_off(url)

    def done(ids: dict[str, float], what: str, poll: float) -> None:
        # a poll of 2,000 ids every 20 ms would itself slow the fleet down: A's waits poll
        # twice a second (a session's end is timed by its own updated_at, not by the poll)
        common.until(
            lambda: finished(tw, list(ids)), timeout=wait, what=what, check=w.check, poll=poll
        )

    idle = submit_many(tw, model, "b", args.b)
    done(idle, "B idle", 0.02)
    figures: dict[str, float] = {"b_p95_idle": common.percentile(latencies(tw, idle), 95)}

    def alone() -> None:
        start = time.time()
        ids = submit_many(tw, model, "a", args.a)
        done(ids, "A alone", 0.5)
        figures["a_rate_alone"] = args.a / (last_update(tw, list(ids)) - start)

    def with_b() -> None:
        start = time.time()
        ids = submit_many(tw, model, "a", args.a)
        busy = submit_many(tw, model, "b", args.b)
        # A's sessions still queued once every B session has had its first tick (counted
        # after B's end instead, a fast fleet may have drained A by then)
        common.until(
            lambda: len(first_ticks(tw, list(busy))) == len(busy),
            timeout=wait,
            what="B's first ticks",
            check=w.check,
        )
        figures["a_queued_after_b"] = queued(tw, list(ids))
        done(busy, "B busy", 0.05)
        figures["b_p95_busy"] = common.percentile(latencies(tw, busy), 95)
        done(ids, "A with B", 0.5)
        figures["a_rate_with_b"] = args.a / (last_update(tw, list(ids)) - start)

    for part in (with_b, alone) if b_first else (alone, with_b):
        if tidy:  # as autovacuum would between the runs, outside their timing
            common.vacuum(url)
        part()
    figures["b_ratio"] = figures["b_p95_busy"] / figures["b_p95_idle"]
    figures["a_ratio"] = figures["a_rate_with_b"] / figures["a_rate_alone"]
    return figures


def run(args: argparse.Namespace, url: str, folder: Path) -> dict[str, Any]:
    tenants = folder / "tenants.json"
    limit = args.a_limit or args.concurrency
    tenants.write_text(json.dumps({"a": {"max_in_flight": limit}, "b": {"max_in_flight": 100}}))
    os.environ["TICKWORK_TENANTS_FILE"] = str(tenants)
    s = common.settings(url, "fair", relay_period_s=0.5)
    tw = common.client(s)
    model = kinds.write_script(folder, f"steps{args.steps}", kinds.replies(args.steps))
    env = common.worker_env(s, TICKWORK_TENANTS_FILE=str(tenants), TICKWORK_RELAY_PERIOD_S="0.5")
    rounds = []
    try:
        with common.worker(
            "tickwork.worker.tick.app", s.queue, env, concurrency=args.concurrency
        ) as w:
            warm = submit_many(tw, model, "b", 2 * args.concurrency)
            common.until(
                lambda: finished(tw, list(warm)), timeout=120, what="warm-up", check=w.check
            )
            for r in range(args.repeats):
                rounds.append(one_round(tw, model, args, w, url=url, b_first=r % 2 == 1))
                print(
                    f"round {r + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in rounds[-1].items()),
                    flush=True,
                )
    finally:
        tw.close()
    figures: dict[str, Any] = {
        "a_sessions": args.a,
        "b_sessions": args.b,
        "a_max_in_flight": limit,
        "repeats": args.repeats,
    }
    for key in rounds[0]:
        figures[key] = common.stats([r[key] for r in rounds])
    figures["load"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", type=int, default=2000, help="tenant A's sessions")
    parser.add_argument("--b", type=int, default=10, help="tenant B's sessions")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument(
        "--a-limit", type=int, default=0, help="A's max_in_flight [the concurrency]"
    )
    parser.add_argument("--repeats", type=int, default=2, help="rounds, each B idle, A, A + B")
    parser.add_argument("--steps", type=int, default=2, help="agent steps of every session")
    parser.add_argument(
        "--quick", action="store_true", help="60 of A's, 5 of B's, 8 steps each: a smoke run"
    )
    args = parser.parse_args()
    if args.quick:
        # sessions of 8 steps: 60 sessions of 2 could all end while the next are submitted on
        # a busy machine, and B would then find no A queued to overtake
        args.a, args.b, args.repeats, args.steps = 60, 5, 1, 8
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-fair-"))
    with common.database("fairness") as url:
        figures = run(args, url, folder)
    med = {k: v["median"] for k, v in figures.items() if isinstance(v, dict)}
    print(
        f"B's p95 submit-to-first-tick (medians of {args.repeats} rounds): idle "
        f"{med['b_p95_idle']:.3f}s, behind A {med['b_p95_busy']:.3f}s: ratio "
        f"{med['b_ratio']:.2f} (target <= 2)"
    )
    print(
        f"A's throughput: alone {med['a_rate_alone']:.1f} sessions/s, with B "
        f"{med['a_rate_with_b']:.1f}: ratio {med['a_ratio']:.3f} (target >= 0.9); "
        f"{med['a_queued_after_b']:.0f} of A's still queued after B's first ticks (A's limit "
        f"{figures['a_max_in_flight']}), load {figures['load']}"
    )
    common.emit("fairness", figures)


if __name__ == "__main__":
    main()
