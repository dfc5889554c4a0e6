"""A repair's tests that fail whatever the session does (python-dateutil's tz tests on a
machine whose tz data differs) are pointed out: its first `run_tests`, before any change to
its files, is kept, and `show`, the API's result and the finished card say which of the
final run's failing tests failed there too. The outcome stays `tests_failing`."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from tickwork.fsm.values import Head, Observation, Session, Status, Step, ToolCall
from tickwork.store.files import Saved
from tickwork.worker.config.secrets import Masker
from tickwork.worker.jobs.repair import baseline
from tickwork.worker.observers.webhooks import finished_card

from tests.worker.ticking import Ticks
from tickwork import render, views

CALC = "def add(a, b):\n    return a - b\n"
TESTS = """\
import unittest

from calc import add


class T(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_tz(self):
        self.fail("this machine's tz data")
"""
#: appended to calc.py: the later definition wins
FIX = {
    "name": "run_command",
    "arguments": {"command": "printf 'def add(a, b):\\n    return a + b\\n' >> calc.py"},
}
RUN_TESTS = {"name": "run_tests", "arguments": {}}
#: the session's test command (`_repair`), run with `run_command` rather than `run_tests`
COMMAND = "python3 -m unittest -v"


def _repair(
    ticks: Ticks,
    replies: list[dict[str, Any]],
    tests: str = TESTS,
    *,
    command: str = COMMAND,
    **extra: Any,
) -> Head:
    project = ticks.tmp / f"project-{uuid.uuid4().hex[:6]}"
    project.mkdir()
    (project / "calc.py").write_text(CALC)
    (project / "test_calc.py").write_text(tests)
    script = ticks.tmp / f"script-{uuid.uuid4().hex[:6]}.json"
    script.write_text(json.dumps(replies))
    head = ticks.client.submit(
        "repair",
        {"workspace": str(project), "test_command": command, "setup": "none", **extra},
        model=f"scripted:{script}",
    )
    ended = ticks.run(head.id)
    assert ended.status is Status.COMPLETED, ended.error_message
    return ended


def _shown(head: Head) -> str:
    console = Console(width=400, record=True)
    for part in render.outcome(head.model_dump(mode="json"), []):
        console.print(part)
    return console.export_text()


def _listed(head: Head) -> str:
    """The session's row as `tickwork ls` draws it."""
    console = Console(width=400, record=True)
    console.print(render.sessions_table([views.head(head)]))
    return console.export_text()


def test_failing_tests_that_failed_before_any_change_are_pointed_out(ticks: Ticks) -> None:
    replies = [
        {"content": "reproduce", "tool_calls": [RUN_TESTS]},
        {"content": "fix", "tool_calls": [FIX]},
        {"content": "check", "tool_calls": [RUN_TESTS]},
        {"content": "test_tz fails whatever I do"},
    ]
    done = _repair(ticks, replies)
    result = done.result
    assert result["outcome"] == "tests_failing", result["tests"]["output"]
    assert result["tests"]["failing"] == ["test_calc.T.test_tz"]
    assert result["tests_before"]["failing"] == ["test_calc.T.test_add", "test_calc.T.test_tz"]
    assert result["tests_before"]["step"] == 1
    assert result["failed_before"] == {"count": 1, "of": 1, "tests": ["test_calc.T.test_tz"]}

    shown = _shown(done)
    assert (
        "1 of the 1 failing tests failed before any change too (in the session's first test "
        "run): test_calc.T.test_tz"
    ) in shown
    assert "tests_before" not in shown  # its ids are not dumped as raw JSON

    card = finished_card(
        done, status="completed", data={}, public_url="", at=datetime.now(UTC), masker=Masker()
    )
    assert card["session"]["outcome"] == "tests_failing"
    assert card["session"]["failed_before"] == {
        "count": 1,
        "of": 1,
        "tests": ["test_calc.T.test_tz"],
    }


def test_a_test_run_after_a_change_is_not_taken_for_one_before(ticks: Ticks) -> None:
    replies = [
        {"content": "fix first", "tool_calls": [FIX]},
        {"content": "check", "tool_calls": [RUN_TESTS]},
        {"content": "test_tz fails"},
    ]
    done = _repair(ticks, replies)
    assert done.result["outcome"] == "tests_failing"
    assert done.result["tests"]["failing"] == ["test_calc.T.test_tz"]
    assert "tests_before" not in done.result and "failed_before" not in done.result
    assert "failed before any change" not in _shown(done)
    card = finished_card(
        done, status="completed", data={}, public_url="", at=datetime.now(UTC), masker=Masker()
    )
    assert card["session"]["failed_before"] is None


def test_a_repair_whose_tests_pass_at_the_end_says_nothing_of_before(ticks: Ticks) -> None:
    passing = TESTS.replace('self.fail("this machine\'s tz data")', "pass")
    replies = [
        {"content": "reproduce", "tool_calls": [RUN_TESTS]},
        {"content": "fix", "tool_calls": [FIX]},
        {"content": "done"},
    ]
    done = _repair(ticks, replies, passing)
    assert done.result["outcome"] == "repaired", done.result["tests"]["output"]
    assert done.result["tests_before"]["failing"] == ["test_calc.T.test_add"]
    assert "failed_before" not in done.result and "failing" not in done.result["tests"]


def test_the_test_command_run_with_run_command_first_is_the_run_before(ticks: Ticks) -> None:
    # a model that reproduces with `run_command` and the session's own test command (a
    # space more or less is the same command) ran the tests as they came just the same
    replies = [
        {
            "content": "reproduce",
            "tool_calls": [
                {"name": "run_command", "arguments": {"command": "python3  -m unittest -v "}}
            ],
        },
        {"content": "fix", "tool_calls": [FIX]},
        {"content": "test_tz fails whatever I do"},
    ]
    done = _repair(ticks, replies)
    result = done.result
    assert result["outcome"] == "tests_failing", result["tests"]["output"]
    assert result["tests_before"] == {
        "step": 1,
        "call_id": "s1c0",
        "passed": False,
        "failing": ["test_calc.T.test_add", "test_calc.T.test_tz"],
    }
    assert result["failed_before"] == {"count": 1, "of": 1, "tests": ["test_calc.T.test_tz"]}
    assert "1 of the 1 failing tests failed before any change too" in _shown(done)


def test_another_command_run_first_is_not_taken_for_the_test_run(ticks: Ticks) -> None:
    # `-k test_tz` runs some of the tests: what it says of the others proves nothing
    replies = [
        {
            "content": "one test",
            "tool_calls": [
                {"name": "run_command", "arguments": {"command": f"{COMMAND} -k test_tz"}}
            ],
        },
        {"content": "fix", "tool_calls": [FIX]},
        {"content": "test_tz fails"},
    ]
    done = _repair(ticks, replies)
    assert done.result["outcome"] == "tests_failing"
    assert "tests_before" not in done.result and "failed_before" not in done.result


def _history(
    *calls: tuple[int, str, str],
    command: str = "",
    test_command: str = "pytest -q",
    errors: frozenset[int] = frozenset(),
) -> Session:
    """A session whose test command is `test_command` and whose steps each make one call
    (step, tool, its observation: an error observation for the steps of `errors`); a
    `run_command` call runs `command`."""
    now = datetime.now(UTC)
    head = Head(
        id="s",
        kind="repair",
        created_at=now,
        updated_at=now,
        model="scripted:x",
        config={"test_command": test_command},
    )
    steps = tuple(
        Step(
            step=step,
            thought="",
            at=now,
            calls=(
                ToolCall(
                    call_id=f"s{step}c0",
                    step=step,
                    index=0,
                    name=name,
                    arguments={"command": command} if name == "run_command" else {},
                    raw_arguments="{}",
                    fingerprint="f",
                ),
            ),
        )
        for step, name, _ in calls
    )
    seen = tuple(
        Observation(call_id=f"s{step}c0", content=out, at=now, is_error=step in errors)
        for step, _, out in calls
    )
    return Session(head=head, steps=steps, observations=seen)


def _saved(step: int, call_id: str) -> Saved:
    return Saved(version=1, step=step, call_id=call_id, changes={"a": None}, state="x")


def test_only_a_run_before_every_saved_change_counts() -> None:
    failed = "tests FAILED (pytest)\nFAILED t.py::test_tz\n1 failed in 0.1s"
    history = _history((1, "list_files", "a"), (2, "run_tests", failed), (3, "run_tests", failed))
    assert baseline.first_run(history, []) == {
        "step": 2,
        "call_id": "s2c0",
        "passed": False,
        "failing": ["t.py::test_tz"],
    }
    # what the run itself wrote is no change before it; a later change is none either
    assert baseline.first_run(history, [_saved(2, "s2c0"), _saved(3, "s3c0")]) is not None
    assert baseline.first_run(history, [_saved(1, "s1c0")]) is None
    assert baseline.first_run(history, [_saved(2, "s2c1")]) is None  # another call of step 2
    # a fork's start collapses its parent's kept changes at the fork's step: they may have
    # come before any of the steps it copied
    assert baseline.first_run(history, [_saved(5, "")]) is None
    # a first run whose tests did not run says nothing; the next one before a change counts
    not_run = "tests did NOT run: the shell could not find it (nope)\nexit code: 127"
    later = _history((1, "run_tests", not_run), (2, "run_tests", failed))
    assert baseline.first_run(later, [])["step"] == 2  # type: ignore[index]


def test_a_run_command_of_the_test_command_counts_as_a_test_run() -> None:
    failed = "exit code: 1\n--- stdout ---\nFAILED t.py::test_tz\n1 failed in 0.1s"
    ran = _history(
        (1, "run_command", failed),
        (2, "run_tests", "tests passed (pytest -q)"),
        command="pytest -q",
    )
    assert baseline.first_run(ran, []) == {
        "step": 1,
        "call_id": "s1c0",
        "passed": False,
        "failing": ["t.py::test_tz"],
    }
    assert baseline.first_run(ran, [_saved(1, "s1c0")]) is not None  # what it wrote itself
    # another command is not the test run; nor is the test command once a change was saved
    other = _history((1, "run_command", failed), command="pytest -q t.py")
    assert baseline.first_run(other, []) is None
    changed = _history((1, "list_files", "a"), (2, "run_command", failed), command="pytest -q")
    assert baseline.first_run(changed, [_saved(1, "s1c0")]) is None
    # a run whose tests did not run (pytest not found) says nothing; the next run counts
    missing = "exit code: 127\n--- stderr ---\n/bin/sh: 1: pytest: not found"
    later = _history(
        (1, "run_command", missing),
        (2, "run_tests", "tests FAILED (pytest -q)"),
        command="pytest -q",
    )
    assert baseline.first_run(later, [])["step"] == 2  # type: ignore[index]
    # a run_command of the test command that exited 0 passed, as a run_tests that says so
    passing = "exit code: 0\n--- stdout ---\n3 passed in 0.1s"
    first = baseline.first_run(_history((1, "run_command", passing), command="pytest -q"), [])
    assert first is not None and first["passed"] is True and first["failing"] == []
    nothing = "exit code: 5\n--- stdout ---\nno tests ran in 0.01s"
    assert (
        baseline.first_run(_history((1, "run_command", nothing), command="pytest -q"), []) is None
    )


def test_a_run_cut_short_is_not_the_run_before_any_change() -> None:
    # a `timeout` in the test command stopped it at its second test: its output names none
    # of the failures it had not reached, and `failed_before` would count too few
    command = "timeout 60 pytest -q"
    cut = f"tests FAILED ({command})\nexit code: 124\n--- stdout ---\nFAILED t.py::test_a\n"
    ended = f"tests FAILED ({command})\nexit code: 1\n--- stdout ---\nFAILED t.py::test_a\n"
    history = _history((1, "run_tests", cut), (2, "run_tests", ended), test_command=command)
    assert baseline.first_run(history, [])["step"] == 2  # type: ignore[index]
    assert baseline.first_run(history, [_saved(1, "s1c1")]) is None  # unknown: nothing said
    typed = _history(
        (1, "run_command", cut.partition("\n")[2]), command=command, test_command=command
    )
    assert baseline.first_run(typed, []) is None
    # tickwork's own time limit (or output cap) stopped it: an error observation, none
    limit = "ToolError: the command timed out after 5s and was killed\nexit code: killed\n"
    history = _history((1, "run_tests", limit), (2, "run_tests", ended), errors=frozenset({1}))
    assert baseline.first_run(history, [])["step"] == 2  # type: ignore[index]
    # a signal killed the runner (the memory limit), or pytest-timeout ended the run
    killed = "tests FAILED (pytest -q)\nexit code: 137\n--- stdout ---\nFAILED t.py::test_a\n"
    assert baseline.first_run(_history((1, "run_tests", killed)), []) is None
    banner = "+++++ Timeout +++++\n~~~~ Stack of MainThread ~~~~\n"
    hung = f"tests FAILED (pytest -q)\nexit code: 1\n--- stdout ---\n{banner}"
    assert baseline.first_run(_history((1, "run_tests", hung)), []) is None
    # pytest -x stopped at its first failure: the tests after it did not run (packaging's
    # final run failed one of them, and it read as one that had not failed before)
    stopped = "FAILED t.py::test_a\n!!!!! stopping after 1 failures !!!!!\n1 failed in 0.2s"
    first = f"tests FAILED (pytest -x)\nexit code: 1\n--- stdout ---\n{stopped}\n"
    assert (
        baseline.first_run(_history((1, "run_tests", first), test_command="pytest -x"), []) is None
    )
    # unittest's --failfast stops the same way, and says nothing of it
    command = "python3 -m unittest --failfast"
    failed = "FAIL: test_a (t.T.test_a)\n---\nRan 1 test in 0.1s\n\nFAILED (failures=1)\n"
    first = f"tests FAILED ({command})\nexit code: 1\n--- stderr ---\n{failed}"
    assert baseline.first_run(_history((1, "run_tests", first), test_command=command), []) is None


def test_a_run_tests_that_timed_out_is_not_the_run_before(ticks: Ticks) -> None:
    # the session's first run_tests passed its time limit at the hanging test: what it
    # printed of test_add is not the run of the files as they came
    hangs = TESTS.replace('self.fail("this machine\'s tz data")', "__import__('time').sleep(60)")
    replies = [
        {"content": "reproduce", "tool_calls": [RUN_TESTS]},
        {"content": "fix", "tool_calls": [FIX]},
        {"content": "the tz test hangs"},
    ]
    done = _repair(ticks, replies, hangs, test_timeout_s=3)
    assert done.result["tests"]["timed_out"] is True
    assert done.result["outcome"] == "tests_failing"
    assert "tests_before" not in done.result and "failed_before" not in done.result


def test_a_run_its_own_timeout_stopped_is_not_the_run_before(ticks: Ticks) -> None:
    # the same with the test command's own `timeout`: its run ended with exit 124, a
    # verdict (`tests FAILED`) and the output it had printed
    hangs = TESTS.replace('self.fail("this machine\'s tz data")', "__import__('time').sleep(60)")
    replies = [
        {"content": "reproduce", "tool_calls": [RUN_TESTS]},
        {"content": "fix", "tool_calls": [FIX]},
        {"content": "the tz test hangs"},
    ]
    done = _repair(ticks, replies, hangs, command=f"timeout 2 {COMMAND}")
    assert done.result["tests"]["exit_code"] == 124, done.result["tests"]
    assert done.result["outcome"] == "tests_failing"
    assert "tests_before" not in done.result and "failed_before" not in done.result


def test_a_run_command_stopped_at_collection_for_want_of_a_module_is_not_the_run_before(
    tmp_path: Path,
) -> None:
    # what `run_tests` says of its own run ("tests did NOT run: ... no module 'hypothesis'")
    # is asked of a run_command of the test command too: no test ran
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "tests").mkdir()
    stopped = (
        "exit code: 2\n--- stdout ---\nERROR tests/test_x.py\n"
        "E   ModuleNotFoundError: No module named '{}'\n"
        "!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!\n1 error in 0.49s"
    )
    ended = "tests FAILED (pytest -q)\nexit code: 1\n--- stdout ---\nFAILED t.py::test_a\n"
    lacks = _history(
        (1, "run_command", stopped.format("hypothesis")),
        (2, "run_tests", ended),
        command="pytest -q",
    )
    assert baseline.first_run(lacks, [], root=tmp_path)["step"] == 2  # type: ignore[index]
    # the project's own module that is gone is the code under repair's fault: its tests ran
    broken = _history((1, "run_command", stopped.format("mypkg.core")), command="pytest -q")
    first = baseline.first_run(broken, [], root=tmp_path)
    assert first is not None and first["failing"] == ["tests/test_x.py"]


