"""Benchmark: tickwork against its peers on the same work, per durable step.

Each contender runs C sessions at once of S steps, a step being one model reply (a fake
model answering at once with one call of a no-op tool, the same replies for all) and one
tool call, durable after every reply and every call (ops/bench/contenders.py):

- tickwork: the documented worker, `tickwork worker --pool threads -c C`, on Postgres and
  Redis, sessions submitted by the client;
- dbos: DBOS Transact, a workflow with a step per reply and a step per call, started on a
  DBOS queue of worker concurrency C (polled every --dbos-poll seconds);
- langgraph: a StateGraph (agent node, ToolNode) on PostgresSaver, durability "sync",
  sessions invoked from C threads;
- bare: the floor, a Celery task that INSERTs one row and enqueues the next hop, on a worker
  with tickwork's pool and concurrency.

Every contender has a database of its own and every run a process of its own, warmed up
before the clock starts; the clock runs from the first submission to the last durable
write. The contenders alternate within each repeat (A B C D, then B C D A, ...). Figures:
durable steps per second, wall time, and per step the commits and rows inserted, updated
and deleted in the contender's database (pg_stat_database deltas, background polls
included), as medians over the repeats; and the throughput ratios tickwork/peer of each
repeat (above 1: tickwork is faster). DBOS and LangGraph need the `bench` extra; missing,
they are skipped with a message.

    python ops/bench/peers.py [--steps 20] [--concurrency 1 2 8] [--repeats 5]
                              [--only tickwork,dbos,langgraph,bare] [--quick]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops.bench import common, contenders
from ops.bench.meters import DatabaseCounts

FIGURES = (
    "steps_per_s",
    "wall_s",
    "commits_per_step",
    "rows_per_step",
    "inserted_per_step",
    "updated_per_step",
    "deleted_per_step",
)


def names(value: str) -> tuple[str, ...]:
    """The contenders of `--only`, checked."""
    chosen = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in chosen if n not in contenders.NAMES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown contender {', '.join(unknown) or '(none given)'}; "
            f"choose from {','.join(contenders.NAMES)}"
        )
    return chosen


def rotated(items: tuple[str, ...], by: int) -> tuple[str, ...]:
    """`items` started at `by`: the order of repeat `by` (A B C D, B C D A, ...)."""
    by %= len(items)
    return items[by:] + items[:by]


def child(name: str, url: str, sessions: int, args: argparse.Namespace) -> contenders.Run:
    """One measured run of `name` in a process of its own (DBOS holds one instance per
    process; every contender gets the same treatment)."""
    command = [
        *(sys.executable, str(Path(__file__).resolve()), "--run", name, "--database", url),
        *("--sessions", str(sessions), "--steps", str(args.steps), "--pool", args.pool),
        *("--dbos-poll", str(args.dbos_poll)),
    ]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=common.ROOT
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=contenders.TIMEOUT + 120)
        except BaseException:
            # SIGTERM lets the run stop the worker it started; SIGKILL would orphan it
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
    lines = [line for line in stdout.splitlines() if line.startswith("RUN ")]
    if proc.returncode or not lines:
        raise RuntimeError(
            f"the {name} run failed (exit {proc.returncode}):\n{stdout[-2000:]}{stderr[-4000:]}"
        )
    data = json.loads(lines[-1][4:])
    # every connection of the run is closed now: its backends reported their counts at exit
    after = DatabaseCounts.settled(common.PG_ADMIN, url.rsplit("/", 1)[1])
    counts = after - DatabaseCounts(**data["before"])
    return contenders.Run(name, sessions, args.steps, data["wall_s"], counts)


def run_one(args: argparse.Namespace) -> None:
    """`--run`: one measured run, printed as a `RUN {json}` line for the parent."""
    options = contenders.Options(
        url=args.database, concurrency=args.sessions, pool=args.pool, dbos_poll_s=args.dbos_poll
    )
    wall, before = contenders.measure(args.run, options, args.sessions, args.steps)
    print("RUN " + json.dumps({"wall_s": wall, "before": asdict(before)}), flush=True)


def summary(
    concurrency: int,
    runs: dict[str, list[contenders.Run]],
    args: argparse.Namespace,
    skipped: dict[str, str],
) -> dict[str, Any]:
    """The figures of one concurrency: medians of each contender's runs, and the ratios
    tickwork/peer of the runs made in the same repeat."""
    figures: dict[str, Any] = {
        "concurrency": concurrency,
        "steps": args.steps,
        "repeats": args.repeats,
        "pool": args.pool,
        "dbos_poll_s": args.dbos_poll,
        "contenders": {
            name: {key: common.stats([r.figures()[key] for r in done]) for key in FIGURES}
            for name, done in runs.items()
        },
        "ratios": {},
        "skipped": skipped,
    }
    if "tickwork" in runs:
        for name, done in runs.items():
            if name != "tickwork":
                figures["ratios"][f"tickwork/{name}"] = common.stats(
                    [
                        t.figures()["steps_per_s"] / p.figures()["steps_per_s"]
                        for t, p in zip(runs["tickwork"], done, strict=True)
                    ]
                )
    return figures


def table(figures: dict[str, Any]) -> str:
    head = (
        f"{'contender':<11}{'steps/s':>10}{'wall s':>9}{'commits':>9}"
        f"{'rows':>8}{'ins':>7}{'upd':>7}{'del':>7}   (medians; per step: commits, rows)"
    )
    lines = [f"c={figures['concurrency']}, {figures['steps']} steps a session", head]
    for name, f in figures["contenders"].items():
        m = {k: v["median"] for k, v in f.items()}
        lines.append(
            f"{name:<11}{m['steps_per_s']:>10.1f}{m['wall_s']:>9.2f}{m['commits_per_step']:>9.2f}"
            f"{m['rows_per_step']:>8.2f}{m['inserted_per_step']:>7.2f}"
            f"{m['updated_per_step']:>7.2f}{m['deleted_per_step']:>7.2f}"
        )
    for name, r in figures["ratios"].items():
        lines.append(
            f"{name:<20} x{r['median']:.3f} (min {r['min']:.3f}, max {r['max']:.3f}, n={r['n']})"
        )
    for name, why in figures["skipped"].items():
        lines.append(f"{name}: skipped, {why}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps a session")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--only",
        type=names,
        default=contenders.NAMES,
        help=f"the contenders, comma-separated (default {','.join(contenders.NAMES)})",
    )
    parser.add_argument("--pool", default="threads", choices=("threads", "prefork", "solo"))
    parser.add_argument("--dbos-poll", type=float, default=0.1, help="DBOS queue polling, s")
    parser.add_argument("--quick", action="store_true", help="a check: 5 steps, c=1, 1 repeat")
    parser.add_argument("--run", choices=contenders.NAMES, help=argparse.SUPPRESS)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.concurrency, args.repeats = 5, [1], 1
    if min(args.steps, args.repeats, *args.concurrency) < 1:
        parser.error("--steps, --repeats and --concurrency must be at least 1")
    if args.run:
        # stopped by the parent: unwind, so that the contender stops what it started
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        run_one(args)
        return
    skipped = contenders.unavailable(args.only)
    for name, why in skipped.items():
        print(f"skipped {name}: {why}", flush=True)
    running = tuple(n for n in args.only if n not in skipped)
    if not running:
        sys.exit("peers: none of the contenders asked for can run here (see above)")
    with ExitStack() as stack:
        urls = {
            name: stack.enter_context(common.database(f"peers_{name}", migrate=name == "tickwork"))
            for name in running
        }
        for concurrency in args.concurrency:
            runs: dict[str, list[contenders.Run]] = defaultdict(list)
            for rep in range(args.repeats):
                for name in rotated(running, rep):
                    run = child(name, urls[name], concurrency, args)
                    runs[name].append(run)
                    f = run.figures()
                    print(
                        f"c={concurrency} run {rep + 1} {name}: {f['steps_per_s']:.1f} steps/s, "
                        f"{f['wall_s']:.2f}s, {f['commits_per_step']:.2f} commits and "
                        f"{f['rows_per_step']:.2f} rows a step",
                        flush=True,
                    )
            figures = summary(concurrency, runs, args, skipped)
            print(table(figures), flush=True)
            common.emit("peers", figures)


if __name__ == "__main__":
    main()
