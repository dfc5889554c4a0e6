"""Benchmark: a long session under its context policy (issue 23). One session of 1,000
steps, each reading an 8 KB observation, over the OpenAI wire format against a local
server with a 32k-token window that reports cached prefixes (`tests/context_server.py`).

Ticks run in this process one after another on Postgres. Around step 10 and around step
1,000 the THINK ticks alternate between a worker whose transcript cache holds the session
(a hit: it reads the new steps only) and one with no cache (a miss: it reads from the
latest compaction on); each THINK tick is timed whole (claim, prompt, model call, save).
Figures: the median THINK tick at step ~1,000 over the one at step ~10, for hits and for
misses (the target is at most 1.2 for both: what a THINK reads and sends is bounded by
the window, not by the session's length); the prompt tokens sent against the same session
without the policy (computed from the stored steps), the share reported cached, and the
prompt tokens of every call drawn in `ops/bench/long_session.png`.

    python ops/bench/long_session.py [--steps 1000] [--window 32768] [--png PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops.bench import common, plot

#: THINK ticks timed at each end, half with each worker
SAMPLE = 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--window", type=int, default=32_768)
    parser.add_argument("--png", type=Path, default=Path(__file__).with_name("long_session.png"))
    args = parser.parse_args()

    from tickwork.fsm.values import Status, StepKind
    from tickwork.store import open_store
    from tickwork.worker.jobs import Jobs
    from tickwork.worker.observers.report import Phase
    from tickwork.worker.tick.advance import advance
    from tickwork.worker.tick.runtime import Runtime

    from tests.context_server import WindowedChat, windowed_chat, without_policy

    os.environ["TICKWORK_IMPORTS"] = '["tests.jobs:LONG"]'
    early = range(6, 6 + SAMPLE)
    late = range(args.steps - SAMPLE + 1, args.steps + 1)
    times: dict[tuple[str, str], list[float]] = {
        (end, cache): [] for end in ("early", "late") for cache in ("hit", "miss")
    }
    chat = WindowedChat(window=args.window, steps=args.steps)
    with common.database("long") as url, windowed_chat(chat):
        os.environ["OPENAI_BASE_URL"] = chat.url
        s = common.settings(url, "long", imports=["tests.jobs:LONG"])
        tw = common.client(s)
        tw.publish = lambda *_: None
        hit, _ = common.in_process_runtime(s)
        miss = Runtime(
            settings=s,
            store=open_store(s.db_url, transcripts=0),
            jobs=Jobs(s.imports),
            publish_tick=lambda *_: None,
        )
        session_id = tw.submit(
            "tests.jobs:LONG",
            {"task": "read every chunk"},
            model="openai:long",
            budgets={"max_steps": 10 * args.steps, "max_tokens": 10**10, "max_cost_usd": 0},
            context_window=args.window,
        ).id
        started, thinks = time.perf_counter(), 0
        while True:
            head = hit.store.get(session_id)
            if not head.status.runnable:
                break
            number = head.step + 1
            end = "early" if number in early else "late" if number in late else None
            thinking = head.status is Status.READY
            cache = "miss" if thinking and end and thinks % 2 else "hit"
            rt = miss if cache == "miss" else hit
            began = time.perf_counter()
            report = advance(rt, session_id, head.version)
            took = time.perf_counter() - began
            if thinking:
                thinks += 1
                if end and report.phase is Phase.THINK:
                    times[(end, cache)].append(took * 1000)
        run_s = time.perf_counter() - started
        session = hit.store.load(session_id)
        hit.close()
        miss.close()
    if session.head.status is not Status.COMPLETED:
        raise RuntimeError(f"the session ended {session.head.status}: {session.head.error_message}")

    answered = chat.answered
    sent = sum(r.tokens for r in answered)
    cached = sum(r.cached for r in answered)
    whole = without_policy(session)
    compactions = [st for st in session.steps if st.kind is StepKind.COMPACTION]
    medians = {f"{e}_{c}_ms": statistics.median(v) for (e, c), v in times.items()}
    ratios = {
        "hit_ratio": medians["late_hit_ms"] / medians["early_hit_ms"],
        "miss_ratio": medians["late_miss_ms"] / medians["early_miss_ms"],
    }
    for (e, c), v in times.items():
        print(
            common.show(
                f"THINK tick, step ~{10 if e == 'early' else args.steps}, cache {c}", v, " ms"
            )
        )
    print(
        f"step ~{args.steps} / step ~10: cache hit {ratios['hit_ratio']:.2f}, "
        f"cache miss {ratios['miss_ratio']:.2f} (target <= 1.2)"
    )
    print(
        f"{len(session.steps)} steps ({len(compactions)} compactions) in {run_s:.0f}s; "
        f"prompt tokens {sent:,} against {whole:,} without the policy "
        f"({sent / whole:.3f}); cached {cached / sent:.2f}; largest prompt "
        f"{max(r.tokens for r in chat.log):,} of a {args.window:,} window; refused "
        f"{sum(r.refused for r in chat.log)}"
    )
    replies = [
        (st.step, st.usage.prompt_tokens) for st in session.steps if st.kind is StepKind.REPLY
    ]
    summaries = [(st.step, st.usage.prompt_tokens) for st in compactions]
    last = session.steps[-1].step
    plot.scatter(
        args.png,
        [(replies, (31, 119, 180)), (summaries, (255, 127, 14))],
        x_max=last,
        y_max=args.window * 1.05,
        x_ticks=[round(last * f / 4, -1) for f in range(5)],
        y_ticks=[8_000, 16_000, 24_000, 32_000],
        lines=[(args.window, (214, 39, 40)), (args.window * 0.75, (150, 150, 150))],
    )
    print(f"prompt tokens per call drawn in {args.png}")
    common.emit(
        "long_session",
        {
            **medians,
            **ratios,
            "steps": len(session.steps),
            "compactions": len(compactions),
            "prompt_tokens": sent,
            "prompt_tokens_without_policy": whole,
            "prompt_share": sent / whole,
            "cached_share": cached / sent,
            "largest_prompt": max(r.tokens for r in chat.log),
            "window": args.window,
            "run_s": run_s,
        },
    )


if __name__ == "__main__":
    main()
