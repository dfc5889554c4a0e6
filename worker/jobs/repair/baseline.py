"""A repair's test run before any change: which tests failed in the files as they came.

The job runs no test of its own before the model's first call; the model is told to run
the tests first (`run_tests`, the same command as the final run). Its first `run_tests`
whose tests ran, if no change to the session's files was saved before it (a change the
test run itself made counts as none), is the run before any change. The repair's result
keeps its failing tests (`tests_before`) and says which of the final run's failing tests
failed there too (`failed_before`, `tickwork.fsm.failures`). A session whose files changed
before any such run has none: nothing is said. A fork's start (its parent's kept changes,
collapsed at its fork step) counts as a change before every step it copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tickwork.fsm.failures import failing_tests
from tickwork.fsm.values import Session
from tickwork.store.files import Saved

__all__ = ["RUN_TESTS", "first_run"]

#: the tool that runs the session's test command
RUN_TESTS = "run_tests"
#: how `run_tests` begins an observation of tests that ran (`toolkit.run_tests`)
_RAN = ("tests FAILED", "tests passed")


def first_run(session: Session, changes: Sequence[Saved]) -> dict[str, Any] | None:
    """The session's first `run_tests` whose tests ran before any change to its files was
    saved (`changes`, in any order): its step, call and failing tests; None if there was
    none (no such call, or the files had changed before every one)."""
    seen = {o.call_id: o for o in session.observations}
    for step in sorted(session.steps, key=lambda s: s.step):
        for call in sorted(step.calls, key=lambda c: c.index):
            if call.name != RUN_TESTS:
                continue
            if any(_before(saved, call.step, call.call_id) for saved in changes):
                return None
            observation = seen.get(call.call_id)
            if observation is None or observation.is_error:
                continue
            if not observation.content.startswith(_RAN):
                continue  # the tests did not run: it says nothing of them
            return {
                "step": call.step,
                "call_id": call.call_id,
                "failing": failing_tests(observation.content),
            }
    return None


def _before(saved: Saved, step: int, call_id: str) -> bool:
    """Whether a saved change may have come before the call `call_id` of `step`: one of
    an earlier step, or of another call of the same step (the order of a step's calls is
    not what its ticks ran in when a person decided them one by one), or a fork's start
    (no call: what its parent's kept calls did, collapsed at the fork's step, whenever
    they ran)."""
    if not saved.call_id:
        return True
    return saved.step < step or (saved.step == step and saved.call_id != call_id)