def test_a_run_before_whose_output_was_cut_says_not_which_tests_failed(ticks: Ticks) -> None:
    # 60 failing unittest tests print far more than an observation keeps (its middle is
    # cut): the `FAIL:` headers cut out were counted as tests that had not failed before
    many = "import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n" + "".join(
        f"    def test_{i}(self):\n        self.assertEqual(add(2, 3), 5, 'x' * 400)\n"
        for i in range(60)
    )
    replies = [
        {"content": "reproduce", "tool_calls": [RUN_TESTS]},
        {"content": "change it", "tool_calls": [TIDY]},
        {"content": "still failing"},
    ]
    done = _repair(ticks, replies, many)
    assert done.result["outcome"] == "tests_failing"
    assert len(done.result["tests"]["failing"]) == 60
    before = done.result["tests_before"]
    assert before["passed"] is False and before["partial"] is True
    assert len(before["failing"]) < 60  # what the observation kept
    assert "failed_before" not in done.result
    assert "failed before any change" not in _shown(done)


def test_a_cut_pytest_run_whose_summary_was_kept_is_whole() -> None:
    note = "\n[... 30000 characters cut from the middle of 50000 ...]\n"
    summary = "=== short test summary info ===\nFAILED t.py::test_a\n1 failed in 0.1s\n"
    whole = f"tests FAILED (pytest -q)\nexit code: 1\n--- stdout ---\nF{note}E  x\n{summary}"
    first = baseline.first_run(_history((1, "run_tests", whole)), [])
    assert first is not None and "partial" not in first and first["failing"] == ["t.py::test_a"]
    cut = f"tests FAILED (pytest -q)\nexit code: 1\n--- stdout ---\n{summary[:40]}{note}d\n"
    assert baseline.first_run(_history((1, "run_tests", cut)), [])["partial"] is True  # type: ignore[index]


