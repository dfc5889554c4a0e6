"""Persistence for tickwork sessions: SQLAlchemy Core on Postgres or SQLite.

`open_store(engine)` builds the `Store` for the engine's database, the one place a store
is made. The names here are imported on first use, so that a module of store/ that needs
none of them (`store.urls`, which the settings use to check a database URL) does not load
SQLAlchemy's engine, psycopg and every table with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from tickwork.store.core import CoreStore
    from tickwork.store.engine import make_engine
    from tickwork.store.port import Store
    from tickwork.store.postgres import PostgresStore
    from tickwork.store.ticks import Claimed

#: name -> the module of store/ it comes from
_LAZY = {
    "Claimed": "tickwork.store.ticks",
    "CoreStore": "tickwork.store.core",
    "PostgresStore": "tickwork.store.postgres",
    "Store": "tickwork.store.port",
    "make_engine": "tickwork.store.engine",
}


def open_store(
    db: str | Engine, *, transcripts: int = 64, core: bool = False, **engine_args: Any
) -> Store:
    """The store of the database `db` (a URL, or an engine already made): on Postgres the
    one-statement tick writes (`PostgresStore`), elsewhere, or with `core`, SQLAlchemy
    Core's (`CoreStore`). `transcripts`: how many sessions' transcripts this process keeps
    read; `engine_args` go to `make_engine` with a URL."""
    from tickwork.store.core import CoreStore
    from tickwork.store.engine import make_engine
    from tickwork.store.postgres import PostgresStore

    engine = make_engine(db, **engine_args) if isinstance(db, str) else db
    if engine.dialect.name == "postgresql" and not core:
        return PostgresStore(engine, transcripts=transcripts)
    return CoreStore(engine, transcripts=transcripts)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tickwork.store' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


__all__ = ["Claimed", "CoreStore", "PostgresStore", "Store", "make_engine", "open_store"]
