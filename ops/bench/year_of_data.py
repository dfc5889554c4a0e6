"""A year of data: do the tick, the relay and the list commands stay fast on full tables?

Two databases in one run: a near-empty one (5,000 sessions, enough for every list to fill a
page) and a full one (1,000,000 sessions and about 20,000,000 step rows at --scale 1),
both filled by Postgres COPY with the same generator. Then each operation is run on both,
interleaved (empty, full, empty, full...) so that load on the machine hits both alike, and
its p50 and p95 on the full database are compared with the near-empty one (target: p95
ratio <= 1.2). Last, every statement of every operation is run once more under
EXPLAIN (ANALYZE, BUFFERS) on both databases, in a transaction rolled back at once: the
shared buffers each touches do not depend on the machine's load; the full plans are printed.

What the generator writes, per session (ids are random uuid4 hex; created_at is spread over
the 365 days before the run; heads and dead letters are written in the order they were
made, as in production, the other tables in id order):
- the head: 89% completed, 5% failed (each with a dead letter, 40% of them resolved),
  3% cancelled, 2% waiting_approval (created in the last 14 days), 0.6% ready (with its
  outbox row: published, a few stale, a few delayed) and 0.4% executing (under a live
  lease, a few leases expired);
- 1 to 39 steps (20 on average) with a thought of 60-200 characters;
- for the LAST step only: one call and its observation (300 characters; none while the
  call waits for a person), and 4-6 events (created, step_recorded, tool_started,
  tool_finished, the ending, dead_lettered); calls, observations and events of the
  earlier steps are not written (their tables are ~1M and ~5M rows, not 20M and 100M).

    python ops/bench/year_of_data.py [--scale 0.02] [--repeat 100] [--sessions 12] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import secrets
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg

from ops.bench import common, kinds

SESSIONS = 1_000_000  #: at --scale 1
EMPTY_SESSIONS = 5_000  #: the near-empty database: 100 waiting sessions, 250 dead letters
TARGET = 1.2
DAY = 86_400
#: (status, share of sessions); the rest is completed
MIX = (
    ("ready", 0.006),
    ("executing", 0.004),
    ("waiting_approval", 0.02),
    ("failed", 0.05),
    ("cancelled", 0.03),
)
CODES = (
    ("MODEL_ERROR", "model error: 429 Too Many Requests after 5 retries (request id {h})"),
    ("BUDGET_STEPS", "the session made {n} model calls, its max_steps"),
    ("BUDGET_TOKENS", "the session used {n} tokens, more than max_tokens {n}"),
    ("DEADLINE", "deadline of {n} s passed"),
    ("LOOP", "the model repeated call {h} {n} times"),
    ("INTERNAL", "tool 'fetch_page' raised KeyError('{h}')"),
)
TOOLS = ("read_file", "write_file", "run_tests", "fetch_page", "search", "shell")
MODELS = ("openai:gpt-4o-mini", "anthropic:claude-3-5-haiku", "openai:gpt-4.1")
PEOPLE = tuple(f"user{n}" for n in range(20))


# ---------------------------------------------------------------------------------------
# Filling the tables with COPY
# ---------------------------------------------------------------------------------------


class Plan:
    """Every session's status, start and number of steps, drawn once; the table writers
    below read them, so each table is one COPY in session id order."""

    def __init__(self, n: int, now: float, seed: int = 17) -> None:
        rng = random.Random(seed)
        self.now = now
        self.ids = sorted(f"{rng.getrandbits(128):032x}" for _ in range(n))
        self.status: list[str] = []
        self.created: list[int] = []
        self.steps: list[int] = []
        expired = 0
        self.expired: set[int] = set()
        for i in range(n):
            r = rng.random()
            status = "completed"
            for name, share in MIX:
                if r < share:
                    status = name
                    break
                r -= share
            if status in ("ready", "executing"):
                start = now - rng.uniform(60, 3600)
            elif status == "waiting_approval":
                start = now - rng.uniform(600, 14 * DAY)
            else:
                start = now - rng.uniform(3600, 365 * DAY)
            if status == "executing" and (expired < 3 or rng.random() < 0.025):
                expired += 1  # ~100 at 1M sessions, at least 3
                self.expired.add(i)
            self.status.append(status)
            self.created.append(int(start))
            self.steps.append(rng.randint(1, 39))
        self.total_steps = sum(self.steps)


def stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(epoch))


def _prose(n: int, lo: int, hi: int) -> list[str]:
    rng = random.Random(n)
    return [kinds.prose(rng.randint(lo, hi), seed=n * 1000 + k) for k in range(256)]


class Copier:
    """Lines of COPY text, sent in blocks of about 4 MB."""

    def __init__(self, cur: psycopg.Cursor[Any], table: str, columns: list[str]) -> None:
        self.cur, self.table, self.columns = cur, table, columns
        self.rows = 0

    @contextmanager
    def open(self) -> Iterator[Callable[[list[str]], None]]:
        names = ", ".join(f'"{c}"' for c in self.columns)
        with self.cur.copy(f"COPY {self.table} ({names}) FROM STDIN") as copy:
            block: list[str] = []
            size = 0

            def put(lines: list[str]) -> None:
                nonlocal block, size
                block.extend(lines)
                self.rows += len(lines)
                size += len(lines)
                if size >= 20_000:
                    copy.write("".join(block))
                    block, size = [], 0

            yield put
            if block:
                copy.write("".join(block))


def fill(url: str, plan: Plan, template_id: str) -> dict[str, Any]:
    """COPY the planned rows into the tables; returns rows, seconds and rows/s per table."""
    now = plan.now
    thoughts = _prose(1, 60, 200)
    contents = _prose(2, 250, 350)
    finals = _prose(3, 80, 400)
    hexes = [f"{random.Random(k).getrandbits(256):064x}" for k in range(1024)]
    out: dict[str, Any] = {}
    with psycopg.connect(common.plain_url(url), autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
        # no foreign-key triggers while loading (a lookup in the sessions' key per row): the
        # rows are consistent by construction (needs a superuser, as the bench's `postgres`)
        cur.execute("SET session_replication_role = replica")
        cur.execute("SELECT * FROM tickwork_sessions WHERE id = %s", (template_id,))
        names = [d.name for d in cur.description or ()]
        with cur.copy(
            "COPY (SELECT * FROM tickwork_sessions WHERE id = %s) TO STDOUT", (template_id,)
        ) as copy:
            template = b"".join(bytes(b) for b in copy).decode().rstrip("\n").split("\t")
        at = {name: k for k, name in enumerate(names)}

        def timed(
            name: str, copier: Copier, write: Callable[[Callable[[list[str]], None]], None]
        ) -> None:
            started = time.perf_counter()
            with copier.open() as put:
                write(put)
            spent = time.perf_counter() - started
            out[name] = {
                "rows": copier.rows,
                "s": round(spent, 1),
                "rows_per_s": round(copier.rows / spent) if spent else None,
            }
            print(f"  {name}: {copier.rows:,} rows in {spent:.1f} s", flush=True)

        # sessions and dead letters are written in the order they were made, as they are
        # in production (their lists read them newest first); the other tables in id order
        by_time = sorted(range(len(plan.ids)), key=plan.created.__getitem__)

        def sessions(put: Callable[[list[str]], None]) -> None:
            lines = []
            for i in by_time:
                sid = plan.ids[i]
                status, start, n = plan.status[i], plan.created[i], plan.steps[i]
                row = list(template)
                row[at["id"]] = sid
                row[at["status"]] = status
                row[at["version"]] = str(2 * n + 1)
                row[at["created_at"]] = stamp(start)
                row[at["updated_at"]] = stamp(min(now - 1, start + 6 * n + 3))
                row[at["model"]] = MODELS[i % 3]
                row[at["input"]] = json.dumps({"task": thoughts[i & 255][:120]})
                row[at["step"]] = str(n)
                row[at["tokens"]] = str(1500 * n)
                row[at["cost_usd"]] = f"{0.002 * n:.4f}"
                row[at["submitted_by"]] = PEOPLE[i % 20]
                row[at["lease_owner"]] = row[at["lease_expires_at"]] = "\\N"
                row[at["awaiting"]] = "[]"
                if status == "failed":
                    code, message = CODES[i % len(CODES)]
                    row[at["error_code"]] = code
                    row[at["error_message"]] = message.format(h=sid[:12], n=n)
                elif status == "completed":
                    row[at["final_answer"]] = finals[i & 255]
                elif status == "waiting_approval":
                    row[at["awaiting"]] = f'["s{n}c0"]'
                elif status == "executing":
                    row[at["lease_owner"]] = f"celery@host{i % 8}:{1000 + i % 97}"
                    row[at["lease_expires_at"]] = stamp(
                        now - 600 if i in plan.expired else now + 4 * 3600
                    )
                lines.append("\t".join(row) + "\n")
                if len(lines) >= 5000:
                    put(lines)
                    lines = []
            put(lines)

        def steps(put: Callable[[list[str]], None]) -> None:
            lines: list[str] = []
            for i, sid in enumerate(plan.ids):
                start, model = plan.created[i], MODELS[i % 3]
                day, sod = divmod(start, DAY)
                date = time.strftime("%Y-%m-%d", time.gmtime(day * DAY))
                for k in range(1, plan.steps[i] + 1):
                    s = min(sod + 6 * k, DAY - 1)
                    lines.append(
                        f"{sid}\t{k}\t{thoughts[(i * 31 + k) & 255]}\t{900 + k * 40}\t{60 + k}\t"
                        f"0.002\t{700 + (i + k) % 900}.5\t{hexes[(i * 7 + k) & 1023]}\t{model}\t"
                        f"{sid}\t{date} {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}+00\n"
                    )
                if len(lines) >= 20_000:
                    put(lines)
                    lines = []
            put(lines)

        def calls(put: Callable[[list[str]], None]) -> None:
            lines = []
            for i, sid in enumerate(plan.ids):
                n, status = plan.steps[i], plan.status[i]
                tool = TOOLS[i % len(TOOLS)]
                args = f'{{"path": "src/module_{i % 997}.py", "line": {n}}}'
                state = {
                    "waiting_approval": "awaiting_approval",
                    "executing": "started",
                    "ready": "done",
                }.get(status, "done")
                started = "\\N" if state == "awaiting_approval" else stamp(plan.created[i] + 6 * n)
                reason = "writes files" if status == "waiting_approval" else "\\N"
                lines.append(
                    f"{sid}\ts{n}c0\t{n}\t0\t{tool}\t{args}\t{args}\t{hexes[i & 1023]}\t{state}\t"
                    f"{'t' if status == 'waiting_approval' else 'f'}\t{started}\t\\N\t{reason}\n"
                )
                if len(lines) >= 10_000:
                    put(lines)
                    lines = []
            put(lines)

        def observations(put: Callable[[list[str]], None]) -> None:
            lines = []
            for i, sid in enumerate(plan.ids):
                if plan.status[i] in ("waiting_approval", "executing"):
                    continue
                n = plan.steps[i]
                lines.append(
                    f"{sid}\ts{n}c0\t{contents[i & 255]}\t{'t' if i % 17 == 0 else 'f'}\t"
                    f"{stamp(plan.created[i] + 6 * n + 1)}\t{(i % 5000) / 10}\n"
                )
                if len(lines) >= 10_000:
                    put(lines)
                    lines = []
            put(lines)

        def events(put: Callable[[list[str]], None]) -> None:
            lines = []
            for i, sid in enumerate(plan.ids):
                n, status, start = plan.steps[i], plan.status[i], plan.created[i]
                v = 2 * n + 1
                made = [
                    (0, "created", start, '{"kind": "bench"}'),
                    (2 * n - 1, "step_recorded", start + 6 * n, f'{{"step": {n}, "calls": 1}}'),
                ]
                if status == "waiting_approval":
                    made.append(
                        (
                            2 * n - 1,
                            "approval_requested",
                            start + 6 * n,
                            f'{{"call_ids": ["s{n}c0"]}}',
                        )
                    )
                elif status != "ready":
                    made.append(
                        (
                            2 * n,
                            "tool_started",
                            start + 6 * n,
                            f'{{"call_id": "s{n}c0", "name": "{TOOLS[i % 6]}", "rerun": false}}',
                        )
                    )
                    if status != "executing":
                        made.append(
                            (
                                2 * n,
                                "tool_finished",
                                start + 6 * n + 1,
                                f'{{"call_id": "s{n}c0", "is_error": false, "duration_ms": 12.5}}',
                            )
                        )
                if status in ("completed", "failed", "cancelled"):
                    made.append((v, status, start + 6 * n + 3, f'{{"step": {n}}}'))
                if status == "failed":
                    made.append(
                        (v, "dead_lettered", start + 6 * n + 3, f'{{"code": "{CODES[i % 6][0]}"}}')
                    )
                lines.extend(
                    f"{sid}\t{ver}\t{kind}\t{stamp(min(t, now - 1))}\t{data}\n"
                    for ver, kind, t, data in made
                )
                if len(lines) >= 20_000:
                    put(lines)
                    lines = []
            put(lines)

        def outbox(put: Callable[[list[str]], None]) -> None:
            lines = []
            ready = 0
            for i, sid in enumerate(plan.ids):
                if plan.status[i] != "ready":
                    continue
                ready += 1
                v = 2 * plan.steps[i] + 1
                if ready % 200 == 1:  # its message may be lost: the relay republishes it
                    due, published = stamp(now - 7200), stamp(now - 7200)
                elif ready % 200 == 2:  # a delayed tick (model backoff), due tomorrow
                    due, published = stamp(now + DAY), "\\N"
                else:  # queued in the broker: published now, due a little later (a tick
                    # older than relay_after_s would be republished at every pass, as for a
                    # backed-up queue; the run lasts longer than that)
                    due, published = stamp(now + 6 * 3600), stamp(now)
                lines.append(f"{sid}\t{v}\t{due}\t0\t{published}\n")
            put(lines)

        def dead_letters(put: Callable[[list[str]], None]) -> None:
            from tickwork.store.dead_letters import error_signature

            lines = []
            failed = 0
            for i in by_time:
                if plan.status[i] != "failed":
                    continue
                sid = plan.ids[i]
                failed += 1
                n, start = plan.steps[i], plan.created[i]
                code, message = CODES[i % len(CODES)]
                message = message.format(h=sid[:12], n=n)
                when = stamp(min(now - 1, start + 6 * n + 3))
                snapshot = json.dumps(
                    {
                        "schema": 3,
                        "head": {"id": sid, "step": n},
                        "steps": [
                            {"step": k, "thought": thoughts[k & 255]}
                            for k in range(max(1, n - 8), n + 1)
                        ],
                    }
                )
                if failed % 5 < 2:  # 40% resolved
                    resolved = when
                    resolution = json.dumps(
                        {
                            "state": "resolved",
                            "by": PEOPLE[i % 20],
                            "at": when,
                            "reason": "fixed the tool",
                        }
                    )
                else:
                    resolved = resolution = "\\N"
                lines.append(
                    f"{sid}\t{code}\t{message}\tbench\t{MODELS[i % 3]}\t{TOOLS[i % 6]}\t"
                    f"{error_signature(code, message)}\t{when}\t3\t{snapshot}\t"
                    f"{resolved}\t{resolution}\n"
                )
                if len(lines) >= 5000:
                    put(lines)
                    lines = []
            put(lines)

        started = time.perf_counter()
        timed("tickwork_sessions", Copier(cur, "tickwork_sessions", names), sessions)
        timed(
            "tickwork_steps",
            Copier(
                cur,
                "tickwork_steps",
                [
                    "session_id",
                    "step",
                    "thought",
                    "prompt_tokens",
                    "completion_tokens",
                    "cost_usd",
                    "latency_ms",
                    "fingerprint",
                    "model",
                    "trace_id",
                    "at",
                ],
            ),
            steps,
        )
        timed(
            "tickwork_calls",
            Copier(
                cur,
                "tickwork_calls",
                [
                    "session_id",
                    "call_id",
                    "step",
                    "index",
                    "name",
                    "arguments",
                    "raw_arguments",
                    "fingerprint",
                    "state",
                    "needs_approval",
                    "started_at",
                    "provider_call_id",
                    "approval_reason",
                ],
            ),
            calls,
        )
        timed(
            "tickwork_observations",
            Copier(
                cur,
                "tickwork_observations",
                ["session_id", "call_id", "content", "is_error", "at", "duration_ms"],
            ),
            observations,
        )
        timed(
            "tickwork_events",
            Copier(cur, "tickwork_events", ["session_id", "version", "kind", "at", "data"]),
            events,
        )
        timed(
            "tickwork_outbox",
            Copier(
                cur,
                "tickwork_outbox",
                ["session_id", "version", "due_at", "republished", "published_at"],
            ),
            outbox,
        )
        timed(
            "tickwork_dead_letters",
            Copier(
                cur,
                "tickwork_dead_letters",
                [
                    "session_id",
                    "code",
                    "message",
                    "kind",
                    "model",
                    "last_tool",
                    "error_signature",
                    "at",
                    "schema_version",
                    "snapshot",
                    "resolved_at",
                    "resolution",
                ],
            ),
            dead_letters,
        )
        copied = time.perf_counter() - started
        rows = sum(t["rows"] for t in out.values())
        out["copy_s"] = round(copied, 1)
        out["copy_rows_per_s"] = round(rows / copied)
        out["tickwork_dead_letter_counts"] = count_dead_letters(url)
        started = time.perf_counter()
        cur.execute("VACUUM (ANALYZE)")
        out["vacuum_analyze_s"] = round(time.perf_counter() - started, 1)
        cur.execute("SELECT pg_database_size(current_database())")
        out["database_bytes"] = cur.fetchone()[0]  # type: ignore[index]
        out["rows"] = rows
    return out


def count_dead_letters(url: str) -> dict[str, Any]:
    """The daily dead-letter counts of the copied dead letters, as the migration's backfill
    makes them (the COPY bypasses `record`, which keeps them)."""
    from tickwork.store.dead_letter_counts import rebuild
    from tickwork.store.engine import make_engine

    engine = make_engine(url)
    try:
        started = time.perf_counter()
        with engine.begin() as conn:
            written = rebuild(conn)
        spent = time.perf_counter() - started
    finally:
        engine.dispose()
    print(f"  tickwork_dead_letter_counts: {written:,} rows in {spent:.1f} s", flush=True)
    return {"rows": written, "s": round(spent, 1)}


# ---------------------------------------------------------------------------------------
# The store calls this benchmark makes: the one place to update when the store's API moves
# (claim/save behind a Store port, relay and dead-letter queries as store methods).
# ---------------------------------------------------------------------------------------


class Target:
    """One database under measurement: the client, an in-process worker runtime whose
    claim, start_call and save are timed, and the HTTP API in this process."""

    def __init__(self, url: str, tag: str, folder: Path) -> None:
        from fastapi.testclient import TestClient

        from tickwork.api.app import make_api
        from tickwork.api.settings import ApiSettings

        self.url = url
        self.settings = common.settings(url, tag)
        self.tw = common.client(self.settings)
        self.rt, self.published = common.in_process_runtime(self.settings)
        self.engine = self.tw.store.engine
        self.model = kinds.write_script(folder, f"year-{tag}", kinds.replies(5))
        self.times: dict[str, list[float]] = defaultdict(list)
        for name in ("claim", "start_call", "save"):
            self._time(self.rt.store, name)
        token = secrets.token_urlsafe()
        api = ApiSettings(api_tokens={token: {"name": "bench", "roles": ["operator"]}})  # type: ignore[dict-item]
        self.api = TestClient(make_api(self.settings, api))
        self.api.headers["Authorization"] = f"Bearer {token}"

    def _time(self, store: Any, name: str) -> None:
        fn = getattr(store, name)

        def timed(*args: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.times[name].append(time.perf_counter() - started)

        setattr(store, name, timed)

    def template(self) -> str:
        """A real session's id, stored but never run: its row is the generator's template."""
        return common.create(self.tw, self.model)

    def new_session(self) -> str:
        """A session of 5 tool steps, stored with its first tick not yet run."""
        return common.create(self.tw, self.model)

    def run_session(self, session_id: str | None = None) -> int:
        """Run a session's 11 ticks in this process (a new one unless given)."""
        return common.drive(self.rt, self.published, session_id or self.new_session())

    def relay_scan(self) -> None:
        from tickwork.store import relay

        now = datetime.now(UTC)
        relay.due_ticks(self.engine, now=now, older_than_s=self.settings.relay_after_s)
        relay.expired_leases(self.engine, now=now)

    def ls_waiting(self) -> None:  # `tickwork ls --status waiting_approval`
        self.tw.store.list_sessions(status=["waiting_approval"], limit=50)

    def dlq_ls(self) -> None:  # `tickwork dlq ls`
        from tickwork.store.dead_letters import list_dead_letters

        list_dead_letters(self.engine, limit=100)

    def dlq_stats(self) -> None:  # `tickwork dlq stats`: every grouping
        from tickwork.store.dead_letters import GROUPS, stats

        for group in GROUPS:
            stats(self.engine, by=group)

    def _get(self, path: str) -> None:
        response = self.api.get(path)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:300]}")

    def api_sessions(self) -> None:
        self._get("/api/v1/sessions")

    def api_sessions_waiting(self) -> None:
        self._get("/api/v1/sessions?status=waiting_approval")

    def api_dead_letters(self) -> None:
        self._get("/api/v1/dead-letters")

    def api_dead_letter_stats(self) -> None:
        self._get("/api/v1/dead-letters/stats")

    def close(self) -> None:
        self.api.close()
        self.tw.close()
        self.rt.store.engine.dispose()


