"""The embedded default's SQLite database: made by what makes sessions (`tickwork submit`,
the demo, the client's `submit`), required by everything else, which refuses, naming where
it looked, rather than leave an empty file behind."""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tickwork.worker.config.settings import Settings


def ensure_schema(settings: Settings) -> bool:
    """Make the embedded SQLite database if its file does not exist yet; True if it did.

    The schema is built in a file of its own and linked into place, so a process that
    races this one sees either no database or a whole one, and the first link wins.
    """
    from tickwork.store.urls import sqlite_file, with_sqlite_file

    path = sqlite_file(settings.db_url)
    if path is None or path.exists():
        return False
    from tickwork.store.migrate import upgrade

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from tickwork.fsm.errors import ConfigurationError

        variable = "TICKWORK_DATABASE_URL" if settings.database_url else "TICKWORK_STATE_DIR"
        raise ConfigurationError(
            f"cannot make the folder {path.parent} of the SQLite database ({exc.strerror or exc}); "
            f"point {variable} at a folder this user can write"
        ) from None
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        upgrade(with_sqlite_file(settings.db_url, scratch))
        with contextlib.suppress(FileExistsError):
            os.link(scratch, path)
    finally:
        for leftover in (scratch, *(scratch.with_name(scratch.name + s) for s in ("-wal", "-shm"))):
            leftover.unlink(missing_ok=True)
    return True


def require_database(settings: Settings) -> None:
    """NoDatabase naming the embedded SQLite file if it does not exist (opening it would
    make it), and how to point at one."""
    from tickwork.fsm.errors import NoDatabase
    from tickwork.store.urls import sqlite_file

    path = sqlite_file(settings.db_url)
    if path is None or path.exists():
        return
    if settings.database_url:
        how = "TICKWORK_DATABASE_URL names it: fix the path"
    else:
        how = (
            "run the command from the folder you submitted from, or set TICKWORK_STATE_DIR "
            "(or TICKWORK_DATABASE_URL) to where the database is"
        )
    raise NoDatabase(
        f"no tickwork database at {path.absolute()}: {how}; `tickwork submit` or "
        "`tickwork demo` makes one"
    )
