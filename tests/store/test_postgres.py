"""What the Postgres statements of the tick (store/postgres.py) add to the contract suite."""

from __future__ import annotations

import gc
import sys

import psycopg
import pytest
from sqlalchemy import event
from tickwork.fsm.errors import StoreUnavailable
from tickwork.fsm.values import Head
from tickwork.store import open_store
from tickwork.store.engine import make_engine, normalize_url
from tickwork.store.reads import read_history

from tests.conftest import Clock
from tests.store.conftest import (
    LEASE_S,
    execute_change,
    new_session,
    reply,
    run_step,
    think_change,
)
from tickwork.testing import until


def test_a_connection_the_server_dropped_is_store_unavailable_then_reconnects(
    postgres_url: str, clock: Clock
) -> None:
    """The worker treats StoreUnavailable as "the database is away" (the relay runs the
    tick again); after a restart of Postgres every pooled connection is dead, and the next
    tick must get a working one, not the next dead one."""
    engine = make_engine(postgres_url, pool_size=3, max_overflow=0)
    store = open_store(engine)
    try:
        store.create(new_session("dropped-1", now=clock()), now=clock())
        with engine.connect() as a, engine.connect() as b, engine.connect() as c:
            backends = [
                conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() for conn in (a, b, c)
            ]
        admin = normalize_url(postgres_url).replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(admin, autocommit=True) as killer:
            for backend in backends:
                killer.execute("SELECT pg_terminate_backend(%s)", (backend,))

        with pytest.raises(StoreUnavailable, match="cannot use the database postgresql"):
            store.claim("dropped-1", 0, owner="w1", now=clock(), lease_s=LEASE_S)

        claimed = store.claim("dropped-1", 0, owner="w1", now=clock(), lease_s=LEASE_S)
        assert claimed is not None and claimed.head.id == "dropped-1"
    finally:
        engine.dispose()


