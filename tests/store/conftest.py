"""The store's suite: fixtures that open each backend, and the row-level helpers.

The contract itself is the conformance kit `tickwork.testing.store_contract`
(test_contract.py runs it here on every backend); its helpers drive a tick as the worker
does, without the I/O (claim, run the machine, save), and are re-exported for the modules
that check rows beside it.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine, func, select
from tickwork.store import Store, make_engine, open_store
from tickwork.store.migrate import upgrade
from tickwork.store.schema import metadata, sessions

from tests.conftest import Clock
from tickwork.testing.store_ticks import (
    IDEMPOTENT,
    LEASE_S,
    RULES,
    awaiting_calls,
    claim,
    decision,
    execute,
    execute_change,
    new_session,
    reply,
    run_step,
    think,
    think_change,
)

#: the kit's helpers (`tickwork.testing.store_contract`), for the suite's own modules
__all__ = [
    "IDEMPOTENT",
    "LEASE_S",
    "RULES",
    "awaiting_calls",
    "claim",
    "decision",
    "execute",
    "execute_change",
    "new_session",
    "reply",
    "run_step",
    "think",
    "think_change",
]

T = TypeVar("T")


def count_rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in metadata.sorted_tables
        }


def table_rows(engine: Engine, table: Any, *where: Any) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(select(table).where(*where)).mappings()]


def lease(engine: Engine, session_id: str) -> tuple[str | None, datetime | None]:
    with engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.lease_owner, sessions.c.lease_expires_at).where(
                sessions.c.id == session_id
            )
        ).one()
    return row.lease_owner, row.lease_expires_at


def together(tasks: Iterable[Callable[[], T]]) -> list[T | BaseException]:
    """Run `tasks` in threads released at the same moment; each result or its exception."""
    todo = list(tasks)
    barrier = threading.Barrier(len(todo))
    results: list[T | BaseException] = [RuntimeError("did not run")] * len(todo)

    def run(i: int, task: Callable[[], T]) -> None:
        barrier.wait()
        try:
            results[i] = task()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(todo)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return results


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "tickwork.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A copy of a migrated template: the migrations run once per test run, not per test."""
    path = tmp_path / "tickwork.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def postgres_engine(postgres_url: str) -> Iterator[Engine]:
    """One pool for the whole run; commits skip the fsync wait (same locking, faster)."""
    engine = make_engine(postgres_url, connect_args={"options": "-c synchronous_commit=off"})
    yield engine
    engine.dispose()


#: where the contract suite runs: the Core store on SQLite and on Postgres, and the Postgres
#: store (its one-statement tick writes) on Postgres
BACKENDS = ("sqlite", "postgres-core", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test of a store runs on each backend; one that takes only a database, on each
    database."""
    if "backend" in metafunc.fixturenames:
        wanted = BACKENDS if "store" in metafunc.fixturenames else ("sqlite", "postgres")
        metafunc.parametrize("backend", wanted, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> str:
    """Each test runs on SQLite and on Postgres, on an empty schema (rows deleted, which is
    much faster than the shared fixture's TRUNCATE on small tables)."""
    if backend == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    engine: Engine = request.getfixturevalue("postgres_engine")
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(database_url: str, backend: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    if backend == "sqlite":
        engine = make_engine(database_url)
        yield open_store(engine)
        engine.dispose()
    else:
        engine = request.getfixturevalue("postgres_engine")
        yield open_store(engine, core=backend == "postgres-core")


@pytest.fixture
def session_id(store: Store, clock: Clock) -> str:
    """A fresh runnable session at version 0."""
    store.create(new_session("sess-1", now=clock()), now=clock())
    return "sess-1"
