"""Run a task set: one ordinary `repair` session per task, submitted through the client,
at most `concurrency` at a time, run by whatever workers serve the deployment.

The runner only submits, watches and (with `--approve all`) approves; ticks run in the
workers as for any session, so an evaluation measures the runtime users run. Each task's
figures are read from its session once it has finished: steps, tokens, cached prompt
tokens and cost as the session counted them, wall time from its creation to its last
change as the store recorded them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tickwork.fsm.errors import InvalidInput, TickworkError
from tickwork.fsm.values import Head, Status

from .checks import MAX_CHECK_S, run_expected_tests
from .model import (
    APPROVER,
    SCRIPTED,
    Approve,
    Outcome,
    Run,
    RunConfig,
    TaskResult,
)
from .tasks import Task, TaskSet, patch_matches

if TYPE_CHECKING:
    from tickwork.client import Tickwork

#: how often the runner looks at the sessions in flight
POLL_S = 0.1


@dataclass
class _InFlight:
    task: Task
    session_id: str
    started: float


def model_for(task: Task, config: RunConfig, *, task_set: str | None = None) -> str:
    """The model spec of the task's session: the run's, or with `scripted` the task's own
    script (InvalidInput naming the line of `task_set` of a task without one)."""
    if config.model != SCRIPTED:
        return config.model
    if task.script is None:
        at = f"{task_set}:{task.line}" if task_set is not None else f"line {task.line}"
        raise InvalidInput(
            f"{at}: field `script`: task {task.id!r} has none, and --model "
            "scripted plays each task's own script; give the task a `script` or name a model"
        )
    return f"scripted:{task.script}"


def run_tasks(
    client: Tickwork,
    tasks: TaskSet,
    config: RunConfig,
    *,
    run_id: str,
    own_config: Mapping[str, Any] | None = None,
    on_result: Callable[[Run, TaskResult], None] | None = None,
    watch: Callable[[], None] | None = None,
    now: Callable[[], datetime] | None = None,
) -> Run:
    """Run every task of `tasks` and return the run; `on_result` is told of each task as it
    ends (with the run so far, to store it); `watch` is called between looks and may raise
    to stop the run (a worker that died). Ctrl-C cancels the sessions in flight and
    returns the run so far, marked interrupted."""
    for task in tasks.tasks:
        model_for(task, config, task_set=tasks.path)  # a task without its script: refused
    if config.model != SCRIPTED:
        client.providers.check(config.model)  # an unknown model refuses the run, not each task
    clock = now or client.clock
    run = Run(
        id=run_id,
        started_at=clock(),
        task_set=tasks.path,
        task_set_digest=tasks.digest,
        config=config,
        state="running",
    )
    pending = list(tasks.tasks)
    flying: list[_InFlight] = []
    began = time.monotonic()

    order = {task.id: n for n, task in enumerate(tasks.tasks)}

    def finish(result: TaskResult) -> None:
        nonlocal run
        ended = sorted((*run.results, result), key=lambda r: order[r.task])  # the set's order
        run = replace(run, results=tuple(ended), elapsed_s=time.monotonic() - began)
        if on_result is not None:
            on_result(run, result)

    try:
        while pending or flying:
            while pending and len(flying) < config.concurrency:
                task = pending.pop(0)
                started = _submit(client, task, config, own_config)
                if isinstance(started, TaskResult):
                    finish(started)
                else:
                    flying.append(_InFlight(task, started, time.monotonic()))
            for item in list(flying):
                result = _look(client, item, config, run_id)
                if result is not None:
                    flying.remove(item)
                    finish(result)
            if flying:
                if watch is not None:
                    watch()
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        for item in flying:
            _cancel(client, item.session_id)
        return replace(run, state="interrupted", finished_at=clock())
    return replace(run, state="finished", finished_at=clock(), elapsed_s=time.monotonic() - began)


def _submit(
    client: Tickwork, task: Task, config: RunConfig, own_config: Mapping[str, Any] | None
) -> str | TaskResult:
    """The new session's id, or the task's result if the submit was refused."""
    try:
        head = client.submit(
            "repair",
            task.repair_input(),
            model=model_for(task, config),
            budgets=dict(config.budgets),
            price=config.price,
            context_window=config.context_window,
            own_config=dict(own_config or {}),
            submitted_by=APPROVER,
        )
    except TickworkError as exc:
        return TaskResult(
            task=task.id,
            outcome=Outcome.NOT_SUBMITTED,
            cause=type(exc).__name__,
            message=exc.message,
        )
    return head.id


def _look(client: Tickwork, item: _InFlight, config: RunConfig, run_id: str) -> TaskResult | None:
    """The task's result once its session has finished (or run out of time), else None;
    approves what waits with `--approve all`."""
    head = client.get(item.session_id)
    if head.status.terminal:
        return figures(client, item.task, head, timeout_s=config.timeout_s)
    if time.monotonic() - item.started > config.timeout_s:
        _cancel(client, item.session_id)
        result = figures(client, item.task, client.get(item.session_id))
        return replace(
            result,
            outcome=Outcome.TIMED_OUT,
            cause="timeout",
            message=f"not finished after {config.timeout_s:g}s (--timeout); cancelled",
        )
    if head.status is Status.WAITING_APPROVAL and config.approve is Approve.ALL:
        session = client.load(item.session_id)
        for call_id in head.awaiting:
            call = session.call(call_id)
            if call is None:
                continue
            # decided meanwhile, or the session moved on: seen at the next look
            with contextlib.suppress(TickworkError):
                client.approve(
                    item.session_id,
                    call_id,
                    approver=APPROVER,
                    fingerprint=call.fingerprint,
                    comment=f"tickwork eval run {run_id} (--approve all)",
                )
    return None


def _cancel(client: Tickwork, session_id: str) -> None:
    with contextlib.suppress(TickworkError):  # it finished meanwhile
        client.cancel(session_id, by=APPROVER)


def outcome_of(head: Head) -> Outcome:
    """What became of a task from its session's head."""
    if head.status is Status.FAILED:
        return Outcome.FAILED
    if head.status is Status.CANCELLED:
        return Outcome.CANCELLED
    recorded = head.result.get("outcome")
    try:
        return Outcome(recorded) if head.status is Status.COMPLETED else Outcome.TIMED_OUT
    except ValueError:
        return Outcome.NO_CHANGES if not head.result.get("patch") else Outcome.TESTS_FAILING


def figures(
    client: Tickwork, task: Task, head: Head, *, timeout_s: float = MAX_CHECK_S
) -> TaskResult:
    """The task's figures as its session counted them; a completed session's result checked
    against the task's expected patch and expected tests."""
    session = client.load(head.id)
    head = session.head
    matches = None
    if task.expected_patch is not None:
        patch = head.result.get("patch")
        matches = patch_matches(patch if isinstance(patch, str) else None, task.expected_patch)
    checked = None
    if task.expected_tests is not None and head.status is Status.COMPLETED:
        checked = run_expected_tests(client, head, task.expected_tests, timeout_s=timeout_s)
    return TaskResult(
        task=task.id,
        outcome=outcome_of(head),
        session_id=head.id,
        status=head.status.value,
        steps=head.step,
        tokens=head.tokens,
        cached_tokens=sum(s.usage.cached_prompt_tokens for s in session.steps),
        cost_usd=head.cost_usd,
        wall_s=max(0.0, (head.updated_at - head.created_at).total_seconds()),
        cause=head.error_code.value if head.error_code else "",
        message=head.error_message,
        patch_matches=matches,
        expected_tests=checked.verdict if checked else "",
        expected_tests_output=checked.detail if checked else "",
    )