def test_a_connection_in_use_while_another_is_found_dropped_is_closed_with_the_store(
    postgres_url: str, clock: Clock
) -> None:
    """A tick that finds its connection dropped has the pool's others connected again, as
    SQLAlchemy does; a connection another tick had in use meanwhile goes back to the pool
    and is closed with it. The pool was thrown away instead: that connection went back to
    the pool thrown away, open until the garbage collector found it (psycopg's "connection
    deleted while still open"), holding its server process meanwhile."""
    engine = make_engine(postgres_url, pool_size=2, max_overflow=0)
    store = open_store(engine)
    admin = normalize_url(postgres_url).replace("postgresql+psycopg", "postgresql")
    try:
        store.create(new_session("dropped-2", now=clock()), now=clock())
        with engine.connect() as busy:  # another tick's, in use throughout
            busy_backend = busy.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with engine.connect() as idle:
                dropped = idle.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with psycopg.connect(admin, autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", (dropped,))
            with pytest.raises(StoreUnavailable):
                store.claim("dropped-2", 0, owner="w1", now=clock(), lease_s=LEASE_S)
            busy.exec_driver_sql("SELECT 1")  # still working: its tick goes on
        claimed = store.claim("dropped-2", 0, owner="w1", now=clock(), lease_s=LEASE_S)
        assert claimed is not None
    finally:
        store.close()
    closed(admin, busy_backend, what="the busy connection closed with the store")


def closed(admin: str, backend: object, *, what: str) -> None:
    """Wait until the server process `backend` is gone: its connection was closed."""
    with psycopg.connect(admin, autocommit=True) as watcher:
        alive = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
        until(lambda: watcher.execute(alive, (backend,)).fetchone() is None, timeout=10, what=what)


def test_a_connection_in_use_while_the_store_closes_is_closed_once_given_back(
    postgres_url: str,
) -> None:
    """A thread still at work when its worker's store is closed (one that outlived its
    stop) gives its connection back afterwards: closed then, not left open (its server
    process too) until the garbage collector found it, with psycopg's "connection ...
    deleted while still open" at some later point. The store, used again, pools again."""
    engine = make_engine(postgres_url)
    store = open_store(engine)
    admin = normalize_url(postgres_url).replace("postgresql+psycopg", "postgresql")
    try:
        with engine.connect() as late:
            backend = late.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            store.close()
            late.exec_driver_sql("SELECT 1")  # its thread goes on until it gives it back
        closed(admin, backend, what="the late connection closed")
        pids = []
        for _ in range(2):
            with engine.connect() as again:
                pids.append(again.exec_driver_sql("SELECT pg_backend_pid()").scalar())
        assert pids[0] == pids[1] != backend, "taken after the close: pooled as before"
    finally:
        store.close()


def test_an_engine_collected_unclosed_closes_its_pooled_connections(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store nobody closed (or used again after its close, by a thread that outlived its
    stop) left its pool's idle connections to the garbage collector, open: psycopg's
    "connection ... deleted while still open", which failed whichever test the collector
    happened to run in. Its pool is closed as the engine is collected."""
    said: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: said.append(str(u.exc_value)))
    engine = make_engine(postgres_url)
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    engine.dispose()  # the store's close ...
    with engine.connect() as conn:  # ... and a late pass, which pools again
        conn.exec_driver_sql("SELECT 1")
    del engine, conn
    gc.collect()
    assert not [s for s in said if "deleted while still open" in s], said


def test_a_column_added_by_a_migration_does_not_break_prepared_ticks(
    postgres_url: str, clock: Clock
) -> None:
    """psycopg prepares a statement run five times on a connection; had the tick's
    statements a `RETURNING *`, they would fail with "cached plan must not change result
    type" from the moment a migration adds a column until the worker restarts."""
    engine = make_engine(postgres_url, pool_size=1, max_overflow=0)
    store = open_store(engine)
    admin = normalize_url(postgres_url).replace("postgresql+psycopg", "postgresql")

    def ticks(head: Head, n: int) -> Head:
        claimed = store.claim(head.id, head.version, owner="w1", now=clock(), lease_s=LEASE_S)
        assert claimed is not None
        proposal = reply(("read_file", {"path": f"p{n}"}))
        change = think_change(claimed, proposal, now=clock())
        head = store.save(change, version=head.version, owner="w1", now=clock())
        claimed = store.claim(head.id, head.version, owner="w1", now=clock(), lease_s=LEASE_S)
        assert claimed is not None
        change = execute_change(store, claimed, now=clock())
        return store.save(change, version=head.version, owner="w1", now=clock())

    try:
        head = store.create(new_session("migrated-1", now=clock()), now=clock())
        for n in range(6):  # no other statement in between: they stay prepared
            head = ticks(head, n)
        with psycopg.connect(admin, autocommit=True) as migration:
            migration.execute("ALTER TABLE tickwork_sessions ADD COLUMN probe integer")
        try:
            assert ticks(head, 6).step == 7
        finally:
            with psycopg.connect(admin, autocommit=True) as migration:
                migration.execute("ALTER TABLE tickwork_sessions DROP COLUMN probe")
    finally:
        engine.dispose()


def test_the_tick_statements_stay_short_enough_for_psycopgs_parse_cache() -> None:
    """psycopg parses a statement's `%(name)s` placeholders again at every execution once
    its text passes MAX_CACHED_STATEMENT_LENGTH (4 KB): a quarter of a millisecond of
    Python a save. A column added by a migration must keep SAVE under it (or shorten it)."""
    from psycopg import _queries
    from tickwork.store import postgres

    limit = getattr(_queries, "MAX_CACHED_STATEMENT_LENGTH", 4096)
    for name in ("CLAIM", "START", "SAVE"):
        assert len(getattr(postgres, name).encode()) <= limit, name


def test_the_tick_statements_stay_prepared_across_reads(postgres_url: str, clock: Clock) -> None:
    """psycopg forgets every statement it prepared on a connection at each rollback, and
    SQLAlchemy ends every read with one: the tick's statements were parsed and planned again
    at nearly every tick, a third of their time on the server (store/engine.py)."""
    engine = make_engine(postgres_url, pool_size=1, max_overflow=0)
    store = open_store(engine)
    try:
        store.create(new_session("prepared-1", now=clock()), now=clock())
        for n in range(20):  # 40 claims and 40 saves
            run_step(store, "prepared-1", n, now=clock())
            assert store.get("prepared-1").step == n + 1  # a read: ends with a rollback
        with engine.connect() as conn:
            runs = dict(
                conn.exec_driver_sql(
                    "SELECT split_part(statement, ' ', 2), sum(generic_plans + custom_plans)"
                    " FROM pg_prepared_statements GROUP BY 1"
                ).all()
            )
    finally:
        engine.dispose()
    # CLAIM's first name is `claimed`, SAVE's `moved`, START's `started`, HISTORY_READ's
    # `latest`: prepared at their first run (each variant of their parameters' types), and
    # nothing else (a statement of Core's is planned for its parameters at each run)
    assert runs.get("claimed", 0) >= 35, runs
    assert runs.get("moved", 0) >= 35, runs
    assert set(runs) <= {"claimed", "moved", "started", "latest"}, runs


def test_a_think_that_missed_the_transcripts_reads_in_one_statement(
    postgres_url: str, clock: Clock
) -> None:
    """With several workers most THINKs find no transcript of their session in their
    process: the context's start and the steps, calls and observations after it come in
    one statement after the claim (five through Core), the same as Core reads them."""
    engine = make_engine(postgres_url, pool_size=2, max_overflow=0)
    try:
        store = open_store(engine)
        store.create(new_session("missed-1", now=clock()), now=clock())
        for n in range(3):
            run_step(store, "missed-1", n, now=clock())
        statements: list[str] = []

        def count(*args: object) -> None:
            statements.append(str(args[2]))

        event.listen(engine, "before_cursor_execute", count)
        try:
            cold = open_store(engine)
            missed = cold.claim("missed-1", 6, owner="w2", now=clock(), lease_s=LEASE_S)
        finally:
            event.remove(engine, "before_cursor_execute", count)
        assert missed is not None
        assert len(statements) == 2, statements
        with engine.connect() as conn:
            assert (missed.steps, missed.observations) == read_history(conn, "missed-1")
    finally:
        engine.dispose()
