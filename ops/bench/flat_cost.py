"""Benchmark 2: flat cost. One session of 1,000 steps with 2 KB of model text per step.

Ticks run in this process one after another (the tick without Celery), timed per store
call: writes (start_call + save) and the claim (which for THINK also reads the history the
transcript is built from). The session is compacted as the context policy says (about every
50 steps), each compaction a tick of its own. Figures: the last 100 ticks against the first
100, and against the ticks of a fresh session interleaved tick by tick with them (same time,
same machine load); rows and parameter bytes written per tick; table sizes at the end.

Each tick updates the session's head row, and a head row updated 2,000 times without a
vacuum leaves its dead versions for every lookup by id to step over, and young tables
without statistics get poor plans: where the server's autovacuum is off (this project's
machine), the script runs VACUUM ANALYZE on the tables every `VACUUM_EVERY` ticks (between
ticks, outside the timings), as autovacuum's default thresholds would, and says so.

    python ops/bench/flat_cost.py [--steps 1000] [--text 2048]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops.bench import common, kinds

WINDOW = 100
#: ticks between two vacuums where the server's autovacuum is off (autovacuum's defaults
#: would vacuum the head's table after 50 updates of its row)
VACUUM_EVERY = 50


class Recorder:
    """Per-tick time, store-call times, rows, bytes and statements of one session."""

    def __init__(self, tag: str, timer: common.StoreTimer, writes: common.WriteCounter) -> None:
        self.tag, self.timer, self.writes = tag, timer, writes
        self.rows: list[tuple[float, int, int, int]] = []  # tick s, rows, bytes, statements

    def tick(self, run: object) -> None:
        before = self.writes.snapshot()
        started = time.perf_counter()
        run()  # type: ignore[operator]
        spent = time.perf_counter() - started
        after = self.writes.snapshot()
        self.rows.append((spent, after[0] - before[0], after[1] - before[1], after[2] - before[2]))

    def window(self, ticks: range) -> dict[str, float]:
        calls = [self.timer.calls[(self.tag, t)] for t in ticks]
        return {
            "tick_ms": statistics.mean(self.rows[t][0] for t in ticks) * 1000,
            "write_ms": statistics.mean(c.get("save", 0) + c.get("start_call", 0) for c in calls)
            * 1000,
            "save_ms": statistics.mean(c.get("save", 0) for c in calls) * 1000,
            "claim_ms": statistics.mean(c.get("claim", 0) for c in calls) * 1000,
            "rows": statistics.mean(self.rows[t][1] for t in ticks),
            "bytes": statistics.mean(self.rows[t][2] for t in ticks),
            "statements": statistics.mean(self.rows[t][3] for t in ticks),
        }


class Session:
    """Advances one session a tick at a time, as `common.drive` does, but on request."""

    def __init__(
        self, rt: object, published: list[tuple[str, int]], session_id: str, recorder: Recorder
    ) -> None:
        self.rt, self.published, self.id, self.rec = rt, published, session_id, recorder
        self.version, self.ticks, self.done = 0, 0, False

    def step(self) -> None:
        from tickwork.worker.tick.advance import Outcome, advance

        def run() -> None:
            del self.published[:]
            outcome = advance(self.rt, self.id, self.version).outcome
            if outcome is not Outcome.SAVED:
                raise RuntimeError(f"tick {self.ticks} of {self.id} was {outcome.value}")

        self.rec.timer.tick = (self.rec.tag, self.ticks)  # type: ignore[assignment]
        self.rec.tick(run)
        self.ticks += 1
        if self.published:
            self.version = self.published[-1][1]
        else:
            self.done = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--text", type=int, default=2048)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-"))
    with common.database("flat") as url:
        s = common.settings(url, "flat")
        tw = common.client(s)
        rt, published = common.in_process_runtime(s)
        writes = common.WriteCounter()
        writes.attach(rt.store.engine)
        timer = common.StoreTimer()
        timer.attach(rt.store)
        model = kinds.write_script(folder, "long", kinds.replies(args.steps, text_chars=args.text))
        empty = sum(common.table_sizes(rt.store.engine).values())
        long = Session(rt, published, common.submit(tw, model), Recorder("long", timer, writes))
        # a THINK and an EXECUTE a step, the final answer, and a tick per compaction
        least = 2 * args.steps + 1
        emulate = common.autovacuum_off(url)
        if emulate:
            print(f"autovacuum is off on this server: VACUUM ANALYZE every {VACUUM_EVERY} ticks")
        started = time.monotonic()
        while long.ticks < least - WINDOW:
            long.step()
            if emulate and long.ticks % VACUUM_EVERY == 0:
                common.vacuum(url)
            if long.ticks % 500 == 0:
                print(
                    f"  tick {long.ticks}/{least}+ after {time.monotonic() - started:.0f}s",
                    flush=True,
                )
        fresh = Session(rt, published, common.submit(tw, model), Recorder("fresh", timer, writes))
        while not long.done:
            long.step()
            fresh.step()
            if emulate and long.ticks % VACUUM_EVERY == 0:
                common.vacuum(url)
        total, ended = long.ticks, rt.store.load(long.id)
        replies = sum(1 for s in ended.steps if s.kind.value == "reply")
        compactions = len(ended.steps) - replies
        if ended.head.status.value != "completed" or replies != args.steps + 1:
            raise RuntimeError(
                f"the session ended {ended.head.status.value} after {replies} replies and "
                f"{compactions} compactions ({total} ticks), not {args.steps + 1} replies"
            )
        sizes = common.table_sizes(rt.store.engine)
        tw.close()
        rt.store.engine.dispose()
    first = long.rec.window(range(WINDOW))
    last = long.rec.window(range(total - WINDOW, total))
    # the fresh session's ticks that ran alongside the last 100 (it started a tick per
    # compaction earlier)
    control = fresh.rec.window(range(fresh.ticks - WINDOW, fresh.ticks))
    pairs = [
        (
            long.rec.window(range(i, i + 20)),
            long.rec.window(range(total - WINDOW + i, total - WINDOW + i + 20)),
        )
        for i in range(0, WINDOW, 20)
    ]
    print(
        f"{total} ticks ({compactions} compactions), {args.steps} steps of {args.text} chars, "
        f"{time.monotonic() - started:.0f}s"
    )
    print(
        f"{'per tick (mean)':<18}{'first 100':>12}{'last 100':>12}{'last/first':>12}"
        f"{'fresh, same time':>18}{'last/fresh':>12}"
    )
    for key in first:
        print(
            f"{key:<18}{first[key]:>12.2f}{last[key]:>12.2f}"
            f"{last[key] / first[key] if first[key] else 0:>12.3f}"
            f"{control[key]:>18.2f}{last[key] / control[key] if control[key] else 0:>12.3f}"
        )
    for key in ("write_ms", "claim_ms", "tick_ms"):
        print(
            common.show(
                f"{key} last/first over 5 pairs of 20-tick windows",
                [b[key] / a[key] for a, b in pairs],
                digits=3,
            )
        )
    stored = sum(sizes.values())
    print("table sizes at the end (pg_total_relation_size):")
    for table, size in sizes.items():
        print(f"  {table:<24}{size / 1024:>10.0f} KiB")
    print(
        f"  {'total':<24}{stored / 1024:>10.0f} KiB; {(stored - empty) / total:.0f} bytes "
        f"per tick over the empty schema (both sessions: {total + fresh.ticks} ticks)"
    )
    common.emit(
        "flat_cost",
        {
            "first": first,
            "last": last,
            "fresh": control,
            "compactions": compactions,
            "write_ratio": last["write_ms"] / first["write_ms"],
            "write_ratio_vs_fresh": last["write_ms"] / control["write_ms"],
            "claim_ratio": last["claim_ms"] / first["claim_ms"],
            "tick_ratio": last["tick_ms"] / first["tick_ms"],
            "pair_write_ratios": common.stats([b["write_ms"] / a["write_ms"] for a, b in pairs]),
            "sizes": sizes,
            "stored": stored,
            "empty": empty,
            "bytes_per_tick_on_disk": (stored - empty) / (total + fresh.ticks),
        },
    )


if __name__ == "__main__":
    main()
