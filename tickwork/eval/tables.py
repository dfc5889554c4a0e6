"""A run and a comparison as rows: Rich tables for the terminal, flat typed rows for JSON
and Parquet (`--parquet FILE`; pyarrow is the `parquet` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from tickwork.fsm.wording import counted, usd

from .model import Change, Comparison, Outcome, Run, TaskResult, Totals, totals

OUTCOME_STYLE = {
    Outcome.REPAIRED: "green",
    Outcome.TESTS_FAILING: "yellow",
    Outcome.NO_CHANGES: "yellow",
    Outcome.TESTS_NOT_RUN: "magenta",
    Outcome.FAILED: "red",
    Outcome.CANCELLED: "dim",
    Outcome.TIMED_OUT: "red",
    Outcome.NOT_SUBMITTED: "red",
}
VERDICT_STYLE = {"fixed": "green", "broken": "red", "changed": "yellow", "same": "dim"}

#: the columns of a run's rows: (name, type) with type int, float, str, bool
RUN_COLUMNS = (
    ("run_id", "str"),
    ("model", "str"),
    ("task_set_digest", "str"),
    ("task", "str"),
    ("outcome", "str"),
    ("success", "bool"),
    ("session_id", "str"),
    ("status", "str"),
    ("steps", "int"),
    ("tokens", "int"),
    ("cached_tokens", "int"),
    ("cost_usd", "float"),
    ("wall_s", "float"),
    ("cause", "str"),
    ("message", "str"),
    ("patch_matches", "bool"),
    ("expected_tests", "str"),
    ("expected_tests_output", "str"),
)
#: the figures a comparison gives for each run and as a delta (B - A)
FIGURES = ("steps", "tokens", "cached_tokens", "cost_usd", "wall_s")
COMPARE_COLUMNS = (
    ("run_a", "str"),
    ("run_b", "str"),
    ("task", "str"),
    ("verdict", "str"),
    ("outcome_a", "str"),
    ("outcome_b", "str"),
    ("session_a", "str"),
    ("session_b", "str"),
    *(
        (f"{name}_{side}", "float" if name in ("cost_usd", "wall_s") else "int")
        for name in FIGURES
        for side in ("a", "b", "delta")
    ),
)


def run_rows(run: Run) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run.id,
            "model": run.config.model,
            "task_set_digest": run.task_set_digest,
            **r.to_json(),
            "success": r.success,
            "session_id": r.session_id,
        }
        for r in run.results
    ]


def compare_rows(comparison: Comparison) -> list[dict[str, Any]]:
    rows = []
    for c in comparison.changes:
        row: dict[str, Any] = {
            "run_a": comparison.a.id,
            "run_b": comparison.b.id,
            "task": c.task,
            "verdict": c.verdict,
            "outcome_a": c.a.outcome.value if c.a else None,
            "outcome_b": c.b.outcome.value if c.b else None,
            "session_a": c.a.session_id if c.a else None,
            "session_b": c.b.session_id if c.b else None,
        }
        for name in FIGURES:
            row[f"{name}_a"] = getattr(c.a, name) if c.a else None
            row[f"{name}_b"] = getattr(c.b, name) if c.b else None
            delta = c.delta(name)
            whole = name not in ("cost_usd", "wall_s")
            row[f"{name}_delta"] = None if delta is None else (round(delta) if whole else delta)
        rows.append(row)
    return rows


def totals_json(t: Totals) -> dict[str, Any]:
    return {
        "tasks": t.tasks,
        "repaired": t.repaired,
        "success_rate": t.success_rate,
        "steps": t.steps,
        "tokens": t.tokens,
        "cached_tokens": t.cached_tokens,
        "cost_usd": t.cost_usd,
        "wall_s": t.wall_s,
    }


def run_json(run: Run) -> dict[str, Any]:
    return {**run.to_json(), "totals": totals_json(totals(run.results))}


def compare_json(comparison: Comparison) -> dict[str, Any]:
    a, b = comparison.shared()
    return {
        "run_a": comparison.a.id,
        "run_b": comparison.b.id,
        "same_task_set": comparison.same_task_set,
        "tasks": compare_rows(comparison),
        "totals": {"a": totals_json(a), "b": totals_json(b)},
    }


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))


def _outcome(r: TaskResult | None) -> Text:
    if r is None:
        return Text("-", style="dim")
    if r.outcome.success and not r.success:
        return Text(f"{r.outcome.value} (expected tests: {r.expected_tests})", style="red")
    return Text(r.outcome.value, style=OUTCOME_STYLE.get(r.outcome, ""))


def _cost(value: float) -> str:
    return usd(value)


def _matches(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def _tests(verdict: str) -> Text:
    style = {"pass": "green", "fail": "red", "not_run": "magenta"}.get(verdict, "dim")
    return Text(verdict or "-", style=style)


def run_table(run: Run) -> Table:
    """One row a task (outcome, steps, tokens, cached tokens, cost, wall time, dead-letter
    cause, session id; whether its patch matches the expected one and its expected tests
    pass, where the task set gives them) and the totals."""
    expected = any(r.patch_matches is not None for r in run.results)
    hidden = any(r.expected_tests for r in run.results)
    table = _table(f"eval run {run.id} · {run.label} · {counted(len(run.results), 'task')}")
    right = ("STEPS", "TOKENS", "CACHED", "COST", "WALL")
    names = [
        *("TASK", "OUTCOME", *right, "CAUSE", "SESSION"),
        *(["PATCH"] if expected else []),
        *(["TESTS"] if hidden else []),
    ]
    for name in names:
        table.add_column(
            name,
            justify="right" if name in right else "left",
            no_wrap=name != "CAUSE",
            overflow="fold",
        )
    for r in run.results:
        cause = f"{r.cause}: {r.message}" if r.cause and r.message else r.cause
        table.add_row(
            Text(r.task),
            _outcome(r),
            str(r.steps),
            f"{r.tokens:,}",
            f"{r.cached_tokens:,}",
            _cost(r.cost_usd),
            f"{r.wall_s:.1f}s",
            Text(cause[:120], style="red" if r.cause else ""),
            Text(r.session_id or "-"),
            *([_matches(r.patch_matches)] if expected else []),
            *([_tests(r.expected_tests)] if hidden else []),
        )
    t = totals(run.results)
    table.add_section()
    table.add_row(
        Text("total", style="bold"),
        Text(f"{t.repaired}/{t.tasks} repaired", style="bold"),
        str(t.steps),
        f"{t.tokens:,}",
        f"{t.cached_tokens:,}",
        _cost(t.cost_usd),
        f"{t.wall_s:.1f}s",
        Text(f"{run.state}, {run.elapsed_s:.1f}s elapsed", style="dim"),
        "",
        *([""] if expected else []),
        *([""] if hidden else []),
    )
    return table


def _delta(value: float | None, *, money: bool = False, unit: str = "") -> Text:
    if value is None:
        return Text("-", style="dim")
    if money:
        shown = f"{value:+.4f}".replace("+", "+$").replace("-", "-$")
    elif unit:
        shown = f"{value:+.1f}{unit}"
    else:
        shown = f"{round(value):+,}"
    # cheaper and fewer are better: green; dearer and more: yellow
    style = "dim" if abs(value) < 1e-12 else "green" if value < 0 else "yellow"
    return Text(shown, style=style)


def compare_table(comparison: Comparison) -> Table:
    a, b = comparison.a, comparison.b
    table = _table(f"eval compare: A {a.id} ({a.label}) → B {b.id} ({b.label})")
    for name in ("TASK", "A", "B", "CHANGE", "ΔSTEPS", "ΔTOKENS", "ΔCOST", "ΔWALL"):
        table.add_column(name, justify="right" if name.startswith("Δ") else "left", no_wrap=True)
    for c in comparison.changes:
        table.add_row(*_change_cells(c))
    ta, tb = comparison.shared()
    table.add_section()
    table.add_row(
        Text("total", style="bold"),
        f"{ta.repaired}/{ta.tasks}",
        f"{tb.repaired}/{tb.tasks}",
        Text(f"{tb.repaired - ta.repaired:+d} repaired", style="bold"),
        _delta(tb.steps - ta.steps),
        _delta(tb.tokens - ta.tokens),
        _delta(tb.cost_usd - ta.cost_usd, money=True),
        _delta(tb.wall_s - ta.wall_s, unit="s"),
    )
    return table


def _change_cells(c: Change) -> Sequence[Text | str]:
    verdict = c.verdict
    return (
        Text(c.task),
        _outcome(c.a),
        _outcome(c.b),
        Text(verdict.replace("_", " "), style=VERDICT_STYLE.get(verdict, "")),
        _delta(c.delta("steps")),
        _delta(c.delta("tokens")),
        _delta(c.delta("cost_usd"), money=True),
        _delta(c.delta("wall_s"), unit="s"),
    )


def write_parquet(
    path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]
) -> int:
    """Write `rows` with typed `columns` as one Parquet file at `path`; how many rows."""
    from tickwork.exports import Format, check

    check(Format.PARQUET, asked="--parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
    schema = pa.schema([pa.field(name, types[kind]) for name, kind in columns])
    data = {name: [row.get(name) for row in rows] for name, _ in columns}
    pq.write_table(pa.Table.from_pydict(data, schema=schema), str(path), compression="zstd")
    return len(rows)