PASSING = TESTS.replace('self.fail("this machine\'s tz data")', "pass").replace(
    "add(2, 3), 5", "add(2, 3), -1"
)


#: a change that leaves the tests as they were
TIDY = {"name": "run_command", "arguments": {"command": "printf '# tidied\\n' >> calc.py"}}


def test_a_repaired_session_whose_tests_passed_before_any_change_says_so(ticks: Ticks) -> None:
    # pluggy with a bug no test reaches: the first run passes, the model changes code anyway,
    # and `repaired` alone would read as if it had mended a failing test
    replies = [
        {"content": "reproduce", "tool_calls": [RUN_TESTS]},
        {"content": "change it anyway", "tool_calls": [TIDY]},
        {"content": "done"},
    ]
    done = _repair(ticks, replies, PASSING)
    assert done.result["outcome"] == "repaired", done.result["tests"]["output"]
    assert done.result["tests_before"] == {
        "step": 1,
        "call_id": "s1c0",
        "passed": True,
        "failing": [],
    }
    assert (
        "the tests passed before any change too (in the session's first test run, step 1): "
        "the patch repaired no failing test; check that it is wanted"
    ) in _shown(done)
    (row,) = [line for line in _listed(done).splitlines() if line.startswith(f" {done.id} ")]
    assert "repaired" in row and "tests passed before any change too" in row, row
    card = finished_card(
        done, status="completed", data={}, public_url="", at=datetime.now(UTC), masker=Masker()
    )
    assert card["session"]["passed_before"] is True


