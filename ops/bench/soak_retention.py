"""Soak: retention keeps the live tables bounded under a steady load (issue 16).

Sessions are submitted at a steady rate to `celery worker` processes that run retention in
their background with ages of seconds; most complete, some fail (their dead letters are
dismissed at once, as an operator would). Every sample prints the live tables' rows and
on-disk sizes (pg_total_relation_size: heap, TOAST, indexes) and the archive's size. At the
end: the mean rows and bytes of the last quarter against the second (level: <= 1.1), and
a check that every finished session is live xor archived (nothing lost, nothing in both)
and is in exactly one archive object.

    python ops/bench/soak_retention.py [--duration 1200] [--rate 2] [--retention-s 20]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import select

from ops.bench import common
from ops.bench.kinds import BUDGETS, KIND, replies, write_script

LIVE = (*common.TICKWORK_TABLES, "tickwork_file_changes")
#: one session in this many fails on its step budget (its dead letter is then dismissed)
FAIL_EVERY = 5


def sample(engine: Any, archive: Path) -> dict[str, Any]:
    from tickwork.store.retention import live_and_archived

    rows = live_and_archived(engine)
    sizes = common.table_sizes(engine, (*LIVE, "tickwork_archived"))
    files = [p for p in archive.rglob("*") if p.is_file()] if archive.exists() else []
    return {
        "at": time.time(),
        "live_rows": sum(rows.get(t, 0) for t in LIVE),
        "live_bytes": sum(sizes[t] for t in LIVE),
        "sessions": rows["tickwork_sessions"],
        "archived": rows["archived_archived"],
        "pending": rows["archived_pending"],
        "index_bytes": sizes["tickwork_archived"],
        "archive_bytes": sum(p.stat().st_size for p in files),
        "archive_objects": len(files),
    }


def autovacuum_on(engine: Any) -> bool:
    with engine.connect() as conn:
        return bool(conn.exec_driver_sql("show autovacuum").scalar() == "on")


def vacuum(engine: Any) -> None:
    """What autovacuum does to the live tables: deleted rows' space made reusable."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in (*LIVE, "tickwork_archived"):
            conn.exec_driver_sql(f"VACUUM (ANALYZE) {table}")


def dismiss_open(tw: Any) -> int:
    from tickwork.store.dead_letters import Closing

    letters = tw.dead_letters(unresolved=True, limit=500)
    for letter in letters:
        try:
            tw.close_dead_letter(letter.id, state=Closing.DISMISSED, by="soak", reason="soak run")
        except Exception:  # closed meanwhile by nobody else; keep going
            continue
    return len(letters)


def quarters(samples: list[dict[str, Any]], key: str) -> list[float]:
    start, end = samples[0]["at"], samples[-1]["at"]
    span = (end - start) / 4 or 1.0
    out: list[float] = []
    for q in range(4):
        found = [s[key] for s in samples if start + q * span <= s["at"] <= start + (q + 1) * span]
        out.append(sum(found) / len(found) if found else 0.0)
    return out


