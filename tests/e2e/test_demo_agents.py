"""`tickwork demo --agents` through its entry point: the issue's best-of-3 repair. A planner
spawns three explorers on its files, each with a scripted strategy of its own; two leave
failing tests, one passes; the planner adopts the passing patch; the root's outcome is
`repaired` and its cost is the sum of the tree's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tickwork.fsm.values import Status
from tickwork.store import make_engine, open_store

from tests.e2e.test_demo import ROOT, env


def test_a_best_of_three_repair_adopts_the_passing_explorers_patch(tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = subprocess.run(
        [sys.executable, "-m", "tickwork", "demo", "--agents", "--yes"],
        cwd=tmp_path,
        env=env(state),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "outcome: repaired" in done.stdout and "cost of the tree" in done.stdout

    store = open_store(make_engine(f"sqlite:///{state / 'tickwork.db'}"))
    try:
        (root,) = [h for h in store.list_sessions(limit=10) if h.parent_id is None]
        children = store.children(root.id)
        whole = store.load(root.id)
        artifacts = store.artifacts("")
        bases = {c.id: c.config["files"]["base"] for c in children}
        manifests = artifacts.get([root.config["files"]["base"], *bases.values()])
    finally:
        store.engine.dispose()

    assert (
        root.status is Status.COMPLETED and root.role == "" and root.result["outcome"] == "repaired"
    )
    assert root.config["role"] == "planner"
    # three explorers, children of the root, each started on the root's files at the spawn
    # step: its base is a manifest of them (the same files: the same blob), no file copied
    assert [c.role for c in children] == ["explorer"] * 3
    assert {c.parent_id for c in children} == {root.id} and {c.root_id for c in children} == {
        root.id
    }
    assert set(bases.values()) == {root.config["files"]["base"]}
    listed = json.loads(manifests[root.config["files"]["base"]])
    assert set(listed) == {"calc.py", "test_calc.py"}
    # different strategies: two leave failing tests, one repairs
    outcomes = [c.result["outcome"] for c in children]
    assert outcomes == ["tests_failing", "repaired", "tests_failing"]
    patches = {c.result["patch"] for c in children}
    assert len(patches) == 3 and all(p.startswith("diff --git a/calc.py") for p in patches)
    passing = children[1]
    assert passing.result["tests"]["passed"] is True

    # the planner adopted the passing patch, after an approval, and its tests pass
    adopted = next(c for s in whole.steps for c in s.calls if c.name == "adopt_patch")
    assert adopted.arguments == {"child": 1}
    assert any(d.call_id == adopted.call_id and d.kind.value == "approve" for d in whole.decisions)
    # the approver was shown the patch it takes (`adoption.proposed`, as the API's card)
    assert f"# the patch of child 1 ({passing.id}, explorer), outcome repaired" in done.stdout
    seen = whole.observation(adopted.call_id)
    assert seen is not None and not seen.is_error and passing.id in seen.content
    assert root.result["patch"] == passing.result["patch"]
    assert root.result["tests"]["passed"] is True

    # the root's cost is its own steps' and its children's, and the children spent some
    own = sum(s.cost_usd for s in whole.steps)
    spent = [c.cost_usd for c in children]
    assert all(c > 0 for c in spent) and own > 0
    assert root.cost_usd == pytest.approx(own + sum(spent))
    assert root.tokens == sum(s.usage.total for s in whole.steps) + sum(c.tokens for c in children)

    copy = next((state / "demo").glob("buggy_calc-*"))
    assert "(len(numbers) + 1)" in (copy / "calc.py").read_text()  # the session never edits it
    shipped = (ROOT / "examples" / "buggy_calc" / "calc.py").read_text()
    assert "(len(numbers) + 1)" in shipped, "the shipped example must never change"
