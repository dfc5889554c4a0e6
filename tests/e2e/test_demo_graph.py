"""`tickwork demo --graph`: the example refund graph offline, through its entry point."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_demo import run_demo


def test_demo_graph_yes_runs_the_refund_graph_and_pays_once(tmp_path: Path) -> None:
    done = run_demo(tmp_path, "--graph", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "node draft" in out and "node check" in out and "node report" in out
    assert "s3c0 refund needs your decision" in out and "approved (--yes)" in out
    assert "refunded $42.50 for order A-1042" in out
    ledger = (tmp_path / "state" / "demo" / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["amount"] for line in ledger] == [42.5]
