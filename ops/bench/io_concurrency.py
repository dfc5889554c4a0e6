"""Benchmark 5: I/O-bound concurrency.

200 sessions of 5 steps (4 tool steps and a final answer) whose model takes 1 s: a local
chat-completions server (this process) used as `openai:fake` through OPENAI_BASE_URL, and
one `celery worker --pool threads --concurrency 50` (default settings otherwise). The
sessions are stored first, then all published at once; the figure is the wall time until
the last one completes against the ideal 200 * 5 * 1 s / 50 = 20 s.

    python ops/bench/io_concurrency.py [--sessions 200] [--steps 5] [--latency 1] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import text

from ops.bench import common


def script(steps: int) -> Any:
    def reply(index: int) -> dict[str, Any]:
        if index >= steps - 1:
            return {"content": "done"}
        return {
            "content": f"step {index}",
            "tool_calls": [{"name": "noop", "arguments": {"i": index}}],
        }

    return reply


def run(url: str, sessions: int, steps: int, latency: float, concurrency: int) -> dict[str, float]:
    s = common.settings(url, "io")
    fake = common.FakeChat(script(steps), delay=lambda index, attempt: latency)
    with fake.serve():
        env = common.worker_env(s, OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="")
        tw = common.client(s)
        try:
            with common.worker(
                "tickwork.worker.tick.app", s.queue, env, pool="threads", concurrency=concurrency
            ) as w:
                warm = [common.submit(tw, "openai:fake") for _ in range(4)]
                common.until(
                    lambda: done(tw, warm) == len(warm),
                    timeout=120,
                    poll=0.1,
                    what="warm-up",
                    check=w.check,
                )
                ids = [common.create(tw, "openai:fake") for _ in range(sessions)]
                started = time.time()
                for session_id in ids:
                    tw.publish(session_id, 0)
                common.until(
                    lambda: done(tw, ids) == len(ids),
                    timeout=600,
                    poll=0.1,
                    what="sessions",
                    check=w.check,
                )
            with tw.store.engine.connect() as conn:
                end, ticks = conn.execute(
                    text(
                        "select extract(epoch from max(updated_at)), sum(version) from "
                        "tickwork_sessions where id = any(:ids)"
                    ),
                    {"ids": ids},
                ).one()
        finally:
            tw.close()
    calls = sum(len(v) for v in fake.arrivals.values())
    return {"wall": float(end) - started, "ticks": float(ticks), "model_calls": float(calls)}


def done(tw: Any, ids: list[str]) -> int:
    with tw.store.engine.connect() as conn:
        failed = conn.execute(
            text(
                "select count(*) from tickwork_sessions where id = any(:ids) "
                "and status not in ('completed', 'ready', 'executing')"
            ),
            {"ids": ids},
        ).scalar_one()
        if failed:
            raise RuntimeError(f"{failed} sessions did not complete")
        return int(
            conn.execute(
                text(
                    "select count(*) from tickwork_sessions where id = "
                    "any(:ids) and status = 'completed'"
                ),
                {"ids": ids},
            ).scalar_one()
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    ideal = args.sessions * args.steps * args.latency / args.concurrency
    walls, ratios = [], []
    with common.database("io") as url:
        for rep in range(args.repeats):
            result = run(url, args.sessions, args.steps, args.latency, args.concurrency)
            walls.append(result["wall"])
            ratios.append(result["wall"] / ideal)
            print(
                f"run {rep + 1}: {result['wall']:.1f}s for {result['ticks']:.0f} ticks and "
                f"{result['model_calls']:.0f} model calls (warm-up included); ideal "
                f"{ideal:.0f}s; ratio {result['wall'] / ideal:.3f}",
                flush=True,
            )
    print(common.show("wall s", walls, digits=1))
    print(common.show("wall / ideal", ratios, digits=3))
    common.emit(
        "io_concurrency",
        {"ideal": ideal, "wall": common.stats(walls), "ratio": common.stats(ratios)},
    )


if __name__ == "__main__":
    main()
