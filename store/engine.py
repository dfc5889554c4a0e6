"""Engines for Postgres (psycopg 3) and SQLite, set up for tickwork's transactions."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url


def normalize_url(url: str) -> str:
    """Plain `postgresql://` URLs use psycopg 3."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str, **kwargs: Any) -> Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        return _sqlite_engine(url, **kwargs)
    kwargs.setdefault("pool_pre_ping", False)
    kwargs.setdefault(
        "pool_size", 10
    )  # a worker keeps more: tickwork.worker.tick.runtime.WORKER_POOL
    kwargs.setdefault("max_overflow", 40)
    return create_engine(url, **kwargs)


def _sqlite_engine(url: str, **kwargs: Any) -> Engine:
    kwargs.setdefault("connect_args", {"timeout": 60, "check_same_thread": False})
    engine = create_engine(url, **kwargs)

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
        # writers take the lock up front: no deadlock upgrading a read lock to a write lock
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
