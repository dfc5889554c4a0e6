"""Benchmark: a repair session's files in the store (docs/DESIGN.md section 10).

A generated repository of 2,000 files and 20 MB is packed into the artifact store (the
database's blobs table), then:

- materialising a working copy: cold (an empty cache: every blob from the database), warm
  (the blobs in this host's cache, a new copy) and current (the copy is at the stored state);
- the file part of a tick that edits one file (the working copy checked against the store,
  the change found, its blob put and its row saved): time and bytes written to the store,
  at 200 files and at 2,000 files, and their ratio (the target: at most 1.2). The edit is
  write_file's (it names its file); the same edit by a command, where every file's stat is
  looked at (a walk that grows with the files, hashing only what moved), is shown beside.

    python ops/bench/workspaces.py [--files 2000] [--megabytes 20] [--edits 50]
        [--database-url URL]   (default: SQLite in a temporary folder)
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops.bench import common


def generate(root: Path, files: int, total_bytes: int, seed: int = 7) -> None:
    """`files` text files of about `total_bytes` in all, in nested folders."""
    rng = random.Random(seed)
    words = [f"w{i:04d}" for i in range(2000)]
    size = total_bytes // files
    for i in range(files):
        path = root / f"pkg{i % 20:02d}" / f"mod{i % 7}" / f"file_{i:05d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines, length = [], 0
        while length < size:
            line = " ".join(rng.choice(words) for _ in range(10)) + "\n"
            lines.append(line)
            length += len(line)
        path.write_text("".join(lines)[:size])


def session(store: Any, base: str, session_id: str) -> Any:
    from tickwork.fsm.values import Head, Session

    now = datetime.now(UTC)
    head = Head(
        id=session_id,
        kind="repair",
        created_at=now,
        updated_at=now,
        model="scripted",
        config={"user_prompt": "bench", "files": {"base": base}},
    )
    store.create(Session(head=head), now=now)
    return head


def edit_ticks(
    store: Any, host: Any, head: Any, edits: int, *, named: bool
) -> tuple[list[float], list[int]]:
    """Ticks that each change one line of one file; (seconds, bytes written) per tick.
    `named`: the tool names the file it wrote (write_file, apply_patch); else every file is
    looked at (run_command)."""
    from sqlalchemy import insert
    from tickwork.store.schema import file_changes

    spent, written = [], []
    version = 0
    copy = host.checkout(head)
    targets = sorted(copy.path.rglob("*.py"))[:10]
    copy.release()
    for n in range(edits):
        started = time.perf_counter()
        copy = host.checkout(head)
        try:
            copy.begin()
            started_edit = time.perf_counter()
            with targets[n % 10].open("a") as handle:
                handle.write(f"# edit {n}\n")
            edit_s = time.perf_counter() - started_edit
            copy.bytes_written = 0
            rel = targets[n % 10].relative_to(copy.path).as_posix()
            change = copy.record(step=n + 1, call_id=f"s{n + 1}c0", paths=[rel] if named else None)
            assert change is not None
            version += 2
            row = change.row(head.id, version)
            with store.engine.begin() as conn:  # what the tick's save adds
                conn.execute(insert(file_changes), [row])
            copy.saved()
            written.append(copy.bytes_written + len(str(row["changes"])) + 64 * 2)
        finally:
            copy.release()
        spent.append(time.perf_counter() - started - edit_s)
    return spent, written


def materialise(store: Any, artifacts: Any, head: Any, root: Path) -> dict[str, float]:
    from tickwork.worker.files.workspaces import Workspaces

    figures = {}
    shutil.rmtree(root, ignore_errors=True)
    host = Workspaces(root, store, artifacts)
    for name in ("cold", "current"):
        started = time.perf_counter()
        host.checkout(head).release()
        figures[f"{name}_s"] = time.perf_counter() - started
    shutil.rmtree(root / "sessions")
    started = time.perf_counter()
    Workspaces(root, store, artifacts).checkout(head).release()
    figures["warm_s"] = time.perf_counter() - started
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--megabytes", type=float, default=20.0)
    parser.add_argument("--edits", type=int, default=50)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()

    from tickwork.store import make_engine, open_store
    from tickwork.store.artifacts import DatabaseArtifacts
    from tickwork.store.migrate import upgrade
    from tickwork.worker.files import sources
    from tickwork.worker.files.workspaces import Workspaces

    with tempfile.TemporaryDirectory(prefix="tickwork-bench-ws-") as tmp_name:
        tmp = Path(tmp_name)
        url = args.database_url or f"sqlite:///{tmp / 'bench.db'}"
        upgrade(url)
        store = open_store(make_engine(url))
        artifacts = DatabaseArtifacts(store.engine)
        try:
            large, small = tmp / "large", tmp / "small"
            total = int(args.megabytes * 1_000_000)
            generate(large, args.files, total)
            generate(small, args.files // 10, total // 10)

            started = time.perf_counter()
            large_base, count = sources.pack(large, artifacts)
            pack_s = time.perf_counter() - started
            print(f"packed {count} files ({args.megabytes:g} MB) in {pack_s:.2f}s")
            small_base, _ = sources.pack(small, artifacts)

            head = session(store, large_base, "bench-materialise")
            made = materialise(store, artifacts, head, tmp / "host-m")
            print(
                f"materialise {count} files: cold {made['cold_s']:.2f}s, warm (blobs cached) "
                f"{made['warm_s']:.2f}s, current copy {made['current_s'] * 1000:.1f} ms"
            )

            ticks: dict[str, dict[str, float]] = {}
            for name, base in (("small", small_base), ("large", large_base)):
                for named in (True, False):
                    head = session(store, base, f"bench-{name}-{named}")
                    host = Workspaces(tmp / f"host-{name}-{named}", store, artifacts)
                    host.checkout(head).release()
                    spent, written = edit_ticks(store, host, head, args.edits, named=named)
                    ticks[name + ("" if named else "-command")] = {
                        "ms": statistics.median(spent) * 1000,
                        "bytes": statistics.median(written),
                    }
            small_n, large_n = args.files // 10, args.files
            for name, n in (("small", small_n), ("large", large_n)):
                command = ticks[name + "-command"]["ms"]
                print(
                    f"one-file edit at {n} files: {ticks[name]['ms']:.2f} ms, "
                    f"{ticks[name]['bytes']:.0f} bytes written (median of {args.edits}); by a "
                    f"command (every file's stat looked at): {command:.2f} ms"
                )
            time_ratio = ticks["large"]["ms"] / ticks["small"]["ms"]
            bytes_ratio = ticks["large"]["bytes"] / ticks["small"]["bytes"]
            print(
                f"ratio {large_n} / {small_n} files: time {time_ratio:.2f}, bytes "
                f"{bytes_ratio:.2f} (target <= 1.2)"
            )
            common.emit(
                "workspaces",
                {
                    "files": count,
                    "megabytes": args.megabytes,
                    "pack_s": round(pack_s, 3),
                    **{k: round(v, 4) for k, v in made.items()},
                    "edit_ms_small": round(ticks["small"]["ms"], 3),
                    "edit_ms_large": round(ticks["large"]["ms"], 3),
                    "edit_bytes_small": ticks["small"]["bytes"],
                    "edit_bytes_large": ticks["large"]["bytes"],
                    "command_edit_ms_small": round(ticks["small-command"]["ms"], 3),
                    "command_edit_ms_large": round(ticks["large-command"]["ms"], 3),
                    "time_ratio": round(time_ratio, 3),
                    "bytes_ratio": round(bytes_ratio, 3),
                },
            )
        finally:
            store.engine.dispose()


if __name__ == "__main__":
    main()
