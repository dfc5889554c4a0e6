"""The full chaos run: `python -m ops.chaos.run` (defaults: 200 sessions, 2 minutes of kills).

Prints the figures, writes them as JSON (`--json`) and, with `--markdown`, as a table for
ops/chaos/RESULTS.md. Exits 1 if any invariant is broken. Nothing is touched on the
machine's own Postgres or Redis: see `ops/chaos/services.py` for the private servers and
the commands that restart them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import fields
from pathlib import Path

from ops.chaos.harness import Plan, run


def _fraction(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.chaos.run", description=__doc__)
    for f in fields(Plan):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.type == "float | None":
            parser.add_argument(
                flag, type=_fraction, default=f.default, help="a fraction of --chaos-s, or none"
            )
        else:
            parser.add_argument(flag, type=int if f.type == "int" else float, default=f.default)
    parser.add_argument(
        "--broker",
        default=os.environ.get("TICKWORK_BROKER_URL", ""),
        help="run on this broker (e.g. amqp://guest:guest@127.0.0.1:5672//) instead of a "
        "private Redis; it is never restarted, the run's own queues are deleted at the end "
        "(default: TICKWORK_BROKER_URL if set)",
    )
    parser.add_argument("--workdir", type=Path, help="keep logs, scripts and sink here")
    parser.add_argument("--json", type=Path, help="write the report as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the figures as a Markdown table")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    plan = Plan(**{f.name: getattr(args, f.name) for f in fields(Plan)})
    report = run(plan, workdir=args.workdir, broker_url=args.broker)
    print()
    print(report.text())
    if args.json:
        args.json.write_text(json.dumps(report.as_json(), indent=2, default=str))
    if args.markdown:
        args.markdown.write_text(report.markdown() + "\n")
    print(
        "\nEVERY INVARIANT HOLDS"
        if report.ok
        else f"\nBROKEN: {', '.join(f.name for f in report.broken)}"
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
