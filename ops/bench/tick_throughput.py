"""Benchmark 1: the tick against the physical limit.

Baseline: a bare Celery task that re-enqueues itself and does one Postgres transaction per
hop (ops/bench/baseline_app.py). tickwork: sessions whose model (a script) and tools do
nothing. 20 concurrent chains / sessions of ~100 hops / ticks, one `celery worker`
(prefork) at concurrency 1 and 2, both on Redis with late ack and prefetch 1. Baseline and
tickwork runs alternate; each run has a fresh worker that is warmed up before the clock
starts. Prints ticks/s and the ratio tickwork / baseline per pair of runs.

    python ops/bench/tick_throughput.py [--repeats 5] [--chains 20] [--ticks 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import text

from ops.bench import common, kinds
from ops.bench.baseline_app import TABLE

During = Callable[[common.Worker], None] | None


def baseline_run(
    url: str, concurrency: int, chains: int, hops: int, during: During = None
) -> float:
    """ticks/s of the bare Celery + Postgres chain."""
    queue = common.queue_name("baseline")
    env = common.worker_env(
        common.settings(url, "x"),
        BENCH_BROKER_URL=common.REDIS_URL,
        BENCH_QUEUE=queue,
        BENCH_DB_URL=common.plain_url(url),
    )
    os.environ.update(BENCH_BROKER_URL=common.REDIS_URL, BENCH_QUEUE=queue)
    from ops.bench import baseline_app

    baseline_app.app.conf.task_default_queue = queue
    baseline_app.app.conf.broker_url = common.REDIS_URL
    payload = {"blob": kinds.prose(4000, seed=1), "n": 0}
    with psycopg.connect(common.plain_url(url), autocommit=True) as conn:
        conn.execute(TABLE)
        conn.execute("truncate bench_chains")

        def chain_rows(n: int) -> list[str]:
            ids = [uuid.uuid4().hex for _ in range(n)]
            with conn.cursor() as cur:
                cur.executemany(
                    "insert into bench_chains (id, data) values (%s, %s)",
                    [(i, Jsonb(payload)) for i in ids],
                )
            return ids

        def finished(ids: list[str]) -> bool:
            row = conn.execute(
                "select count(*) from bench_chains where id = any(%s) and done_at is not null",
                (ids,),
            ).fetchone()
            return row is not None and row[0] == len(ids)

        with common.worker("ops.bench.baseline_app", queue, env, concurrency=concurrency) as w:
            warm = chain_rows(2 * concurrency)
            for i in warm:
                baseline_app.hop.apply_async((i, 0, 5), queue=queue)
            common.until(
                lambda: finished(warm), timeout=120, what="baseline warm-up", check=w.check
            )
            ids = chain_rows(chains)
            started = time.time()
            for i in ids:
                baseline_app.hop.apply_async((i, 0, hops), queue=queue)
            if during is not None:
                during(w)
            common.until(
                lambda: finished(ids), timeout=600, poll=0.05, what="baseline chains", check=w.check
            )
            row = conn.execute(
                "select extract(epoch from max(done_at)), sum(hops) from "
                "bench_chains where id = any(%s)",
                (ids,),
            ).fetchone()
    assert row is not None
    return float(row[1]) / (float(row[0]) - started)


def tickwork_run(
    url: str,
    concurrency: int,
    sessions: int,
    ticks: int,
    folder: Path,
    app: str = "tickwork.worker.tick.app",
    during: During = None,
) -> float:
    """ticks/s of tickwork sessions whose model and tools do nothing."""
    s = common.settings(url, "tick")
    tw = common.client(s)
    steps = max(1, (ticks - 1) // 2)  # 2 ticks a step and one for the final answer
    model = kinds.write_script(folder, f"steps{steps}", kinds.replies(steps))
    warm_model = kinds.write_script(folder, "warm", kinds.replies(2))

    def finished(ids: list[str]) -> bool:
        with tw.store.engine.connect() as conn:
            done = conn.execute(
                text(
                    "select count(*) from tickwork_sessions where id = any(:ids)"
                    " and status = 'completed'"
                ),
                {"ids": ids},
            ).scalar_one()
            failed = conn.execute(
                text(
                    "select count(*) from tickwork_sessions where id = "
                    "any(:ids) and status not in ('completed', 'ready', "
                    "'executing')"
                ),
                {"ids": ids},
            ).scalar_one()
        if failed:
            raise RuntimeError(f"{failed} benchmark sessions did not complete")
        return bool(done == len(ids))

    try:
        with common.worker(app, s.queue, common.worker_env(s), concurrency=concurrency) as w:
            warm = [common.submit(tw, warm_model) for _ in range(2 * concurrency)]
            common.until(
                lambda: finished(warm), timeout=120, what="tickwork warm-up", check=w.check
            )
            ids = [common.create(tw, model) for _ in range(sessions)]
            started = time.time()
            for session_id in ids:
                tw.publish(session_id, 0)
            if during is not None:
                during(w)
            common.until(
                lambda: finished(ids),
                timeout=900,
                poll=0.05,
                what="tickwork sessions",
                check=w.check,
            )
        with tw.store.engine.connect() as conn:
            end, total = conn.execute(
                text(
                    "select extract(epoch from max(updated_at)), sum(version) from "
                    "tickwork_sessions where id = any(:ids)"
                ),
                {"ids": ids},
            ).one()
    finally:
        tw.close()
    return float(total) / (float(end) - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chains", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--app",
        default="tickwork.worker.tick.app",
        help="the tickwork Celery app (a variant module to measure a change)",
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-"))
    figures: dict[str, dict[str, object]] = {}
    with common.database("throughput") as url:
        for concurrency in args.concurrency:
            base, tick, ratio = [], [], []
            for rep in range(args.repeats):
                b = baseline_run(url, concurrency, args.chains, args.ticks)
                t = tickwork_run(url, concurrency, args.chains, args.ticks, folder, args.app)
                base.append(b)
                tick.append(t)
                ratio.append(t / b)
                print(
                    f"c={concurrency} run {rep + 1}: baseline {b:.1f} ticks/s, "
                    f"tickwork {t:.1f} ticks/s, ratio {t / b:.3f}",
                    flush=True,
                )
            print(common.show(f"c={concurrency} baseline ticks/s", base, digits=1))
            print(common.show(f"c={concurrency} tickwork ticks/s", tick, digits=1))
            print(common.show(f"c={concurrency} ratio tickwork/baseline", ratio, digits=3))
            figures[f"c{concurrency}"] = {
                "baseline": common.stats(base),
                "tickwork": common.stats(tick),
                "ratio": common.stats(ratio),
            }
    common.emit("tick_throughput", figures)


if __name__ == "__main__":
    main()
