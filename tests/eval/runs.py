"""Runs made by hand for the tests of storing, comparing, exporting and charting them."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwork.eval.model import Outcome, Run, RunConfig, TaskResult


def result(task: str, outcome: Outcome, **figures: object) -> TaskResult:
    made: dict[str, object] = {"session_id": f"s-{task}", "steps": 3, "tokens": 1000}
    made.update(figures)
    return TaskResult(task=task, outcome=outcome, **made)  # type: ignore[arg-type]


def run(run_id: str, *results: TaskResult, model: str = "openai:a", digest: str = "d1") -> Run:
    return Run(
        id=run_id,
        started_at=datetime(2026, 12, 1, 20, 0, tzinfo=UTC),
        finished_at=datetime(2026, 12, 1, 20, 5, tzinfo=UTC),
        task_set="tasks.jsonl",
        task_set_digest=digest,
        config=RunConfig(model=model, budgets={"max_steps": 10}, price=(1.0, 2.0)),
        results=results,
        elapsed_s=12.5,
    )