#: the operations measured, by name: a method of Target each
OPERATIONS = (
    "relay_scan",
    "ls_waiting",
    "dlq_ls",
    "dlq_stats",
    "api_sessions",
    "api_sessions_waiting",
    "api_dead_letters",
    "api_dead_letter_stats",
)
TICK_CALLS = ("claim", "start_call", "save")


# ---------------------------------------------------------------------------------------
# Plans: every statement an operation sends, run once more under EXPLAIN ANALYZE
# ---------------------------------------------------------------------------------------


class Explainer:
    """While `catching`, each statement a psycopg cursor executes is first run as
    EXPLAIN (ANALYZE, BUFFERS) in a transaction (or savepoint) rolled back at once."""

    def __init__(self) -> None:
        self.catching: str | None = None
        self.plans: dict[str, dict[str, str]] = defaultdict(dict)
        self._inside = False
        original = psycopg.Cursor.execute
        explainer = self

        def execute(cur: psycopg.Cursor[Any], query: Any, params: Any = None, **kw: Any) -> Any:
            if explainer.catching and not explainer._inside and isinstance(query, str):
                explainer._explain(cur, query, params)
            return original(cur, query, params, **kw)

        psycopg.Cursor.execute = execute  # type: ignore[method-assign]

    def _explain(self, cur: psycopg.Cursor[Any], query: str, params: Any) -> None:
        verb = query.lstrip().split(None, 1)[0].upper()
        found = self.plans[self.catching or ""]
        if verb not in ("SELECT", "WITH", "UPDATE", "INSERT", "DELETE") or query in found:
            return
        self._inside = True
        try:
            conn = cur.connection
            with conn.transaction(force_rollback=True), conn.cursor() as ex:
                ex.execute("EXPLAIN (ANALYZE, BUFFERS) " + query, params)
                found[query] = "\n".join(r[0] for r in ex.fetchall())
        except psycopg.Error as exc:
            found[query] = f"(not explained: {exc})"
        finally:
            self._inside = False


