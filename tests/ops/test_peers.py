"""ops/bench/peers.py, the benchmark against DBOS, LangGraph and the bare hop: its quick run
prints the figures `run_all` collects, a peer whose package is missing is skipped with what
to install, and a contender it does not know is refused by name."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ops.bench import contenders, peers
from tests import services

ROOT = Path(__file__).resolve().parents[2]
FIGURES = set(peers.FIGURES)


def test_an_unknown_contender_is_refused_with_the_known_ones() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="unknown contender temporal; choose from"):
        peers.names("tickwork,temporal")
    assert peers.names("bare, tickwork,bare") == ("bare", "tickwork")


def test_each_repeat_starts_one_contender_later() -> None:
    order = ("a", "b", "c", "d")
    assert [peers.rotated(order, r) for r in range(5)] == [
        ("a", "b", "c", "d"),
        ("b", "c", "d", "a"),
        ("c", "d", "a", "b"),
        ("d", "a", "b", "c"),
        ("a", "b", "c", "d"),
    ]


def test_a_peer_that_cannot_be_imported_is_named_with_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "dbos", None)  # import dbos now raises ImportError
    missing = contenders.unavailable(("tickwork", "dbos", "bare"))
    assert list(missing) == ["dbos"]
    assert "dbos cannot be imported" in missing["dbos"]
    assert "pip install -e '.[bench]'" in missing["dbos"]


def hide(folder: Path, *packages: str) -> Path:
    """A folder that, first on PYTHONPATH, makes importing `packages` fail as if missing."""
    for name in packages:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(
            f"raise ImportError('{name} hidden by the test')\n"
        )
    return folder


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
def test_quick_run_prints_figures_for_tickwork_and_the_bare_hop(tmp_path: Path) -> None:
    admin = services._admin_url().replace("+psycopg", "")
    redis = services.redis_url()
    hidden = hide(tmp_path / "hidden", "dbos", "langgraph")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(hidden), str(ROOT)]),
        TICKWORK_BENCH_PG=admin,
        TICKWORK_BENCH_REDIS=redis,
    )
    proc = subprocess.run(
        [sys.executable, "ops/bench/peers.py", "--quick", "--only", "tickwork,bare,dbos,langgraph"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "skipped dbos: dbos cannot be imported (dbos hidden by the test)" in proc.stdout
    assert "skipped langgraph: langgraph.graph cannot be imported" in proc.stdout
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT peers ")]
    assert len(results) == 1, proc.stdout
    figures = json.loads(results[0].removeprefix("RESULT peers "))

    assert (figures["concurrency"], figures["steps"], figures["repeats"]) == (1, 5, 1)
    assert set(figures["skipped"]) == {"dbos", "langgraph"}
    assert all("pip install -e '.[bench]'" in why for why in figures["skipped"].values())
    assert set(figures["contenders"]) == {"tickwork", "bare"}
    median = {
        name: {key: stats["median"] for key, stats in f.items()}
        for name, f in figures["contenders"].items()
    }
    for name, m in median.items():
        assert set(m) == FIGURES, name
        assert m["steps_per_s"] == pytest.approx(5 / m["wall_s"]), name
        # every durable write of a step (2 a step and the final reply) commits at least once
        assert m["commits_per_step"] >= 11 / 5, name
    # the bare hop INSERTs exactly one row a hop and nothing else: the counters are its own
    assert median["bare"]["inserted_per_step"] == pytest.approx(11 / 5)
    assert median["bare"]["updated_per_step"] == median["bare"]["deleted_per_step"] == 0
    # tickwork appends the step, its call and its observation, and moves the session's head
    assert median["tickwork"]["inserted_per_step"] >= 3
    assert median["tickwork"]["updated_per_step"] >= 2
    ratio = figures["ratios"]["tickwork/bare"]
    assert list(figures["ratios"]) == ["tickwork/bare"]
    assert ratio["median"] == pytest.approx(
        median["tickwork"]["steps_per_s"] / median["bare"]["steps_per_s"]
    )