def check_archive(engine: Any, archive: Path, finished: set[str]) -> dict[str, Any]:
    """Every finished session live xor archived, and archived ones once in the objects."""
    from tickwork.store.schema import archived, sessions

    with engine.connect() as conn:
        live = set(conn.execute(select(sessions.c.id)).scalars())
        done = set(
            conn.execute(
                select(archived.c.session_id).where(archived.c.state == "archived")
            ).scalars()
        )
    seen: dict[str, int] = {}
    for path in archive.rglob("*.jsonl.gz"):
        for line in gzip.decompress(path.read_bytes()).splitlines():
            sid = json.loads(line)["session_id"]
            seen[sid] = seen.get(sid, 0) + 1
    return {
        "finished": len(finished),
        "live": len(finished & live),
        "archived": len(finished & done),
        "lost": sorted(finished - live - done)[:10],
        "both": sorted(live & done)[:10],
        "archived_not_in_objects": sorted(done - seen.keys())[:10],
        "in_two_objects": sorted(s for s, n in seen.items() if n > 1)[:10],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1200.0, help="seconds of load")
    parser.add_argument("--rate", type=float, default=2.0, help="sessions submitted per second")
    parser.add_argument("--retention-s", type=float, default=20.0, help="retention age")
    parser.add_argument("--steps", type=int, default=3, help="tool steps per session")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples")
    args = parser.parse_args()

    from sqlalchemy import Engine
    from tickwork.store import make_engine

    folder = Path(tempfile.mkdtemp(prefix="tickwork-soak-"))
    archive = folder / "archive"
    script = write_script(folder, "soak", replies(args.steps))
    with common.database("soak") as url:
        s = common.settings(url, "soak")
        env = common.worker_env(
            s,
            TICKWORK_RETENTION_COMPLETED_S=str(args.retention_s),
            TICKWORK_RETENTION_CANCELLED_S=str(args.retention_s),
            TICKWORK_RETENTION_FAILED_S=str(args.retention_s),
            TICKWORK_RETENTION_PERIOD_S="1",
            TICKWORK_RETENTION_BATCHES_PER_PASS="20",
            TICKWORK_RETENTION_ARCHIVE_URL=archive.as_uri(),
        )
        workers = [
            common.Worker(
                "tickwork.worker.tick.app",
                s.queue,
                env,
                pool="threads",
                concurrency=4,
                loglevel="INFO",
            )
            for _ in range(args.workers)
        ]
        engine: Engine = make_engine(url)
        tw = common.client(s)
        submitted: list[str] = []
        samples: list[dict[str, Any]] = []
        # a test server may run without autovacuum; the soak then does its work itself
        own_vacuum = not autovacuum_on(engine)
        if own_vacuum:
            print("autovacuum is off on this server: the soak vacuums the live tables each sample")
        try:
            for w in workers:
                w.wait_ready()
            started = time.monotonic()
            next_sample = started
            n = 0
            while time.monotonic() - started < args.duration:
                due = started + n / args.rate
                if time.monotonic() < due:
                    time.sleep(min(0.05, due - time.monotonic()))
                    continue
                budgets = {**BUDGETS, "max_steps": 1} if n % FAIL_EVERY == 0 else BUDGETS
                submitted.append(str(tw.submit(KIND, {}, model=script, budgets=budgets).id))
                n += 1
                if time.monotonic() >= next_sample:
                    dismiss_open(tw)
                    if own_vacuum:
                        vacuum(engine)
                    samples.append(sample(engine, archive))
                    row = samples[-1]
                    print(
                        f"{row['at'] - samples[0]['at']:7.0f}s  submitted {n:6d}  live sessions "
                        f"{row['sessions']:6d}  live rows {row['live_rows']:8d}  live bytes "
                        f"{row['live_bytes']:11d}  archived {row['archived']:6d}  archive bytes "
                        f"{row['archive_bytes']:11d}",
                        flush=True,
                    )
                    next_sample += args.sample_s
                for w in workers:
                    w.check()
            # let the last sessions finish; their archiving is not waited for
            from tickwork.fsm.values import Status

            def all_finished() -> bool:
                dismiss_open(tw)
                return not tw.sessions(status=[Status.READY.value, Status.EXECUTING.value], limit=1)

            common.until(all_finished, timeout=120, poll=0.5, what="the last sessions to end")
            dismiss_open(tw)
            time.sleep(2)  # a background pass that was writing finishes
        finally:
            for w in workers:
                w.stop()
            tw.close()
        finished = set(submitted)  # every submitted session ended (waited for above)
        checked = check_archive(engine, archive, finished)
        engine.dispose()
        rows_q = quarters(samples, "live_rows")
        bytes_q = quarters(samples, "live_bytes")
        ratio_rows = rows_q[3] / rows_q[1] if rows_q[1] else float("inf")
        ratio_bytes = bytes_q[3] / bytes_q[1] if bytes_q[1] else float("inf")
        level = ratio_rows <= 1.1 and ratio_bytes <= 1.1
        whole = not (
            checked["lost"]
            or checked["both"]
            or checked["archived_not_in_objects"]
            or checked["in_two_objects"]
        )
        print(f"live rows by quarter:  {[round(x) for x in rows_q]}  Q4/Q2 = {ratio_rows:.3f}")
        print(f"live bytes by quarter: {[round(x) for x in bytes_q]}  Q4/Q2 = {ratio_bytes:.3f}")
        print(f"archive: {samples[-1]['archive_bytes'] if samples else 0} bytes in {archive}")
        print(f"live xor archived: {json.dumps(checked)}")
        common.emit(
            "soak_retention",
            {
                "duration_s": args.duration,
                "rate": args.rate,
                "retention_s": args.retention_s,
                "submitted": len(submitted),
                "rows_by_quarter": rows_q,
                "bytes_by_quarter": bytes_q,
                "q4_over_q2_rows": ratio_rows,
                "q4_over_q2_bytes": ratio_bytes,
                "level": level,
                "soak_vacuumed": own_vacuum,
                "check": checked,
                "machine": common.machine(),
            },
        )
    shutil.rmtree(folder, ignore_errors=True)
    print("PASS" if level and whole else "FAIL")
    return 0 if level and whole else 1


if __name__ == "__main__":
    sys.exit(main())
