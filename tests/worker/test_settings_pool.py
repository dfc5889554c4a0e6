"""The store's pool of connections to the database, sized by TICKWORK_DATABASE_POOL_SIZE,
_OVERFLOW and _TIMEOUT_S: it was fixed (10 kept and 40 more in `tickwork serve`, 30 and 10
in a worker, a 30 s wait), whatever the database's own limit or the server's load."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.fsm.errors import ConfigurationError
from tickwork.store import Store
from tickwork.worker.config.settings import Settings, load_settings
from tickwork.worker.config.stores import build_store
from tickwork.worker.tick.runtime import worker_store

#: a Postgres URL nothing answers at: an engine connects only once it is used
POSTGRES = "postgresql://tickwork@127.0.0.1:1/nowhere"


def _pool(store: Store) -> tuple[int, int, float]:
    """The store's pool: connections kept, opened past them at most, the wait for one."""
    pool = store.engine.pool  # type: ignore[attr-defined]
    try:
        return pool.size(), pool._max_overflow, pool.timeout()
    finally:
        store.close()


def _pools(settings: Settings) -> list[tuple[int, int, float]]:
    """The pools of `tickwork serve` (and the clients) and of a worker, as `settings` size them."""
    return [_pool(build_store(settings)), _pool(worker_store(settings))]


def test_the_settings_size_the_pools_of_the_server_and_of_the_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TICKWORK_DATABASE_URL", POSTGRES)
    assert _pools(load_settings()) == [(10, 40, 30.0), (30, 10, 30.0)]  # unset: as before
    monkeypatch.setenv("TICKWORK_DATABASE_POOL_SIZE", "4")
    monkeypatch.setenv("TICKWORK_DATABASE_POOL_OVERFLOW", "0")
    monkeypatch.setenv("TICKWORK_DATABASE_POOL_TIMEOUT_S", "2.5")
    assert _pools(load_settings()) == [(4, 0, 2.5), (4, 0, 2.5)]
    monkeypatch.delenv("TICKWORK_DATABASE_POOL_SIZE")  # one left unset keeps its default
    assert _pools(load_settings()) == [(10, 0, 2.5), (30, 0, 2.5)]


def test_a_sqlite_file_s_pool_is_sized_alike(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, database_pool_size=2, database_pool_timeout_s=1)
    assert _pools(settings) == [(2, 10, 1.0), (2, 10, 1.0)]


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("TICKWORK_DATABASE_POOL_SIZE", "0", "greater than or equal to 1"),
        ("TICKWORK_DATABASE_POOL_SIZE", "many", "valid integer"),
        ("TICKWORK_DATABASE_POOL_OVERFLOW", "-1", "greater than or equal to 0"),
        ("TICKWORK_DATABASE_POOL_TIMEOUT_S", "0", "greater than 0"),
        ("TICKWORK_DATABASE_POOL_TIMEOUT_S", "inf", "finite number"),
    ],
)
def test_a_bad_pool_setting_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, said: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as refused:
        load_settings()
    assert refused.value.message.startswith(f"invalid setting {name}={value!r}: ")
    assert said in refused.value.message
