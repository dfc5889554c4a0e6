"""Database URLs: which ones tickwork runs on, the SQLite file one names, and how messages
show one (without its password). Read with SQLAlchemy's URL parser, here in store/ so that
nothing above it imports SQLAlchemy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

#: (backend, driver) pairs tickwork runs on: PostgreSQL with psycopg 3, SQLite
SUPPORTED = {
    ("postgresql", ""),
    ("postgres", ""),
    ("postgresql", "psycopg"),
    ("sqlite", ""),
    ("sqlite", "pysqlite"),
}


def check_url(url: str, *, state_dir: Path | None = None) -> None:
    """Refuse (ValueError) what tickwork cannot run on, and a SQLite file in a folder that
    does not exist (but the state dir, which tickwork makes as it makes the embedded
    default's)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ValueError(
            "not a database URL; write postgresql://USER:PASSWORD@HOST:5432/DB "
            "or sqlite:////ABSOLUTE/PATH.db (empty: SQLite in TICKWORK_STATE_DIR)"
        ) from None
    backend, _, driver = parsed.drivername.partition("+")
    if (backend, driver) not in SUPPORTED:
        raise ValueError(
            f"tickwork runs on PostgreSQL (postgresql://, with psycopg 3) or SQLite (sqlite:///), "
            f"not {parsed.drivername}"
        )
    if backend == "sqlite" and parsed.database not in (None, "", ":memory:"):
        folder = Path(parsed.database).expanduser().absolute().parent
        ours = state_dir is not None and folder == Path(state_dir).expanduser().absolute()
        if not folder.is_dir() and not ours:
            raise ValueError(
                f"the folder of the SQLite file, {folder}, does not exist; create it or fix the "
                "path (sqlite:////ABSOLUTE/PATH.db has four slashes)"
            )


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names; None for another database or an in-memory one."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def with_sqlite_file(url: str, path: Path) -> str:
    """The SQLite URL `url` with its file replaced by `path` (its options kept)."""
    return str(make_url(url).set(database=str(path)).render_as_string(hide_password=False))


def shown(url: Any) -> str:
    """A database URL (text or SQLAlchemy's) as messages show it: without its password."""
    try:
        return str(make_url(url).render_as_string(hide_password=True))
    except (ArgumentError, ValueError, TypeError):
        return "(unreadable URL)"
