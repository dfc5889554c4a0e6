"""The values of an evaluation run: its configuration, each task's figures, the run as
stored, and the comparison of two runs. Pure values: nothing here runs or stores a task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from tickwork.fsm.values import utc_date

#: `--model scripted`: each task plays its own `script`
SCRIPTED = "scripted"


class Outcome(StrEnum):
    """What became of one task of a run."""

    REPAIRED = "repaired"  #: completed; the final tests pass with a patch
    TESTS_FAILING = "tests_failing"  #: completed; the final tests fail
    TESTS_NOT_RUN = "tests_not_run"  #: completed; the final tests could not run
    NO_CHANGES = "no_changes"  #: completed without a patch
    FAILED = "failed"  #: dead-lettered (a budget, a loop, an error): see its cause
    CANCELLED = "cancelled"  #: cancelled by someone while the run waited
    TIMED_OUT = "timed_out"  #: not finished within the run's --timeout; the eval cancelled it
    NOT_SUBMITTED = "not_submitted"  #: the submit was refused: see its cause

    @property
    def success(self) -> bool:
        return self is Outcome.REPAIRED


class Approve(StrEnum):
    """How a run decides the calls that wait for a person."""

    ALL = "all"  #: approve each one, recorded as approver `eval`
    WAIT = "wait"  #: leave them to a person (`tickwork approve`); the run waits


#: who the decisions of `--approve all` are recorded as
APPROVER = "eval"


@dataclass(frozen=True)
class RunConfig:
    """What a run was asked to do: the model and the budgets of each session."""

    model: str
    budgets: Mapping[str, Any] = field(default_factory=dict)
    price: tuple[float, ...] | None = None
    context_window: int | None = None
    concurrency: int = 2
    approve: Approve = Approve.ALL
    #: seconds a task may take, from its submit; then it is cancelled
    timeout_s: float = 600.0
    label: str = ""

    def to_json(self) -> dict[str, Any]:
        made = asdict(self)
        made["budgets"] = dict(self.budgets)
        made["price"] = list(self.price) if self.price else None
        made["approve"] = self.approve.value
        return made

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunConfig:
        """A stored run's config; ValueError naming what has the wrong shape (a run file is
        read as untrusted, as its tasks' figures are)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"the run's config is a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        if not isinstance(kept.get("budgets", {}), Mapping):
            value = kept["budgets"]
            raise ValueError(
                f"the run's config: field `budgets` is {type(value).__name__} "
                f"{str(value)[:40]}, not a JSON object"
            )
        if kept.get("price"):
            kept["price"] = tuple(kept["price"])
        kept["approve"] = Approve(kept.get("approve", Approve.ALL))
        return cls(**kept)


#: a dead-lettered session's causes that say nothing of the model's work: the model's
#: service refused or did not answer, tickwork or the job broke, the environment could not
#: be built, a blob was corrupt
NOT_THE_MODELS = frozenset({"MODEL_ERROR", "INTERNAL", "ENV_SETUP", "ARTIFACT_CORRUPT"})


