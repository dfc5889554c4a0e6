"""Database failures at the store's edge (store/edge.py): what leaves the store is one of
tickwork's errors, never SQLAlchemy's or psycopg's, on a real Postgres that goes away and on
SQLite files that are locked, missing their schema or cannot be opened."""

from __future__ import annotations

import inspect
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from sqlalchemy import exc as sa
from tickwork.fsm.errors import (
    SchemaMissing,
    StoreBusy,
    StoreConflict,
    StoreError,
    StoreUnavailable,
    UnstorableValue,
)
from tickwork.store import CoreStore, PostgresStore, Store, make_engine, open_store, port
from tickwork.store.artifacts import DatabaseArtifacts
from tickwork.store.deliveries import Cards
from tickwork.store.edge import translate
from tickwork.store.environments import Environments
from tickwork.store.lifecycle import Retention
from tickwork.store.migrate import current, upgrade
from tickwork.store.retention import Policy

from tests.conftest import Clock
from tests.proxy import Proxy
from tests.store.conftest import LEASE_S, new_session

#: a database nothing listens for
DEAD_DB = "postgresql+psycopg://tick:db-secret-pw@127.0.0.1:1/tickwork"


def every_concern(clock: Clock, session_id: str) -> dict[str, Callable[[Store], Any]]:
    """One call of each sub-port, the properties' objects and a generator's rows included."""
    return {
        "get": lambda s: s.get(session_id),
        "claim": lambda s: s.claim(session_id, 9, owner="w1", now=clock(), lease_s=LEASE_S),
        "list_sessions": lambda s: s.list_sessions(),
        "due_ticks": lambda s: s.due_ticks(now=clock(), older_than_s=3600),
        "dead_letters": lambda s: s.dead_letters(),
        "dead_letter_rows": lambda s: list(s.dead_letter_rows()),
        "file_changes": lambda s: s.file_changes(session_id),
        "artifacts": lambda s: list(s.artifacts("").hashes()),
        "retention": lambda s: s.retention.eligible(Policy(completed_s=60), now=clock()),
        "cards": lambda s: s.cards.state(session_id, 0),
        "environments": lambda s: s.environments.get("key"),
        "gauges": lambda s: s.gauges(now=clock()),
        "revisions": lambda s: s.revisions(),
    }


@pytest.mark.parametrize("core", [False, True], ids=["postgres", "postgres-core"])
def test_a_postgres_that_goes_away_is_store_unavailable_for_every_concern(
    postgres_url: str, clock: Clock, core: bool
) -> None:
    session_id = f"edge-{'core' if core else 'pg'}"
    proxy = Proxy("127.0.0.1", urlsplit(postgres_url).port or 5432)
    engine = make_engine(proxy.url_for(postgres_url), pool_size=2, max_overflow=0)
    store = open_store(engine, core=core)
    try:
        store.create(new_session(session_id, now=clock()), now=clock())
        for call in every_concern(clock, session_id).values():
            call(store)  # each works while Postgres answers
        proxy.close()  # every connection reset, new ones refused: the server is gone
        for name, call in every_concern(clock, session_id).items():
            with pytest.raises(StoreUnavailable) as raised:
                call(store)
            message = raised.value.message
            assert message.startswith("cannot use the database postgresql"), (name, message)
            assert "TICKWORK_DATABASE_URL" in message, name
    finally:
        proxy.close()
        engine.dispose()


def test_a_postgres_that_never_answers_is_store_unavailable_without_its_password() -> None:
    store = open_store(DEAD_DB)
    try:
        with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1.*port 1") as raised:
            store.get("any")
        assert "db-secret-pw" not in raised.value.message
        assert raised.value.__cause__ is not None  # the driver's error, for the log
    finally:
        store.close()
    with pytest.raises(StoreUnavailable, match="cannot use the database"):
        upgrade(DEAD_DB)
    with pytest.raises(StoreUnavailable, match="cannot use the database"):
        current(DEAD_DB)


def test_a_locked_sqlite_database_is_store_unavailable(sqlite_url: str, clock: Clock) -> None:
    engine = make_engine(sqlite_url, connect_args={"timeout": 0.1, "check_same_thread": False})
    store = open_store(engine)
    holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process writing, for longer than we wait
        with pytest.raises(StoreUnavailable, match="database is locked"):
            store.create(new_session("locked-1", now=clock()), now=clock())
        holder.execute("ROLLBACK")
        store.create(new_session("locked-1", now=clock()), now=clock())
        assert store.get("locked-1").id == "locked-1"
    finally:
        holder.close()
        engine.dispose()


