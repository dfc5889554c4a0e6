"""The chaos suite: select it with `-m chaos`, leave it out with `-m "not chaos"`."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos: kills workers and restarts private Redis and Postgres servers"
    )
