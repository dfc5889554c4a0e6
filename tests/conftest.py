"""Shared fixtures: real databases for the store, with a schema made by the migrations."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from sqlalchemy import text
from tickwork.store import Store, make_engine, open_store
from tickwork.store.migrate import upgrade
from tickwork.store.schema import metadata

from tests.services import missing, postgres_database, redis_url
from tickwork.package_index import Index, fetch_wheels, make_wheel, serving
from tickwork.testing.store_ticks import T0, Clock  # noqa: F401 (T0: re-exported)

# no deadline on a generated example: the suite runs in parallel on loaded machines, where
# an example's first run (its imports, a regex compiled) can take longer than Hypothesis'
# 200 ms and its replay not, which Hypothesis reports as a flaky failure; what the tests
# assert is behaviour, and timings belong in ops/bench
settings.register_profile("tickwork", deadline=None)
settings.load_profile("tickwork")

# pytest-xdist's workers start with COLUMNS=80 in their environment, which a run in one
# process has not: the CLI would wrap its lines at 80 (tickwork.render) in-process and in
# every subprocess a test starts. The tests that want a width set COLUMNS themselves.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


#: modules whose tests take minutes: under pytest-xdist they start first, so none is the
#: long tail of a run (the chaos runs, the plain install's wheel and venv)
LONGEST = ("tests/chaos/test_chaos.py", "tests/e2e/test_install.py")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`./dev test`, `--dist loadscope --no-loadscope-reorder`: a
    module's tests go to one worker, modules in this order), the longest modules first:
    those listed in LONGEST, then those with the most worker-subprocess (`slow`) tests;
    the tests of a module keep their order. In one process the order is pytest's own."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        slow[module] = slow.get(module, 0) + (item.get_closest_marker("slow") is not None)

    def cost(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::", 1)[0]
        listed = LONGEST.index(module) if module in LONGEST else len(LONGEST)
        return listed, -slow[module]

    items.sort(key=cost)  # stable: pytest's order within each module, and among equals


@pytest.fixture(autouse=True)
def _fresh_console() -> None:
    """The CLI's Rich console is made once per process (`tickwork.render.console`), its
    width fixed by the stdout and $COLUMNS of its first use; a test that ran the CLI
    in-process before would set it for the next tests of its worker. Each test gets its own."""
    render = sys.modules.get("tickwork.render")
    if render is not None:
        render.console.cache_clear()


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


#: the tests' wheels are fetched once per machine (network to the registry) and kept here
WHEELS = Path(os.environ.get("TICKWORK_TEST_WHEELS", Path.home() / ".cache/tickwork-wheels"))


def cached_wheels(name: str, *requirements: str, into: Path) -> Path:
    """`into`, with the wheels of `requirements` and their dependencies copied in: fetched
    once per machine into `WHEELS/name`, and copied so each index serves a folder of its
    own (`serving` writes its pages there). Skipped (failed under CI) when the registry
    cannot give them."""
    try:
        # xdist workers fetch at once: one at a time, so none reads a wheel half written
        WHEELS.mkdir(parents=True, exist_ok=True)
        with (WHEELS / f"{name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            fetch_wheels(WHEELS / name, *requirements)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        said = getattr(exc, "stderr", b"") or b""
        asked = " ".join(requirements)
        missing(f"the package registry (pip download {asked})", said.decode()[-300:] or exc)
    for wheel in (WHEELS / name).glob("*.whl"):
        shutil.copy(wheel, into)
    return into


@pytest.fixture(scope="session")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """A package index on loopback: pytest's wheels (fetched once per machine) and a
    hand-made `tinydep` and `editdep`; its `url` for pip, its `address` for
    TICKWORK_EGRESS_ALLOW."""
    folder = cached_wheels("pytest", "pytest", into=tmp_path_factory.mktemp("wheels"))
    make_wheel(
        folder, "tinydep", modules={"tinydep/__init__.py": "def triple(x):\n    return 3 * x\n"}
    )
    make_wheel(folder, "editdep")  # what a build backend asks for beside its requires
    with serving(folder) as served:
        yield served
