"""Stored runs, their comparison, their Parquet rows and the cost-against-success chart."""

from __future__ import annotations

import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import ConfigurationError, InvalidInput, TickworkError

from tickwork.canvas import Canvas
from tickwork.eval import chart as charts
from tickwork.eval.model import Outcome, compare
from tickwork.eval.runs import RunNotFound, Runs
from tickwork.eval.tables import (
    COMPARE_COLUMNS,
    RUN_COLUMNS,
    compare_rows,
    run_rows,
    write_parquet,
)

from .runs import result, run

A = run(
    "20261201-200000-aaaa",
    result("calc", Outcome.REPAIRED, steps=5, tokens=10_000, cost_usd=0.05, cached_tokens=7000),
    result("slug", Outcome.TESTS_FAILING, steps=4, cost_usd=0.02, wall_s=2.0),
    result("clamp", Outcome.FAILED, cause="LOOP", message="stagnation", cost_usd=0.01),
    result("gone", Outcome.REPAIRED, cost_usd=0.01),
)
B = run(
    "20261201-210000-bbbb",
    result("calc", Outcome.FAILED, steps=4, tokens=7000, cost_usd=0.03, cause="BUDGET_STEPS"),
    result("slug", Outcome.REPAIRED, steps=6, cost_usd=0.04, wall_s=3.5),
    result("clamp", Outcome.FAILED, cause="LOOP", cost_usd=0.01),
    result("new", Outcome.NO_CHANGES),
    model="anthropic:b",
    digest="d2",
)


def test_a_run_is_stored_and_found_by_id_prefix_or_last(tmp_path: Path) -> None:
    runs = Runs(tmp_path / "evals")
    assert runs.ids() == []
    with pytest.raises(RunNotFound, match="no runs are stored"):
        runs.load("last")
    runs.save(A)
    runs.save(B)
    assert runs.load(A.id) == A
    assert runs.load("last") == B
    assert runs.load("20261201-21") == B
    assert runs.ids() == [A.id, B.id]
    assert not list((tmp_path / "evals").glob(".*"))  # no temporary file left
    with pytest.raises(InvalidInput, match="is the start of 2 run ids"):
        runs.load("20261201")
    with pytest.raises(RunNotFound, match="no run 'nope'"):
        runs.load("nope")
    with pytest.raises(InvalidInput, match="is not a run id"):
        runs.load("../etc/passwd")
    (tmp_path / "evals" / "20261201-220000-cccc.json").write_text("{broken")
    with pytest.raises(Exception, match="is damaged"):
        runs.load("20261201-22")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"steps": "x"}, "task 'calc': field `steps` is str 'x', not int"),
        ({"cost_usd": None}, "task 'calc': field `cost_usd` is NoneType 'None', not float or int"),
        ({"tokens": True}, "task 'calc': field `tokens` is bool 'True', not int"),
        ({"outcome": None}, "None is not a valid Outcome"),
    ],
)
def test_a_run_file_with_a_field_of_the_wrong_type_is_damaged_naming_it(
    tmp_path: Path, change: dict[str, object], said: str
) -> None:
    runs = Runs(tmp_path / "evals")
    path = runs.save(A)
    stored = json.loads(path.read_text())
    stored["results"][0].update(change)
    path.write_text(json.dumps(stored))
    with pytest.raises(TickworkError, match="is damaged") as refused:
        runs.load(A.id)
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"config": []}, "the run's config is a JSON object, got list"),
        (None, "a run is a JSON object, got list"),
        (
            {"config": {"budgets": 3}},
            "the run's config: field `budgets` is int 3, not a JSON object",
        ),
    ],
)
def test_a_run_file_whose_config_has_the_wrong_shape_is_damaged_naming_it(
    tmp_path: Path, change: dict[str, Any] | None, said: str
) -> None:
    runs = Runs(tmp_path / "evals")
    path = runs.save(A)
    stored: Any = json.loads(path.read_text())
    if change is None:
        stored = [stored]
    elif "budgets" in str(change["config"]):
        stored.update(config={**stored["config"], **change["config"]})
    else:
        stored.update(change)
    path.write_text(json.dumps(stored))
    with pytest.raises(TickworkError, match="is damaged") as refused:
        runs.load(A.id)
    assert said in str(refused.value)


def test_a_run_file_without_a_field_is_damaged_naming_it(tmp_path: Path) -> None:
    runs = Runs(tmp_path / "evals")
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / f"{A.id}.json").write_text('{"schema": 1}')
    with pytest.raises(TickworkError, match="is damaged \\(no field 'id'\\)"):
        runs.load(A.id)


def test_a_task_says_how_the_model_did_unless_something_else_stopped_it() -> None:
    """`tickwork eval` exits 1 for the tasks that are not measured (README: a service
    refused, a check found a fault); the model's own failures are the run's answer."""
    answers = [
        result("a", Outcome.REPAIRED),
        result("b", Outcome.TESTS_FAILING),
        result("c", Outcome.NO_CHANGES),
        result("d", Outcome.FAILED, cause="LOOP"),
        result("e", Outcome.FAILED, cause="BUDGET_STEPS"),
        result("f", Outcome.REPAIRED, expected_tests="fail"),
    ]
    faults = [
        result("g", Outcome.NOT_SUBMITTED, cause="InvalidInput"),
        result("h", Outcome.TIMED_OUT, cause="timeout"),
        result("i", Outcome.CANCELLED),
        result("j", Outcome.FAILED, cause="MODEL_ERROR"),
        result("k", Outcome.FAILED, cause="INTERNAL"),
        result("l", Outcome.FAILED, cause="ENV_SETUP"),
        result("m", Outcome.REPAIRED, expected_tests="not_run"),
    ]
    assert [r.task for r in answers if not r.measured] == []
    assert [r.task for r in faults if r.measured] == []