# ---------------------------------------------------------------------------------------


def figures(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values) * 1000, 3),
        "p95_ms": round(common.percentile(values, 95) * 1000, 3),
        "n": len(values),
    }


def measure(empty: Target, full: Target, repeat: int, sessions: int) -> dict[str, Any]:
    """Each operation on both databases, alternately; the tick's calls from whole sessions."""
    times: dict[str, dict[str, list[float]]] = {
        "empty": defaultdict(list),
        "full": defaultdict(list),
    }
    for target in (empty, full):  # warm-up: caches, prepared statements
        target.run_session()
        for name in OPERATIONS:
            getattr(target, name)()
        target.times.clear()
    for _ in range(repeat):
        for name in OPERATIONS:
            for label, target in (("empty", empty), ("full", full)):
                started = time.perf_counter()
                getattr(target, name)()
                times[label][name].append(time.perf_counter() - started)
    for _ in range(sessions):
        empty.run_session()
        full.run_session()
    for label, target in (("empty", empty), ("full", full)):
        for name in TICK_CALLS:
            times[label][name] = target.times[name]
    out: dict[str, Any] = {}
    for name in (*TICK_CALLS, *OPERATIONS):
        e, f = figures(times["empty"][name]), figures(times["full"][name])
        out[name] = {
            "empty": e,
            "full": f,
            "p95_ratio": round(f["p95_ms"] / e["p95_ms"], 2),
            "p50_ratio": round(f["p50_ms"] / e["p50_ms"], 2),
        }
    return out