def test_a_sqlite_read_waits_for_no_writer(sqlite_url: str, clock: Clock) -> None:
    """A worker stopped (SIGSTOP) inside a write holds SQLite's lock until it runs again:
    `show`, `ls` and the page still read (the snapshot before its write); writes wait."""
    engine = make_engine(sqlite_url, connect_args={"timeout": 0.1, "check_same_thread": False})
    store = open_store(engine)
    store.create(new_session("read-1", now=clock()), now=clock())
    holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("UPDATE tickwork_sessions SET step = step + 1 WHERE id = 'read-1'")
        assert store.get("read-1").step == 0
        assert store.load("read-1").head.id == "read-1"
        with pytest.raises(StoreUnavailable, match="database is locked"):
            store.create(new_session("read-2", now=clock()), now=clock())
        holder.execute("COMMIT")
        assert store.get("read-1").step == 1
    finally:
        holder.close()
        engine.dispose()


def test_a_pool_whose_connections_are_all_in_use_is_store_busy(
    sqlite_url: str, clock: Clock
) -> None:
    """SQLAlchemy's pool timeout is this process's pool full, not a database away: StoreBusy
    (a StoreUnavailable, which a tick gives up on as before), not "check that it runs"."""
    engine = make_engine(sqlite_url, pool_size=1, max_overflow=0, pool_timeout=0.1)
    store = open_store(engine)
    try:
        with engine.connect(), pytest.raises(StoreBusy) as busy:
            store.get("busy-1")
        assert isinstance(busy.value, StoreUnavailable)
        assert "stayed in use" in busy.value.message and "check that it runs" not in str(busy)
        store.create(new_session("busy-1", now=clock()), now=clock())  # given back: it answers
        assert store.get("busy-1").id == "busy-1"
    finally:
        engine.dispose()


def test_a_sqlite_database_without_the_schema_says_to_upgrade(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "empty.db").close()
    store = open_store(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(SchemaMissing, match=r"no tickwork schema.*tickwork db upgrade"):
            store.get("any")
        with pytest.raises(SchemaMissing):
            store.dead_letters()
    finally:
        store.close()


def test_a_sqlite_file_that_cannot_be_opened_is_store_unavailable(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'no-such-folder' / 'x.db'}")
    try:
        with pytest.raises(StoreUnavailable, match="unable to open database file"):
            store.list_sessions()
    finally:
        store.close()


def test_every_method_of_the_port_is_behind_the_edge() -> None:
    """A method added to the `Store` port (or to what its properties give) without the
    translation would let SQLAlchemy's errors out again."""
    for cls, port_cls in (
        (CoreStore, port.Store),
        (PostgresStore, port.Store),
        (Retention, Retention),
        (Cards, Cards),
        (Environments, Environments),
        (DatabaseArtifacts, DatabaseArtifacts),
    ):
        names = [n for n in dir(port_cls) if not n.startswith("_")]
        unguarded = []
        for name in names:
            member = inspect.getattr_static(cls, name)
            function = member.fget if isinstance(member, property) else member
            if callable(function) and not getattr(function, "_guarded", False):
                unguarded.append(name)
        assert names and not unguarded, f"{cls.__name__}: {unguarded}"


@pytest.mark.parametrize(
    ("raised", "kind", "words"),
    [
        (
            sa.IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed")),
            StoreConflict,
            "refused the write",
        ),
        (
            sa.DataError("INSERT", {}, Exception("integer out of range")),
            UnstorableValue,
            "refused a value",
        ),
        (
            sa.TimeoutError("QueuePool limit of size 10 overflow 40 reached"),
            StoreBusy,
            "QueuePool",
        ),
        (
            sa.OperationalError("SELECT", {}, Exception("database is locked")),
            StoreUnavailable,
            "locked",
        ),
        (
            sa.OperationalError("SELECT", {}, Exception("no such table: tickwork_sessions")),
            SchemaMissing,
            "db upgrade",
        ),
        (
            sa.ProgrammingError("SELECT", {}, Exception("syntax error")),
            StoreError,
            "failed: syntax error",
        ),
        (psycopg.errors.UndefinedColumn("column x does not exist"), SchemaMissing, "db upgrade"),
        (
            psycopg.OperationalError("server closed the connection"),
            StoreUnavailable,
            "server closed",
        ),
    ],
)
def test_each_database_error_becomes_the_store_error_it_means(
    raised: Exception, kind: type[StoreError], words: str
) -> None:
    found = translate(raised, database="sqlite:///x.db")
    assert type(found) is kind and words in found.message and "sqlite:///x.db" in found.message


def test_a_value_refused_before_it_was_sent_is_raised_as_it_was() -> None:
    naive = ValueError("naive datetime: tickwork stores UTC-aware times")
    assert translate(sa.StatementError("bind", "INSERT", {}, naive), database="db") is naive
