"""What a command works on: the settings, the store, the client's read facade and the
client, each built on first use.

Reading commands use the store and `reads` (tickwork/reads.py), so they start without
importing Celery; commands that change sessions go through the client, which publishes
ticks. Only a command that makes sessions (`Context(creates=True)`: submit, the demo, an
eval run) makes the embedded default's database; every other one refuses, naming where it
looked, when there is none, and leaves no file behind.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from tickwork.store import Store
    from tickwork.store.dead_letters import DeadLetter
    from tickwork.worker.config.settings import Settings

    from .client import Tickwork
    from .reads import Reads


def load_settings() -> Settings:
    """The settings from `TICKWORK_*`; a bad value is one error naming its variable."""
    from tickwork.fsm.errors import ConfigurationError
    from tickwork.worker.config.settings import load_settings as load
    from tickwork.worker.models.pricing import as_price

    settings = load()
    for name, price in settings.prices.items():  # named at start, not at each submit
        try:
            as_price(name, price)
        except ConfigurationError as exc:
            raise ConfigurationError(f"invalid setting TICKWORK_PRICES: {exc.message}") from None
    return settings


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


def state_folder(settings: Settings, name: str) -> Path:
    """The folder `name` under TICKWORK_STATE_DIR, made if missing; a ConfigurationError
    naming the setting if it cannot be (the state folder under a file, say)."""
    folder = settings.state_dir.absolute() / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from tickwork.fsm.errors import ConfigurationError

        raise ConfigurationError(
            f"cannot make the folder {folder} ({exc.strerror or exc}); "
            "point TICKWORK_STATE_DIR at a folder this user can write"
        ) from None
    return folder


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


class Context:
    """One command's handle on the deployment; closes what it opened. `creates`: the
    command makes sessions, so it makes the embedded default's database if there is none."""

    def __init__(self, settings: Settings | None = None, *, creates: bool = False) -> None:
        self._settings = settings
        self._creates = creates
        self._store: Store | None = None
        self._reads: Reads | None = None
        self._client: Tickwork | None = None

    def __enter__(self) -> Context:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings()
        return self._settings

    @property
    def store(self) -> Store:
        if self._store is None:
            from tickwork.store import open_store

            settings = self.settings
            if self._creates:
                ensure_schema(settings)
            else:
                require_database(settings)
            self._store = open_store(settings.db_url, **settings.database_pool({}))
        return self._store

    @property
    def client(self) -> Tickwork:
        if self._client is None:
            from .client import Tickwork

            self._client = Tickwork(self.settings, store=self.store)
        return self._client

    @property
    def reads(self) -> Reads:
        """The client's read facade on this command's store (the archive, forks, patches)."""
        if self._reads is None:
            from .reads import Reads

            self._reads = Reads(self.settings, store=self.store)
        return self._reads

    def dead_letter(self, key: str) -> DeadLetter:
        """A dead letter by its number (`#12` by it only; `12` is number 12 or session 12's,
        refused when the two are different letters: `dead_letters.by_key`), else by its
        session's id (or a unique start of one, `Reads.session_id`, unless `key` is digits
        only: a mistyped letter number must not name the letter of a session whose id
        starts with those digits)."""
        from tickwork.fsm.errors import SessionNotFound
        from tickwork.store.dead_letters import DeadLetterNotFound, by_key

        def found(lookup: int | str) -> DeadLetter | None:
            try:
                return self.store.dead_letter(lookup)
            except DeadLetterNotFound:
                return None

        letter = by_key(key, numbered=found, of_session=found)
        if letter is not None:
            return letter
        if key.startswith("#"):
            raise DeadLetterNotFound(
                f"no dead letter has number {key[1:]}; {DeadLetterNotFound.listing}"
            )
        if key.isascii() and key.isdigit():
            raise DeadLetterNotFound(
                f"no dead letter has id or session id {key!r} (digits only name a dead letter "
                f"or a whole session id, never the start of one); {DeadLetterNotFound.listing}"
            )
        try:
            return self.store.dead_letter(self.reads.session_id(key))
        except (DeadLetterNotFound, SessionNotFound):
            raise DeadLetterNotFound(
                f"no dead letter has id or session id {key!r}; {DeadLetterNotFound.listing}"
            ) from None

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
