"""ops/bench/fan_out.py: its quick run fans out, joins once, and prints the figures `run_all`
collects (no timing is asserted: figures come from the benchmark, not from tests)."""

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
def test_quick_run_prints_the_wall_time_against_the_ideal_and_the_join_cost() -> None:
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        TICKWORK_BENCH_PG=services._admin_url().replace("+psycopg", ""),
        TICKWORK_BENCH_REDIS=services.redis_url(),
    )
    proc = subprocess.run(
        [sys.executable, "ops/bench/fan_out.py", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT fan_out ")]
    assert len(results) == 1, proc.stdout
    figures = json.loads(results[0].removeprefix("RESULT fan_out "))
    assert (figures["children"], figures["steps"], figures["repeats"]) == (5, 2, 1)
    # the critical path: the root's two replies and a child's two, 0.2 s each
    assert figures["ideal_s"] == pytest.approx(0.8)
    ratio, wall = figures["ratio"]["median"], figures["wall_s"]["median"]
    assert ratio == pytest.approx(wall / 0.8) and wall >= 0.8
    assert figures["cpu_ms_per_tick"]["worker"]["median"] > 0
    join = {name: stats["median"] for name, stats in figures["join"].items()}
    assert join["join_ms_per_child"] == pytest.approx(
        join["spawn_ms_per_child"] + join["join_tick_ms_per_child"] + join["end_extra_ms_per_child"]
    )
    assert join["spawn_ms_per_child"] > 0 and join["join_tick_ms_per_child"] > 0
