"""Persistence for tickwork sessions: SQLAlchemy Core on Postgres or SQLite.

`open_store(engine)` builds the `Store` for the engine's database, the one place a store
is made.
"""

from __future__ import annotations

from sqlalchemy import Engine

from .engine import make_engine
from .port import Store
from .postgres import PostgresStore
from .sessions import CoreStore
from .ticks import Claimed


def open_store(engine: Engine, *, transcripts: int = 64, core: bool = False) -> Store:
    """The store for `engine`'s database: on Postgres the one-statement tick writes
    (`PostgresStore`), elsewhere, or with `core`, SQLAlchemy Core's (`CoreStore`).
    `transcripts`: how many sessions' transcripts this process keeps read."""
    if engine.dialect.name == "postgresql" and not core:
        return PostgresStore(engine, transcripts=transcripts)
    return CoreStore(engine, transcripts=transcripts)


__all__ = ["Claimed", "CoreStore", "PostgresStore", "Store", "make_engine", "open_store"]
