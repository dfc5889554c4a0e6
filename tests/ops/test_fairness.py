"""ops/bench/fairness.py, the benchmark of fair admission: its quick run prints the figures
`run_all` collects (no timing is asserted: figures are for reading, not for tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import services

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
def test_quick_run_prints_the_figures() -> None:
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        TICKWORK_BENCH_PG=services._admin_url().replace("+psycopg", ""),
        TICKWORK_BENCH_REDIS=services.redis_url(),
    )
    proc = subprocess.run(
        [sys.executable, "ops/bench/fairness.py", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT fairness ")]
    assert len(results) == 1, proc.stdout
    figures = json.loads(results[0].removeprefix("RESULT fairness "))
    assert (figures["a_sessions"], figures["b_sessions"]) == (60, 5)
    # A was held at its limit: most of its sessions still waited queued once B had started
    assert figures["a_queued_after_b"]["median"] > 0
    assert figures["b_p95_idle"]["median"] > 0 and figures["b_p95_busy"]["median"] > 0
    assert figures["a_rate_alone"]["median"] > 0 and figures["a_rate_with_b"]["median"] > 0
    assert "ratio" in proc.stdout and "target <= 2" in proc.stdout
