"""What the client's two facades stand on: one deployment's settings, store, job kinds,
model providers and clock, and the stores of files behind the sessions (the artifact store,
this process's working copies, the archive retention fills)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from datetime import datetime

from tickwork.store import Store
from tickwork.store.archive import Archive
from tickwork.store.archived import ArchivedSession
from tickwork.store.artifacts import Artifacts
from tickwork.worker.config.settings import RoleSettings, Settings, load_settings
from tickwork.worker.config.stores import build_store
from tickwork.worker.config.tenants import Tenants, TenantSettings
from tickwork.worker.files.workspaces import Workspaces
from tickwork.worker.jobs import Jobs
from tickwork.worker.models import Providers
from tickwork.worker.tick.runtime import utc_now


class Deployment:
    """One handle on a tickwork deployment, configured from settings; `Reads` and `Writes`
    (tickwork/reads.py, tickwork/writes.py) are what it offers."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        store: Store | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings or load_settings()
        self._store = store
        #: held while the store is opened, so two threads' first uses open one (an attribute:
        #: `Tickwork.whole_ids`'s twin shares it with the rest of this object's __dict__)
        self._opening = threading.Lock()
        self.jobs = Jobs(
            self.settings.imports, roles_file=self.settings.section(RoleSettings).roles_file
        )
        #: the model providers, the workers' too when both read the same TICKWORK_IMPORTS
        self.providers = Providers(self.settings.imports)
        self.clock = clock

    @property
    def store(self) -> Store:
        """The deployment's store, opened on first use: an embedded SQLite database that does
        not exist is refused as the CLI refuses it (NoDatabase, saying what makes one), not
        made empty (after which every command said "no tickwork schema"); `submit` makes it
        whole, as `tickwork submit` does."""
        if self._store is None:
            with self._opening:
                if self._store is None:
                    from tickwork.embedded import require_database

                    require_database(self.settings)
                    self._store = build_store(self.settings)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    @functools.cached_property
    def artifacts(self) -> Artifacts:
        from tickwork.worker.tick.retention import restoring  # blobs retention moved are read back

        return restoring(self.store.artifacts(self.settings.artifacts_url), self.settings)

    @functools.cached_property
    def files(self) -> Workspaces:
        """Sessions' stored files, read through this process's cache."""
        return Workspaces(
            self.settings.workspaces_path,
            self.store,
            self.artifacts,
            max_bytes=self.settings.workspaces_max_bytes,
        )

    @functools.cached_property
    def tenants(self) -> Tenants:
        """The tenants' quotas (TICKWORK_TENANTS_FILE), read again when the file changes."""
        return Tenants.of(self.settings.section(TenantSettings))

    @functools.cached_property
    def archive(self) -> Archive:
        """Where retention archives finished sessions (TICKWORK_RETENTION_ARCHIVE_URL)."""
        from tickwork.worker.config.settings import read_settings
        from tickwork.worker.tick.retention import RetentionSettings

        return read_settings(RetentionSettings).archive(self.settings)

    def archived(self, session_id: str) -> ArchivedSession | None:
        """An archived session read back from the archive; None if it is not archived."""
        if self.store.retention.entry(session_id) is None:
            return None  # the archive is opened only for a session it holds
        return self.store.retention.load(self.archive, session_id)
