"""Shared fixtures: real databases for the store, with a schema made by the migrations."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from store import Store, make_engine, open_store
from store.migrate import upgrade
from store.schema import metadata
from tests.services import postgres_database, redis_url

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    """A clock the tests move by hand."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_database() as url:
        upgrade(url)
        yield url


@pytest.fixture(scope="session")
def redis() -> str:
    return redis_url()


def _truncate(url: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        names = ", ".join(t.name for t in metadata.sorted_tables)
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'tickwork.db'}"
    upgrade(url)
    return url


@pytest.fixture
def clean_postgres_url(postgres_url: str) -> str:
    """The test run's Postgres database, emptied."""
    _truncate(postgres_url)
    return postgres_url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs on SQLite and on Postgres, on an empty schema."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("clean_postgres_url"))


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    engine = make_engine(database_url)
    yield open_store(engine)
    engine.dispose()