@dataclass(frozen=True)
class TaskResult:
    """One task's figures in a run."""

    task: str
    outcome: Outcome
    session_id: str | None = None
    status: str = ""
    steps: int = 0
    tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    #: the error code of a dead-lettered session (or why it was not submitted)
    cause: str = ""
    message: str = ""
    #: whether its patch changes the lines the task's expected patch does (None: no
    #: expected patch)
    patch_matches: bool | None = None
    #: the task's expected tests on its result: "pass", "fail", "not_run", or "" (none
    #: given, or the session did not complete)
    expected_tests: str = ""
    #: the end of their output, or why they could not run
    expected_tests_output: str = ""

    @property
    def success(self) -> bool:
        """Repaired, and its expected tests (if the task has any) pass."""
        return self.outcome.success and self.expected_tests in ("", "pass")

    @property
    def measured(self) -> bool:
        """Whether its figures say how the model did: not when the task was not submitted,
        timed out or was cancelled, failed for a cause of NOT_THE_MODELS, or its expected
        tests could not run."""
        if self.outcome in (Outcome.NOT_SUBMITTED, Outcome.TIMED_OUT, Outcome.CANCELLED):
            return False
        if self.outcome is Outcome.FAILED and self.cause in NOT_THE_MODELS:
            return False
        return self.expected_tests != "not_run"

    def to_json(self) -> dict[str, Any]:
        made = asdict(self)
        made["outcome"] = self.outcome.value
        return made

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskResult:
        """A stored task's figures; ValueError naming a field of the wrong type (a run file
        copied from elsewhere, or edited, is read as untrusted)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a task's result is a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        for name, types in _RESULT_TYPES.items():
            value = kept.get(name)
            if name in kept and not (
                isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
            ):
                raise ValueError(
                    f"task {str(kept.get('task'))[:64]!r}: field `{name}` is "
                    f"{type(value).__name__} {str(value)[:40]!r}, not "
                    + " or ".join("null" if t is type(None) else t.__name__ for t in types)
                )
        kept["outcome"] = Outcome(kept["outcome"])
        return cls(**kept)


#: the JSON types of a stored task's fields (a float field takes a whole number)
_RESULT_TYPES: dict[str, tuple[type, ...]] = {
    "task": (str,),
    "session_id": (str, type(None)),
    "status": (str,),
    "steps": (int,),
    "tokens": (int,),
    "cached_tokens": (int,),
    "cost_usd": (float, int),
    "wall_s": (float, int),
    "cause": (str,),
    "message": (str,),
    "patch_matches": (bool, type(None)),
    "expected_tests": (str,),
    "expected_tests_output": (str,),
}


@dataclass(frozen=True)
class Totals:
    tasks: int
    repaired: int
    steps: int
    tokens: int
    cached_tokens: int
    cost_usd: float
    wall_s: float

    @property
    def success_rate(self) -> float:
        return self.repaired / self.tasks if self.tasks else 0.0


def totals(results: Sequence[TaskResult]) -> Totals:
    return Totals(
        tasks=len(results),
        repaired=sum(r.success for r in results),
        steps=sum(r.steps for r in results),
        tokens=sum(r.tokens for r in results),
        cached_tokens=sum(r.cached_tokens for r in results),
        cost_usd=sum(r.cost_usd for r in results),
        wall_s=sum(r.wall_s for r in results),
    )


@dataclass(frozen=True)
class Run:
    """One run of a task set, as stored."""

    id: str
    started_at: datetime
    task_set: str
    task_set_digest: str
    config: RunConfig
    results: tuple[TaskResult, ...] = ()
    finished_at: datetime | None = None
    #: "running" (stored as it goes; still so if the run died), "finished", or
    #: "interrupted" (Ctrl-C: the tasks done by then)
    state: str = "finished"
    #: seconds from the first submit to the last task's end
    elapsed_s: float = 0.0

    @property
    def label(self) -> str:
        return self.config.label or self.config.model

    def result(self, task: str) -> TaskResult | None:
        return next((r for r in self.results if r.task == task), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "id": self.id,
            "started_at": utc_date(self.started_at),
            "finished_at": utc_date(self.finished_at) if self.finished_at else None,
            "state": self.state,
            "elapsed_s": self.elapsed_s,
            "task_set": self.task_set,
            "task_set_digest": self.task_set_digest,
            "config": self.config.to_json(),
            "results": [r.to_json() for r in self.results],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        if not isinstance(data, Mapping):
            raise ValueError(f"a run is a JSON object, got {type(data).__name__}")
        return cls(
            id=str(data["id"]),
            started_at=datetime.fromisoformat(data["started_at"]),
            finished_at=(
                datetime.fromisoformat(data["finished_at"]) if data.get("finished_at") else None
            ),
            state=str(data.get("state", "finished")),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            task_set=str(data["task_set"]),
            task_set_digest=str(data["task_set_digest"]),
            config=RunConfig.from_json(data["config"]),
            results=tuple(TaskResult.from_json(r) for r in data["results"]),
        )


@dataclass(frozen=True)
class Change:
    """One task in two runs: its results in each (None: not in that run)."""

    task: str
    a: TaskResult | None
    b: TaskResult | None

    @property
    def outcome_changed(self) -> bool:
        return (self.a.outcome if self.a else None) != (self.b.outcome if self.b else None)

    @property
    def verdict(self) -> str:
        """fixed (B solved what A did not), broken (the other way), changed (another
        outcome, neither solved), same, or only_a / only_b."""
        if self.a is None:
            return "only_b"
        if self.b is None:
            return "only_a"
        if self.b.success and not self.a.success:
            return "fixed"
        if self.a.success and not self.b.success:
            return "broken"
        changed = self.outcome_changed or self.a.expected_tests != self.b.expected_tests
        return "changed" if changed else "same"

    def delta(self, name: str) -> float | None:
        if self.a is None or self.b is None:
            return None
        return float(getattr(self.b, name)) - float(getattr(self.a, name))


@dataclass(frozen=True)
class Comparison:
    a: Run
    b: Run
    changes: tuple[Change, ...]

    @property
    def same_task_set(self) -> bool:
        return self.a.task_set_digest == self.b.task_set_digest

    def shared(self) -> tuple[Totals, Totals]:
        """Both runs' totals over the tasks they share."""
        both = [c for c in self.changes if c.a is not None and c.b is not None]
        return (
            totals([c.a for c in both if c.a is not None]),
            totals([c.b for c in both if c.b is not None]),
        )


def compare(a: Run, b: Run) -> Comparison:
    """Each task of either run, in run A's order, then B's new ones."""
    order = [r.task for r in a.results] + [r.task for r in b.results if a.result(r.task) is None]
    return Comparison(a, b, tuple(Change(t, a.result(t), b.result(t)) for t in order))
