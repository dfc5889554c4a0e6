"""Engines for Postgres (psycopg 3) and SQLite, set up for tickwork's transactions."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url


def normalize_url(url: str) -> str:
    """Plain `postgresql://` URLs use psycopg 3."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str, *, keep_prepared: bool = True, **kwargs: Any) -> Engine:
    """An engine for `url`; on Postgres, with `keep_prepared`, its rollbacks keep the
    driver's prepared statements (`_rollback_keeping_prepared`: not for DDL)."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        return _sqlite_engine(url, **kwargs)
    kwargs.setdefault("pool_pre_ping", False)
    kwargs.setdefault(
        "pool_size", 10
    )  # a worker keeps more: tickwork.worker.tick.runtime.WORKER_POOL
    kwargs.setdefault("max_overflow", 40)
    # the connection used last first: fewer of them busy, each with its statements prepared
    kwargs.setdefault("pool_use_lifo", True)
    if keep_prepared:
        # psycopg prepares any statement run five times on a connection; only the tick's
        # statements are prepared (`postgres._one`: `prepare=True`), the rest planned per
        # run as before (their plans may depend on their parameters)
        given = kwargs.get("connect_args", {})
        kwargs["connect_args"] = {"prepare_threshold": ONLY_ASKED, **given}
    engine = create_engine(url, **kwargs)
    if keep_prepared:
        engine.dialect.do_rollback = _rollback_keeping_prepared  # type: ignore[method-assign]
    _close_given_back_late(engine)
    return engine


def _close_given_back_late(engine: Engine) -> None:
    """A connection in use while the engine is disposed (`Store.close`: a thread that
    outlived its stop, a tick still running) is closed as it is given back, and the pool's
    connections as the engine is collected. SQLAlchemy left either to the garbage collector,
    open (their server processes too), and psycopg then warned "connection ... deleted
    while still open"."""
    #: how many times the engine was disposed: a connection taken before the last time is
    #: given back to a pool thrown away
    disposals = [0]
    #: the engine's pool now (`dispose` replaces it), closed once the engine is collected
    pools = [engine.pool]

    @event.listens_for(engine, "engine_disposed")
    def _disposed(disposed: Engine) -> None:
        disposals[0] += 1
        pools[0] = disposed.pool

    # an engine nobody disposed (a store not closed, or used again after its close: a thread
    # whose pass outlived its stop) left its pool's idle connections to the garbage
    # collector, open, and psycopg warned of each; the pool is closed as the engine goes, in
    # the process that made it only (a forked child's copy shares the parent's sockets), and
    # not at exit, where the process's end closes them
    made_in = os.getpid()

    def close_pool() -> None:
        if os.getpid() == made_in:
            pools[0].dispose()

    weakref.finalize(engine, close_pool).atexit = False

    @event.listens_for(engine, "checkout")
    def _taken(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        record.info[_TAKEN] = disposals[0]

    @event.listens_for(engine, "checkin")
    def _given_back(_dbapi_connection: Any, record: Any) -> None:
        if record.info.pop(_TAKEN, disposals[0]) != disposals[0]:
            record.invalidate()


#: the key of `_close_given_back_late`'s mark in a pooled connection's `info`
_TAKEN = "tickwork_taken_at_disposal"


#: a prepare threshold no statement reaches: psycopg prepares only those run with `prepare`
ONLY_ASKED = 2**62


def _rollback_keeping_prepared(dbapi_connection: Any) -> None:
    """Roll back as the driver would, without it forgetting its prepared statements.

    psycopg forgets every statement it prepared on a connection (DEALLOCATE ALL) at each
    rollback, for fear of DDL undone by it. SQLAlchemy ends every read (`engine.connect()`)
    with a rollback, so the tick's statements were planned again nearly every time: about
    a third of their time on the server. tickwork runs no DDL on these connections (the
    migrations' engine keeps the driver's rollback), and a prepared statement outlives a
    rollback on the server, so the ROLLBACK goes to libpq directly; anything but a clean
    one (a broken connection) goes to the driver, which reports it."""
    import psycopg
    from psycopg import pq

    pgconn = getattr(dbapi_connection, "driver_connection", dbapi_connection).pgconn
    opened = pgconn.transaction_status in (
        pq.TransactionStatus.INTRANS,
        pq.TransactionStatus.INERROR,
    )
    if not opened or pgconn.pipeline_status != pq.PipelineStatus.OFF:
        dbapi_connection.rollback()
        return
    result = pgconn.exec_(b"ROLLBACK")
    if result.status == pq.ExecStatus.COMMAND_OK:
        return
    try:
        dbapi_connection.rollback()
    except psycopg.Error as exc:  # the driver's "connection lost": add the server's why
        reason = (result.error_message or pgconn.error_message).decode(errors="replace")
        if reason.strip():
            raise type(exc)(f"{exc} ({reason.strip()})") from exc
        raise


#: the execution option of a SQLite connection opened by `engine.begin()`, to write
_WRITES = "tickwork_writes"


def _sqlite_engine(url: str, **kwargs: Any) -> Engine:
    kwargs.setdefault("connect_args", {"timeout": 60, "check_same_thread": False})
    engine = create_engine(url, **kwargs)
    _close_given_back_late(engine)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # let SQLAlchemy, not the driver, open transactions, so they can be IMMEDIATE
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        # a writer (`engine.begin()`) takes the lock up front: no deadlock upgrading a read
        # lock to a write lock; a read (`engine.connect()`, never committed) takes none: in
        # WAL it reads a snapshot and waits for no writer, not even a worker stopped
        # (SIGSTOP) inside a write, and leaves the lock to the writers
        writes = connection.get_execution_options().get(_WRITES, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")

    @contextmanager
    def begin() -> Iterator[Connection]:
        with engine.connect() as conn:
            conn.execution_options(**{_WRITES: True})
            with conn.begin():
                yield conn

    engine.begin = begin  # type: ignore[method-assign]
    return engine