def test_a_session_whose_changes_broke_passing_tests_says_so(ticks: Ticks) -> None:
    replies = [
        {"content": "reproduce", "tool_calls": [RUN_TESTS]},
        {"content": "a wrong fix", "tool_calls": [FIX]},
        {"content": "done"},
    ]
    done = _repair(ticks, replies, PASSING)
    assert done.result["outcome"] == "tests_failing", done.result["tests"]["output"]
    assert done.result["tests_before"]["passed"] is True
    assert done.result["failed_before"] == {"count": 0, "of": 1, "tests": []}
    assert (
        "the tests passed before any change (in the session's first test run, step 1): "
        "the session's changes made them fail"
    ) in _shown(done)


def test_a_session_whose_tests_failed_before_says_nothing_of_passing(ticks: Ticks) -> None:
    replies = [
        {"content": "reproduce", "tool_calls": [RUN_TESTS]},
        {"content": "fix", "tool_calls": [FIX]},
        {"content": "done"},
    ]
    done = _repair(ticks, replies, TESTS.replace('self.fail("this machine\'s tz data")', "pass"))
    assert done.result["tests_before"]["passed"] is False
    assert "passed before any change" not in _shown(done)
    card = finished_card(
        done, status="completed", data={}, public_url="", at=datetime.now(UTC), masker=Masker()
    )
    assert card["session"]["passed_before"] is False