def test_compare_gives_each_task_its_verdict_and_deltas() -> None:
    comparison = compare(A, B)
    by_task = {c.task: c for c in comparison.changes}
    assert [c.task for c in comparison.changes] == ["calc", "slug", "clamp", "gone", "new"]
    assert by_task["calc"].verdict == "broken" and by_task["slug"].verdict == "fixed"
    assert by_task["clamp"].verdict == "same" and not by_task["clamp"].outcome_changed
    assert by_task["gone"].verdict == "only_a" and by_task["new"].verdict == "only_b"
    assert by_task["calc"].delta("steps") == -1 and by_task["calc"].delta("tokens") == -3000
    assert by_task["slug"].delta("cost_usd") == pytest.approx(0.02)
    assert by_task["gone"].delta("steps") is None
    assert not comparison.same_task_set
    a, b = comparison.shared()  # over calc, slug and clamp only
    assert (a.tasks, a.repaired, b.tasks, b.repaired) == (3, 1, 3, 1)
    assert a.cost_usd == pytest.approx(0.08) and b.cost_usd == pytest.approx(0.08)


def test_parquet_of_a_run_and_of_a_comparison(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    write_parquet(tmp_path / "a.parquet", run_rows(A), RUN_COLUMNS)
    table = pq.read_table(tmp_path / "a.parquet")
    assert table.column_names == [name for name, _ in RUN_COLUMNS]
    rows = table.to_pylist()
    assert rows[0]["task"] == "calc" and rows[0]["success"] is True
    assert rows[0]["cached_tokens"] == 7000 and rows[0]["model"] == "openai:a"
    assert rows[2]["cause"] == "LOOP" and rows[2]["patch_matches"] is None
    assert str(table.schema.field("cost_usd").type) == "double"

    write_parquet(tmp_path / "c.parquet", compare_rows(compare(A, B)), COMPARE_COLUMNS)
    rows = pq.read_table(tmp_path / "c.parquet").to_pylist()
    calc = next(r for r in rows if r["task"] == "calc")
    assert (calc["outcome_a"], calc["outcome_b"], calc["verdict"]) == (
        "repaired",
        "failed",
        "broken",
    )
    assert calc["steps_delta"] == -1 and calc["tokens_delta"] == -3000
    assert calc["cost_usd_delta"] == pytest.approx(-0.02)
    new = next(r for r in rows if r["task"] == "new")
    assert new["outcome_a"] is None and new["steps_delta"] is None and new["steps_b"] == 3


def test_parquet_without_pyarrow_says_to_install_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ConfigurationError) as refused:
        write_parquet(tmp_path / "a.parquet", run_rows(A), RUN_COLUMNS)
    assert "--parquet needs pyarrow" in refused.value.message
    assert "pip install 'tickwork[parquet]'" in refused.value.message
    assert not (tmp_path / "a.parquet").exists()


def _decode(png: bytes) -> tuple[int, int, bytes]:
    """(width, height, RGB rows) of a PNG as `Canvas.png` writes it, checked chunk by chunk."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, {}
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + data), kind
        chunks[kind] = data
        at += 12 + length
    assert list(chunks) == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 2)  # 8-bit RGB
    raw = zlib.decompress(chunks[b"IDAT"])
    assert len(raw) == height * (1 + 3 * width)
    return width, height, raw


def _pixel(raw: bytes, width: int, x: int, y: int) -> tuple[int, ...]:
    row = y * (1 + 3 * width) + 1
    return tuple(raw[row + 3 * x : row + 3 * x + 3])


def test_the_chart_is_a_png_with_a_point_where_each_run_stands() -> None:
    width, height, raw = _decode(charts.chart([A, B]))
    assert (width, height) == (charts.WIDTH, charts.HEIGHT)
    # A: $0.09 for 2 of 4 repaired; B: $0.08 for 1 of 4; the x axis ends at $0.1
    assert charts.nice_ceiling(0.09 * 1.1) == pytest.approx(0.1)
    left, right, top, bottom = 80, 30, 56, 60
    plot_w, plot_h = width - left - right, height - top - bottom
    for n, (cost, share) in enumerate(((0.09, 0.5), (0.08, 0.25))):
        x = left + round(cost / 0.1 * plot_w)
        y = top + plot_h - round(share * plot_h)
        assert _pixel(raw, width, x, y) == charts.PALETTE[n], n
    assert _pixel(raw, width, 2, 2) == (255, 255, 255)
    with pytest.raises(ValueError, match="at least one run"):
        charts.chart([])


def test_a_chart_of_runs_that_cost_nothing_still_has_an_axis() -> None:
    free = run("20261201-230000-ffff", result("calc", Outcome.REPAIRED))
    width, height, _ = _decode(charts.chart([free], width=300, height=200))
    assert (width, height) == (300, 200)
    assert charts.nice_ceiling(0) == 1.0 and charts.nice_ceiling(3.2) == 5.0
    with pytest.raises(ValueError, match="1 to 10000 pixels"):
        Canvas(0, 10)
