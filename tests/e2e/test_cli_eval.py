"""`tickwork eval` through its entry point: the demo set run twice on a fresh embedded state
folder (the command starts and stops its own worker), the runs shown, listed, compared,
exported and charted; and bad input refused with one `error:` line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from tickwork.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _env(state: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    return {**clean, "PYTHONPATH": str(ROOT), "TICKWORK_STATE_DIR": str(state), "COLUMNS": "200"}


def _tickwork(state: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tickwork", *args],
        cwd=state.parent,
        env=_env(state),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0 and not done.stderr, done
    return done


def _inline(state: Path, *args: str) -> tuple[int, str, str]:
    """The command through `main` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with (
        mock.patch.dict(os.environ, _env(state), clear=True),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def _refused(state: Path, code: int, *args: str) -> str:
    got, _, err = _inline(state, *args)
    lines = err.splitlines()
    assert got == code and len(lines) == 1 and lines[0].startswith("error: "), (got, err)
    return lines[0]


@pytest.mark.slow
def test_the_demo_runs_twice_and_the_runs_compare_export_and_chart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = _tickwork(state, "eval", "--demo").stdout
    for task, outcome in (
        ("calc-average", "repaired"),
        ("slugify-case", "repaired"),
        ("wordcount-spaces", "tests_failing"),
        ("clamp-high", "failed"),
    ):
        assert any(task in line and outcome in line for line in first.splitlines()), first
    assert "2/4 repaired" in first and "LOOP" in first and "scripted" in first
    for heading in ("OUTCOME", "STEPS", "TOKENS", "CACHED", "COST", "WALL", "CAUSE"):
        assert heading in first
    a = json.loads(_tickwork(state, "eval", "show", "last", "--json").stdout)
    assert a["totals"]["repaired"] == 2 and a["totals"]["tasks"] == 4
    assert a["config"]["model"] == "scripted" and a["config"]["approve"] == "all"
    assert all(r["session_id"] for r in a["results"])
    # a tighter budget: the repairs run out of steps
    second = _tickwork(
        state, "eval", "--demo", "--max-steps", "4", "--label", "four", "-c", "4"
    ).stdout
    assert "0/4 repaired" in second and "BUDGET_STEPS" in second
    b = json.loads(_tickwork(state, "eval", "show", "last", "--json").stdout)
    assert b["task_set_digest"] == a["task_set_digest"] and b["config"]["budgets"] == {
        "max_steps": 4
    }
    listed = _tickwork(state, "eval", "ls").stdout
    assert a["id"] in listed and b["id"] in listed and "four" in listed

    compared = _tickwork(
        state, "eval", "compare", a["id"], b["id"], "--parquet", str(tmp_path / "c.parquet")
    ).stdout
    calc = next(line for line in compared.splitlines() if "calc-average" in line)
    assert "repaired" in calc and "failed" in calc and "broken" in calc and "-1" in calc
    assert "-2 repaired" in compared
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "c.parquet").to_pylist()
    assert {r["task"]: r["verdict"] for r in rows}["slugify-case"] == "broken"
    code, out, err = _inline(state, "eval", "compare", a["id"], "last", "--json")
    assert code == 0 and not err
    shown = json.loads(out)
    assert shown["same_task_set"] and shown["totals"]["b"]["repaired"] == 0

    chart = tmp_path / "chart.png"
    code, out, err = _inline(state, "eval", "chart", a["id"], b["id"], "--png", str(chart))
    assert code == 0 and not err and f"wrote {chart} (2 runs)" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, _ = _inline(state, "eval", "show", a["id"][:15], "--parquet", str(tmp_path / "a.pq"))
    assert code == 0 and pq.read_table(tmp_path / "a.pq").num_rows == 4


