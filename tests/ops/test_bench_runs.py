"""Each recorded benchmark run is a folder of its own under ops/bench/runs/, and
ops/bench/RESULTS.md links every one of them (tests/test_docs_links.py checks the links
lead there)."""

from __future__ import annotations

import re
from pathlib import Path

RUNS = Path(__file__).resolve().parents[2] / "ops" / "bench" / "runs"


def test_every_run_is_a_folder_that_results_links() -> None:
    entries = sorted(RUNS.iterdir())
    loose = [e.name for e in entries if not e.is_dir()]
    assert not loose, f"ops/bench/runs/ holds files outside a run's folder: {loose}"
    results = (RUNS.parent / "RESULTS.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(runs/([^/)]+)/", results))
    unlinked = [e.name for e in entries if e.name not in linked]
    assert not unlinked, f"ops/bench/RESULTS.md links no file of these runs: {unlinked}"
    empty = [e.name for e in entries if not any(e.iterdir())]
    assert not empty, f"run folders with nothing in them: {empty}"
