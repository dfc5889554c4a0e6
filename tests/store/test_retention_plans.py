"""Retention's queries on Postgres at a realistic size use their indexes: no sequential scan
of a big table (30,000 sessions with steps, calls, events and dead letters; 20,000 archived)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Connection, Engine, select, text
from tickwork.store import make_engine
from tickwork.store.archived import ARCHIVED
from tickwork.store.migrate import upgrade
from tickwork.store.retention import (
    Policy,
    finished_queries,
    pending_query,
    prune_statements,
)
from tickwork.store.schema import archived

from tests.services import postgres_database

SESSIONS = 30_000
NOW = datetime(2026, 12, 1, tzinfo=UTC)
#: the tables a plan must never scan whole
BIG = (
    "tickwork_sessions",
    "tickwork_steps",
    "tickwork_calls",
    "tickwork_observations",
    "tickwork_events",
    "tickwork_dead_letters",
    "tickwork_archived",
    "tickwork_file_changes",
    "tickwork_outbox",
    "tickwork_decisions",
)

FILL = """
INSERT INTO tickwork_sessions (id, kind, status, version, created_at, updated_at, model, budgets,
    input, config, step, tokens, cost_usd, loop_interventions, model_attempts, cancel_requested,
    error_code, error_message, result, awaiting)
SELECT 's' || n, 'repair',
    (ARRAY['completed','completed','completed','completed','completed','completed','failed',
           'failed','cancelled','ready','executing','waiting_approval'])[1 + n % 12],
    4, :now - make_interval(mins => n), :now - make_interval(mins => n), 'gpt-test', '{}',
    '{}', '{}', 2, 100, 0.01, 0, 0, false, NULL, '', '{}', '[]'
FROM generate_series(1, :sessions) AS n;
INSERT INTO tickwork_steps (session_id, step, thought, prompt_tokens, completion_tokens, cost_usd,
    latency_ms, fingerprint, model, trace_id, at)
SELECT s.id, k, 'thinking', 10, 10, 0.001, 5, md5(s.id || k), 'gpt-test', 't', s.updated_at
FROM tickwork_sessions s, generate_series(1, 2) AS k;
INSERT INTO tickwork_calls (session_id, call_id, step, index, name, arguments, raw_arguments,
    fingerprint, state, needs_approval)
SELECT s.id, 's' || k || 'c0', k, 0, 'read_file', '{}', '{}', md5(s.id || k), 'done', false
FROM tickwork_sessions s, generate_series(1, 2) AS k;
INSERT INTO tickwork_observations (session_id, call_id, content, is_error, at, duration_ms)
SELECT s.id, 's' || k || 'c0', 'output', false, s.updated_at, 1
FROM tickwork_sessions s, generate_series(1, 2) AS k;
INSERT INTO tickwork_events (session_id, version, kind, at, data)
SELECT s.id, k, 'step_recorded', s.updated_at, '{}'
FROM tickwork_sessions s, generate_series(1, 5) AS k;
INSERT INTO tickwork_outbox (session_id, version, due_at, republished, published_at)
SELECT s.id, k, s.updated_at, 0, s.updated_at
FROM tickwork_sessions s, generate_series(1, 2) AS k;
INSERT INTO tickwork_file_changes (session_id, version, step, call_id, changes, state)
SELECT s.id, k, k, 's' || k || 'c0', '{}', md5(s.id || k)
FROM tickwork_sessions s, generate_series(1, 2) AS k;
INSERT INTO tickwork_decisions (session_id, call_id, attempt, kind, approver, at, fingerprint,
    comment, arguments, feedback, output)
SELECT s.id, 's1c0', 1, 'approve', 'alice', s.updated_at, md5(s.id), '', NULL, '', ''
FROM tickwork_sessions s;
-- a dead letter's snapshot is a whole session: kilobytes (a small one here, kept in the row)
INSERT INTO tickwork_dead_letters (session_id, code, message, kind, model, error_signature, at,
    schema_version, snapshot, resolved_at, resolution)
SELECT s.id, 'LOOP', 'looped', 'repair', 'gpt-test', 'LOOP: looped', s.updated_at, 2,
    jsonb_build_object('session', repeat('x', 1500)),
    CASE WHEN s.id LIKE '%2' THEN s.updated_at END, NULL
FROM tickwork_sessions s WHERE s.status = 'failed';
INSERT INTO tickwork_archived (session_id, location, state, claimed_at, archived_at, status, kind,
    parent_id, fork_step, created_at, finished_at)
SELECT 'a' || n, 'day=2026-10-01/' || md5((n / 50)::text),
    CASE WHEN n % 1000 = 0 THEN 'pending' ELSE 'archived' END,
    :now - make_interval(days => 40), :now - make_interval(days => 40 - n % 40), 'completed',
    'repair', CASE WHEN n % 10 = 0 THEN 'a' || (n - 1) END, NULL,
    :now - make_interval(days => 41), :now - make_interval(days => 40)
FROM generate_series(1, 20000) AS n;
"""


@pytest.fixture(scope="module")
def big() -> Iterator[Engine]:
    with postgres_database() as url:
        upgrade(url)
        engine = make_engine(url)
        with engine.begin() as conn:
            for statement in FILL.split(";"):
                if statement.strip():
                    conn.execute(text(statement), {"now": NOW, "sessions": SESSIONS})
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE"))
        yield engine
        engine.dispose()


def plan(conn: Connection, statement: object) -> str:
    compiled = statement.compile(  # type: ignore[attr-defined]
        dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
    )
    found = conn.exec_driver_sql("EXPLAIN " + str(compiled), compiled.params).scalars()
    return "\n".join(found)


def scans_whole(found: str) -> list[str]:
    return [t for t in BIG if re.search(rf"Seq Scan on {t}\b", found)]


def test_the_scans_for_sessions_due_use_indexes(big: Engine) -> None:
    policy = Policy(completed_s=86_400, cancelled_s=86_400, failed_s=86_400)
    with big.connect() as conn:
        for query in finished_queries(policy, NOW):
            for locked in (query.limit(50), query.limit(50).with_for_update(skip_locked=True)):
                found = plan(conn, locked)
                assert not scans_whole(found), found
                assert "Index" in found, found
        found = plan(conn, pending_query(NOW, 10))
        assert not scans_whole(found), found


def test_the_deletes_of_a_batch_use_indexes(big: Engine) -> None:
    with big.connect() as conn:
        ids = [f"s{n}" for n in range(1, 600, 12)]  # 50 completed sessions
        for statement in prune_statements(ids, now=NOW):
            found = plan(conn, statement)
            assert not scans_whole(found), found


def test_reading_an_archived_session_and_its_lineage_use_indexes(big: Engine) -> None:
    with big.connect() as conn:
        for query in (
            select(archived).where(archived.c.session_id == "a77", archived.c.state == ARCHIVED),
            select(archived.c.session_id).where(archived.c.parent_id == "a9"),
            select(archived.c.session_id).where(archived.c.archived_at >= NOW),
        ):
            found = plan(conn, query)
            assert not scans_whole(found), found