def explain(explainer: Explainer, target: Target) -> dict[str, dict[str, str]]:
    """The plan of every statement of every operation on `target`, by operation and text."""
    explainer.plans = defaultdict(dict)
    session_id = target.new_session()
    explainer.catching = "tick (claim, start_call, save)"
    target.run_session(session_id)
    for name in OPERATIONS:
        explainer.catching = name
        getattr(target, name)()
    explainer.catching = None
    return explainer.plans


def plan_cost(text: str) -> tuple[float, int]:
    """A plan's execution time (ms) and the shared buffers its top node touched: the
    buffers do not depend on the machine's load, so they compare the two databases fairly."""
    ms = (
        float(re.search(r"Execution Time: ([0-9.]+)", text).group(1))
        if "Execution" in text
        else 0.0
    )
    found = re.search(r"Buffers: shared([^\n]*)", text)
    buffers = sum(int(n) for n in re.findall(r"=(\d+)", found.group(1))) if found else 0
    return ms, buffers


def compare_plans(
    empty: dict[str, dict[str, str]], full: dict[str, dict[str, str]]
) -> list[dict[str, Any]]:
    out = []
    for op, plans in full.items():
        for k, (query, text) in enumerate(plans.items()):
            e_ms, e_buf = plan_cost(empty.get(op, {}).get(query, ""))
            f_ms, f_buf = plan_cost(text)
            out.append(
                {
                    "operation": op,
                    "statement": k + 1,
                    "empty_ms": e_ms,
                    "full_ms": f_ms,
                    "empty_buffers": e_buf,
                    "full_buffers": f_buf,
                    "query": " ".join(query.split())[:90],
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="1: 1,000,000 sessions and ~20M steps; 0.02: 20,000 and ~400k",
    )
    parser.add_argument("--repeat", type=int, default=100, help="runs of each list operation")
    parser.add_argument(
        "--sessions",
        type=int,
        default=12,
        help="sessions of 11 ticks run on each database for claim/save",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep both databases (their URLs are printed)"
    )
    parser.add_argument("--no-plans", action="store_true", help="skip the EXPLAIN output")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-year-"))
    n = max(EMPTY_SESSIONS, round(SESSIONS * args.scale))
    print(f"load before: {common.machine()['load']}", flush=True)
    with (
        common.database("year_empty", keep=args.keep) as empty_url,
        common.database("year_full", keep=args.keep) as full_url,
    ):
        empty = Target(empty_url, "year-empty", folder)
        full = Target(full_url, "year-full", folder)
        now = time.time()
        print(f"near-empty database: {EMPTY_SESSIONS:,} sessions", flush=True)
        fill(empty_url, Plan(EMPTY_SESSIONS, now), empty.template())
        plan = Plan(n, now)
        print(f"full database: {n:,} sessions, {plan.total_steps:,} steps", flush=True)
        full_fill = fill(full_url, plan, full.template())
        del plan
        print(
            f"filled in {full_fill['copy_s']} s ({full_fill['copy_rows_per_s']:,} rows/s), "
            f"VACUUM ANALYZE {full_fill['vacuum_analyze_s']} s, "
            f"{full_fill['database_bytes'] / 2**30:.2f} GiB",
            flush=True,
        )
        measured = measure(empty, full, args.repeat, args.sessions)
        print(f"{'operation':<24}{'empty p50':>11}{'p95':>9}{'full p50':>11}{'p95':>9}", end="")
        print(f"{'p95 ratio':>11}")
        for name, m in measured.items():
            flag = "" if m["p95_ratio"] <= TARGET else "  > 1.2"
            print(
                f"{name:<24}{m['empty']['p50_ms']:>11.2f}{m['empty']['p95_ms']:>9.2f}"
                f"{m['full']['p50_ms']:>11.2f}{m['full']['p95_ms']:>9.2f}"
                f"{m['p95_ratio']:>11.2f}{flag}",
                flush=True,
            )
        explainer = Explainer()
        empty_plans, full_plans = explain(explainer, empty), explain(explainer, full)
        compared = compare_plans(empty_plans, full_plans)
        print("\nEXPLAIN ANALYZE, near-empty vs full: execution ms and shared buffers touched")
        for c in compared:
            print(
                f"{c['operation'][:22]:<23}{c['statement']:>2} {c['empty_ms']:>8.3f} ms "
                f"{c['empty_buffers']:>6} buf | {c['full_ms']:>8.3f} ms {c['full_buffers']:>6} buf"
                f"  {c['query'][:60]}"
            )
        if not args.no_plans:
            for op, plans in full_plans.items():
                for query, text in plans.items():
                    print(f"\n--- plan of {op} (full):\n{' '.join(query.split())[:600]}\n{text}")
        sizes = common.table_sizes(full.engine)
        if args.keep:
            print(f"kept: {empty_url}\n      {full_url}")
        empty.close()
        full.close()
    common.emit(
        "year_of_data",
        {
            "scale": args.scale,
            "sessions": n,
            "fill": full_fill,
            "table_bytes": sizes,
            "operations": measured,
            "plans": compared,
            "load": common.machine()["load"],
        },
    )


if __name__ == "__main__":
    main()
