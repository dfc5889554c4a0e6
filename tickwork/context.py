"""What a command works on: the settings, the store, the client's read facade and the
client, each built on first use.

Reading commands use the store and `reads` (tickwork/reads.py), so they start without
importing Celery; commands that change sessions go through the client, which publishes
ticks. Only a command that makes sessions (`Context(creates=True)`: submit, the demo, an
eval run) makes the embedded default's database; every other one refuses, naming where it
looked, when there is none, and leaves no file behind.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from .embedded import ensure_schema, require_database

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


class Context:
    """One command's handle on the deployment; closes what it opened. `creates`: the
    command makes sessions, so it makes the embedded default's database if there is none."""

    def __init__(self, settings: Settings | None = None, *, creates: bool = False) -> None:
        self._settings = settings
        self._creates = creates
        self._store: Store | None = None
        self._reads: Reads | None = None
        self._client: Tickwork | None = None
        self._client_owns_store = False  # a client made before this command opened the store

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
        if self._client_owns_store:  # the client's, made here if it is not yet
            ensure_schema(self.settings)
            return self.client.store
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
        """The client; a command that makes sessions leaves its store to it, opened when
        first needed: its `submit` checks what it was given first, so a refused one makes
        no database."""
        if self._client is None:
            from .client import WholeIds

            # the commands name a session by a start of its id, looked up in their own words
            # a command that makes sessions and has not opened the store leaves it to the client
            store = None if self._creates and self._store is None else self.store
            self._client = WholeIds(self.settings, store=store)
            self._client_owns_store = store is None
        return self._client

    @property
    def reads(self) -> Reads:
        """The client's read facade on this command's store (the archive, forks, patches)."""
        if self._reads is None:
            from .reads import Reads

            self._reads = Reads(self.settings, store=self.store)
        return self._reads

    def dead_letter(self, key: str) -> DeadLetter:
        """A dead letter by its number or its session's id (`Reads.find_dead_letter`)."""
        return self.reads.find_dead_letter(key)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        if self._client is not None and self._client_owns_store:
            self._client.close()  # its store is its own
