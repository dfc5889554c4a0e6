"""Fixtures of the worker's tests: `ticks`, a store and a runtime to tick sessions with.

It ticks on the `clock` fixture, tests/conftest.py's unless the module gives its own (a
module's `clock` or `ticks` overrides these)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Clock
from tests.worker.ticking import Ticks


@pytest.fixture
def ticks(database_url: str, tmp_path: Path, clock: Clock) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path, clock)
    yield found
    found.close()
