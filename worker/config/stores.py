"""The store the settings name: their database, its pool as they size it."""

from __future__ import annotations

from collections.abc import Mapping

from tickwork.store import Store, open_store
from tickwork.worker.config.settings import Settings


def build_store(settings: Settings, *, pool: Mapping[str, int] | None = None) -> Store:
    """The store of `settings`' database, its pool as `Settings.database_pool` sizes it
    (`pool`: this process's sizes where the settings give none)."""
    if settings.db_url.startswith("sqlite"):
        settings.state_dir.mkdir(parents=True, exist_ok=True)
    engine_args = settings.database_pool(pool or {})
    return open_store(settings.db_url, transcripts=settings.transcript_cache, **engine_args)
