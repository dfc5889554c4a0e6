"""Persistence for tickwork sessions: SQLAlchemy Core on Postgres or SQLite.

`open_store(engine)` builds the `Store` for the engine's database, the one place a store
is made.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from tickwork.store.core import CoreStore
from tickwork.store.engine import make_engine
from tickwork.store.port import Store
from tickwork.store.postgres import PostgresStore
from tickwork.store.ticks import Claimed


def open_store(
    db: str | Engine, *, transcripts: int = 64, core: bool = False, **engine_args: Any
) -> Store:
    """The store of the database `db` (a URL, or an engine already made): on Postgres the
    one-statement tick writes (`PostgresStore`), elsewhere, or with `core`, SQLAlchemy
    Core's (`CoreStore`). `transcripts`: how many sessions' transcripts this process keeps
    read; `engine_args` go to `make_engine` with a URL."""
    engine = make_engine(db, **engine_args) if isinstance(db, str) else db
    if engine.dialect.name == "postgresql" and not core:
        return PostgresStore(engine, transcripts=transcripts)
    return CoreStore(engine, transcripts=transcripts)


__all__ = ["Claimed", "CoreStore", "PostgresStore", "Store", "make_engine", "open_store"]
