"""A repair's test run before any change: which tests failed in the files as they came.

The job runs no test of its own before the model's first call; the model is told to run
the tests first (`run_tests`, the same command as the final run). Its first test run whose
tests ran, if no change to the session's files was saved before it (a change the test run
itself made counts as none), is the run before any change: a `run_tests`, or a
`run_command` of the session's test command itself (a model that reproduces the failure
the way it would by hand; another command, `pytest -k one_test`, says nothing of the
others). The repair's result keeps whether its tests passed and its failing tests
(`tests_before`) and says which of the final run's failing tests failed there too
(`failed_before`, `tickwork.fsm.failures`), or that the tests passed before the session
changed anything (`passed_before_line`). A session whose files changed before any such run
has none: nothing is said. A fork's start (its parent's kept changes, collapsed at its fork
step) counts as a change before every step it copied.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tickwork.fsm.failures import failing_tests
from tickwork.fsm.outcomes import cut_short
from tickwork.fsm.transitions import kept_end
from tickwork.fsm.values import Session, ToolCall
from tickwork.store.files import Saved
from tickwork.worker.jobs.repair.toolkit import why_not_run

__all__ = ["RUN_COMMAND", "RUN_TESTS", "first_run"]

#: the tool that runs the session's test command
RUN_TESTS = "run_tests"
#: the tool that runs any command: the test command too, when the model types it
RUN_COMMAND = "run_command"
#: how `run_tests` begins an observation of tests that ran (`toolkit.run_tests`)
_RAN = ("tests FAILED", "tests passed")
#: how `run_tests` begins one whose tests passed
_PASSED = "tests passed"
#: how a command's output begins (`ShellResult.describe`): `run_command`'s observation, and
#: `run_tests`' after its verdict line
_EXIT = re.compile(r"exit code: (-?\d+)\n")


def first_run(
    session: Session,
    changes: Sequence[Saved],
    *,
    root: Path | None = None,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The session's first test run (`run_tests`, or `run_command` of its test command)
    whose tests ran to their end before any change to its files was saved (`changes`, in
    any order): its step, call, whether its tests passed and its failing tests; None if
    there was none (no such call, or the files had changed before every one). `root` (the
    session's working copy: the project's own modules) and `environment` (its environment
    record) are what a `run_command` of the test command is asked with, as `run_tests` is."""
    seen = {o.call_id: o for o in session.observations}
    command = _test_command(session.head.config.get("test_command"))
    asked = {"config": session.head.config, "root": root, "environment": environment}
    for step in sorted(session.steps, key=lambda s: s.step):
        for call in sorted(step.calls, key=lambda c: c.index):
            if not (call.name == RUN_TESTS or _runs(call, command)):
                continue
            if any(_before(saved, call.step, call.call_id) for saved in changes):
                return None
            observation = seen.get(call.call_id)
            if observation is None or observation.is_error:
                continue
            if not _ran(call, command, observation.content, **asked):
                continue  # the tests did not run, or not to their end: it says too little
            passed = _passed(call, observation.content)
            found = {
                "step": call.step,
                "call_id": call.call_id,
                "passed": passed,
                "failing": failing_tests(observation.content),
            }
            if not passed and _summary_cut(observation.content):
                found["partial"] = True  # the ids of some failing tests were cut out
            return found
    return None


def _test_command(value: Any) -> list[str] | None:
    """The session's test command as the shell splits it (`config.test_command`, a string
    or a list of words); None without one, or one the shell cannot split."""
    if isinstance(value, list | tuple) and all(isinstance(word, str) for word in value):
        return list(value) or None
    if not isinstance(value, str):
        return None
    try:
        return shlex.split(value) or None
    except ValueError:  # unbalanced quotes: no command typed can be taken for it
        return None


def _runs(call: ToolCall, command: list[str] | None) -> bool:
    """Whether `call` is a `run_command` of the session's test command `command`, word for
    word (spaces and quoting aside)."""
    typed = call.arguments.get("command")
    if command is None or call.name != RUN_COMMAND or not isinstance(typed, str):
        return False
    try:
        return shlex.split(typed) == command
    except ValueError:
        return False


def _ran(
    call: ToolCall,
    command: list[str] | None,
    content: str,
    *,
    config: Mapping[str, Any],
    root: Path | None,
    environment: Mapping[str, Any] | None,
) -> bool:
    """Whether the observation `content` of a test run says its tests ran to their end:
    `run_tests` says whether they ran itself; of a `run_command`, `why_not_run` as
    `run_tests` asks it (the shell found no runner, pytest stopped at collection on a module
    the environment lacks, none was collected); of either, that nothing cut it short."""
    typed = shlex.join(command) if command else str(config.get("test_command") or "")
    if call.name == RUN_TESTS:
        if not content.startswith(_RAN):
            return False
        output = _after_verdict(content, config.get("test_command"))
    else:
        output = content
    exit_code = _EXIT.match(output)
    if exit_code is None:
        return call.name == RUN_TESTS  # a run_command killed by tickwork: no verdict
    code = int(exit_code.group(1))
    if call.name == RUN_COMMAND and why_not_run(
        typed, code, output, config=config, root=root, environment=environment
    ):
        return False
    return cut_short(typed, code, output) is None


def _after_verdict(content: str, test_command: Any) -> str:
    """The command's output in a `run_tests` observation: what follows its verdict line,
    `tests FAILED (COMMAND)` (the command may span lines)."""
    if isinstance(test_command, list | tuple):
        test_command = shlex.join(test_command)
    said = f" ({test_command})\n"
    at = content.find(said) if isinstance(test_command, str) else -1
    return content[at + len(said) :] if at >= 0 else content.partition("\n")[2]


#: pytest's header over its short test summary, the ids `failing_tests` reads
_SUMMARY = "short test summary info"


def _summary_cut(content: str) -> bool:
    """Whether the observation `content` was cut in the middle (its tool's output cap:
    `cap_output`) where it may have held ids of failing tests: unittest's `FAIL:` headers
    lie all along its output; pytest's short summary is whole when its header was kept."""
    end = kept_end(content)
    return end is not None and _SUMMARY not in end


def _passed(call: ToolCall, content: str) -> bool:
    """Whether the tests of a run that ran (`_ran`) passed: `run_tests` says so; a
    `run_command` of the test command exited 0."""
    if call.name == RUN_TESTS:
        return content.startswith(_PASSED)
    exit_code = _EXIT.match(content)
    return exit_code is not None and int(exit_code.group(1)) == 0


def _before(saved: Saved, step: int, call_id: str) -> bool:
    """Whether a saved change may have come before the call `call_id` of `step`: one of
    an earlier step, or of another call of the same step (the order of a step's calls is
    not what its ticks ran in when a person decided them one by one), or a fork's start
    (no call: what its parent's kept calls did, collapsed at the fork's step, whenever
    they ran)."""
    if not saved.call_id:
        return True
    return saved.step < step or (saved.step == step and saved.call_id != call_id)
