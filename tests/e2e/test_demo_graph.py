"""`tickwork demo --graph`: the example refund graph offline, through its entry point."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_demo import env, run_demo


def test_demo_graph_yes_runs_the_refund_graph_and_pays_once(tmp_path: Path) -> None:
    done = run_demo(tmp_path, "--graph", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "node draft" in out and "node check" in out and "node report" in out
    assert "s3c0 refund needs your decision" in out and "approved (--yes)" in out
    assert "refunded $42.50 for order A-1042" in out
    ledger = (tmp_path / "state" / "demo" / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["amount"] for line in ledger] == [42.5]


def test_the_fork_the_demo_suggests_runs_as_printed(tmp_path: Path) -> None:
    environ = {**env(tmp_path / "state"), "COLUMNS": "1000"}
    done = run_demo(tmp_path, "--graph", "--yes", environ=environ)
    assert done.returncode == 0, done.stdout + done.stderr
    # it read `tickwork fork ...` (its workers need the example on PYTHONPATH): run so, the
    # fork itself could not import the graph
    found = re.search(r"`(PYTHONPATH=\S+ tickwork fork [^`]+)`", done.stdout)
    assert found, done.stdout
    setting, program, *argv = shlex.split(found.group(1))
    assert program == "tickwork"
    forked = subprocess.run(
        [sys.executable, "-m", "tickwork", *argv],
        cwd=tmp_path,
        env={**environ, "PYTHONPATH": setting.removeprefix("PYTHONPATH=")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert forked.returncode == 0, forked.stdout + forked.stderr
    assert re.fullmatch(r"[0-9a-f]{32}\n", forked.stdout), forked.stdout