def test_bad_input_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    bad = tmp_path / "tasks.jsonl"
    lines = [{"id": "a", "source": ".", "test_command": "t"}, {"id": "b", "source": 3}]
    bad.write_text("".join(json.dumps({"test_command": "t", **x}) + "\n" for x in lines))
    line = _refused(state, 2, "eval", str(bad), "--model", "scripted")
    assert f"{bad}:2: field `source`: must be text, got int" in line
    assert "--demo, not both" in _refused(state, 2, "eval", str(bad), "--demo")
    assert "or --demo" in _refused(state, 2, "eval", "run")
    assert "'--approve'" in _refused(state, 2, "eval", "--demo", "--approve", "x")
    assert "--max-steps must be" in _refused(state, 2, "eval", "--demo", "--max-steps", "0")
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"id": "a", "source": ".", "test_command": "t"}) + "\n")
    assert f"{good}:1: field `script`: task 'a' has none" in _refused(
        state, 2, "eval", str(good), "--model", "scripted"
    )
    code, out, _ = _inline(state, "eval", str(good), "--model", "scripted")
    assert code == 2 and "tickwork eval: run" not in out  # refused before the run's header
    assert "no run 'nope'" in _refused(state, 1, "eval", "show", "nope")
    assert "no runs are stored" in _refused(state, 1, "eval", "compare", "last", "last")
    missing = tmp_path / "no" / "chart.png"
    assert "does not exist" in _refused(state, 2, "eval", "chart", "last", "--png", str(missing))
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    line = _refused(state, 2, "eval", "--demo", "--parquet", str(tmp_path / "r.parquet"))
    assert "--parquet needs pyarrow" in line and "pip install 'tickwork[parquet]'" in line
    assert not (state / "evals").exists()  # nothing ran


def test_a_run_whose_tasks_say_nothing_of_the_model_exits_1(tmp_path: Path) -> None:
    """A run whose tasks were not submitted (or failed MODEL_ERROR for want of a key) exited
    0 like a run of the model's own failures: a script took it for a result. It prints its
    table or JSON, then one error line naming them, and exits 1."""
    state = tmp_path / "state"
    script = tmp_path / "done.json"
    script.write_text(json.dumps([{"content": "nothing to do"}]))
    tasks = tmp_path / "tasks.jsonl"
    gone = {"source": "no-such-repo", "ref": "main", "test_command": "true", "script": "done.json"}
    tasks.write_text(json.dumps({"id": "gone", **gone}) + "\n")
    args = ("eval", str(tasks), "--model", "scripted", "--no-worker")
    code, out, err = _inline(state, *args, "--json")
    assert code == 1 and json.loads(out)["results"][0]["outcome"] == "not_submitted"
    (line,) = err.splitlines()
    assert line.startswith("error: run ") and "1 of 1 tasks say nothing of the model" in line
    assert "gone (not_submitted InvalidInput)" in line and "tickwork eval show" in line
    code, out, err = _inline(state, *args)
    assert code == 1 and "0/1 repaired" in out and err.startswith("error: run ")


def test_eval_without_arguments_shows_its_commands(tmp_path: Path) -> None:
    code, out, _ = _inline(tmp_path / "state", "eval")
    assert code == 0
    for command in ("run", "ls", "show", "compare", "chart"):
        assert command in out


def test_ls_lists_the_good_runs_and_names_a_damaged_file(tmp_path: Path) -> None:
    from tests.eval.runs import result, run
    from tickwork.eval.model import Outcome
    from tickwork.eval.runs import Runs

    state = tmp_path / "state"
    Runs(state / "evals").save(run("20261201-200000-aaaa", result("calc", Outcome.REPAIRED)))
    (state / "evals" / "20261201-210000-bbbb.json").write_text("{broken")
    code, out, err = _inline(state, "eval", "ls", "--json")
    assert code == 0
    assert [r["id"] for r in json.loads(out)] == ["20261201-200000-aaaa"]
    assert "20261201-210000-bbbb.json is damaged" in err and "(not listed)" in err
