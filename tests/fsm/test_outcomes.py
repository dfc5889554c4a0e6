"""A finished repair's outcome from its patch and its final test run (fsm/outcomes.py):
each outcome, and the precedence when several apply."""

from __future__ import annotations

from typing import Any

import pytest
from tickwork.fsm.outcomes import (
    Outcome,
    changed_tests,
    cut_short,
    hidden_failure,
    lacking_fixtures,
    missing_module,
    missing_runner,
    no_tests_ran,
    outcome_of,
    repair_outcome,
    why_tests_did_not_run,
)

PATCH = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n"
PASSED = {"command": "pytest -q", "exit_code": 0, "passed": True, "timed_out": False}
FAILED = {"command": "pytest -q", "exit_code": 1, "passed": False, "timed_out": False}
NOT_FOUND = {"command": "pytest -q", "exit_code": 127, "passed": False, "timed_out": False}
NOT_EXECUTABLE = {"command": "./run", "exit_code": 126, "passed": False, "timed_out": False}
TIMED_OUT = {"command": "pytest -q", "exit_code": None, "passed": False, "timed_out": True}
KILLED = {"command": "pytest", "exit_code": None, "passed": False, "killed": "output over"}
#: what `finish` records when the run raised (the sandbox could not start, files gone)
NO_SANDBOX = {
    "command": "pytest -q",
    "exit_code": None,
    "passed": False,
    "error": "SandboxUnavailable: bubblewrap (bwrap) is not installed",
    "not_run": "bubblewrap (bwrap) is not installed",
}

CASES: list[tuple[str, str | None, dict[str, Any] | None, bool, Outcome]] = [
    ("passed with a patch", PATCH, PASSED, False, Outcome.REPAIRED),
    ("failed with a patch", PATCH, FAILED, False, Outcome.TESTS_FAILING),
    ("timed out: they ran and did not pass", PATCH, TIMED_OUT, False, Outcome.TESTS_FAILING),
    ("killed for its output: they ran", PATCH, KILLED, False, Outcome.TESTS_FAILING),
    ("command not found (127)", PATCH, NOT_FOUND, False, Outcome.TESTS_NOT_RUN),
    ("command not executable (126)", PATCH, NOT_EXECUTABLE, False, Outcome.TESTS_NOT_RUN),
    ("the sandbox could not run", PATCH, NO_SANDBOX, False, Outcome.TESTS_NOT_RUN),
    ("no test run recorded", PATCH, None, False, Outcome.TESTS_NOT_RUN),
    ("the environment's setup failed", PATCH, PASSED, True, Outcome.TESTS_NOT_RUN),
    ("empty patch, tests pass", "", PASSED, False, Outcome.NO_CHANGES),
    ("empty patch, tests fail", "", FAILED, False, Outcome.NO_CHANGES),
    ("no patch could be made, tests pass", None, PASSED, False, Outcome.NO_CHANGES),
    # tests_not_run comes before no_changes: the run proved nothing, say that first
    ("empty patch, command not found", "", NOT_FOUND, False, Outcome.TESTS_NOT_RUN),
    ("empty patch, setup failed", "", PASSED, True, Outcome.TESTS_NOT_RUN),
]


@pytest.mark.parametrize(
    ("patch", "tests", "setup_failed", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_outcome_of_a_repair(
    patch: str | None, tests: dict[str, Any] | None, setup_failed: bool, expected: Outcome
) -> None:
    assert repair_outcome(patch=patch, tests=tests, setup_failed=setup_failed) is expected


def test_every_outcome_is_reachable() -> None:
    assert {case[-1] for case in CASES} == set(Outcome)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"outcome": "repaired", "patch": PATCH}, Outcome.REPAIRED),
        ({"outcome": "no_changes"}, Outcome.NO_CHANGES),
        ({"patch": PATCH, "tests": PASSED}, None),  # stored before outcomes: none, not a guess
        ({}, None),
        (None, None),
        ({"outcome": "fixed"}, None),  # not one we know
        ({"outcome": 3}, None),
    ],
)
def test_the_outcome_a_result_records(
    result: dict[str, Any] | None, expected: Outcome | None
) -> None:
    assert outcome_of(result) is expected


def test_test_files_are_those_in_test_folders_or_named_as_tests() -> None:
    changed = [
        "src/rect.py",
        "tests/test_rect.py",
        "pkg/conftest.py",
        "cmd/serve_test.go",
        "web/src/__tests__/app.js",
        "web/src/app.spec.ts",
        "src/testing_utils.py",  # a module named so is not a test
        "tickwork/testing/store_ticks.py",  # nor a library's testing helpers
        "docs/latest.md",
    ]
    assert changed_tests(changed) == [
        "tests/test_rect.py",
        "pkg/conftest.py",
        "cmd/serve_test.go",
        "web/src/__tests__/app.js",
        "web/src/app.spec.ts",
    ]


@pytest.mark.parametrize(
    ("command", "output", "missing"),
    [
        ("python3 -m pytest -q", "/env/bin/python3: No module named pytest", "pytest"),
        ("/env/bin/python -m unittest discover", "No module named unittest", "unittest"),
        # the tests ran and one of them imports what is missing: they failed, they ran
        ("python3 -m pytest -q", "E   ModuleNotFoundError: No module named 'attrs'", None),
        ("pytest -q", "No module named pytest", None),  # not `python -m`: the shell says 127
        ("python3 -m 'unclosed", "No module named x", None),
        # another module whose name begins with the runner's: the tests ran
        ("python3 -m pytest -q", "E   ModuleNotFoundError: No module named 'pytest_asyncio'", None),
        ("python3 -m pytest -q", "No module named pytest_asyncio", None),
        ("python -m tests.run", "No module named 'tests.helpers'", None),
        # the runner of a later -m in the command
        ("python -m pip install -e . && python -m pytest", "No module named pytest", "pytest"),
    ],
)
def test_a_missing_runner_is_told_from_a_test_that_imports_what_is_missing(
    command: str, output: str, missing: str | None
) -> None:
    assert missing_runner(command, output) == missing


PYTEST_USAGE = (
    "--- stderr ---\nERROR: usage: python -m pytest [options] [file_or_dir] [...]\n"
    "python -m pytest: error: unrecognized arguments: -n\n  inifile: /workspace/pyproject.toml\n"
)
PYTEST_INTERNAL = """\
INTERNALERROR> Traceback (most recent call last):
INTERNALERROR>   File "/tmp/s/files/tests/conftest.py", line 20, in pytest_collection_modifyitems
INTERNALERROR>     item.add_marker(pytest.mark.no_cover)
INTERNALERROR> pytest.PytestUnknownMarkWarning: Unknown pytest.mark.no_cover - is this a typo?

no tests ran in 0.18s
"""
UNITTEST_NONE = "\n" + "-" * 70 + "\nRan 0 tests in 0.000s\n\nOK\n"


@pytest.mark.parametrize(
    ("command", "exit_code", "output", "empty"),
    [
        ("python3 -m unittest -q", 0, UNITTEST_NONE, True),  # Python 3.11: exit 0
        ("python3 -m unittest -q", 5, UNITTEST_NONE.replace("OK", "NO TESTS RAN"), True),
        ("python3 -m pytest -q", 5, "\nno tests ran in 0.01s\n", True),
        ("make test", 5, "no tests ran in 0.01s", True),
        ("python3 -m unittest -q", 0, "Ran 6 tests in 0.001s\n\nOK", False),
        # two runs, one of which found tests: they ran
        ("sh run.sh", 0, "Ran 0 tests in 0.000s\nOK\nRan 3 tests in 0.001s\nOK", False),
        ("python3 -m unittest -q", 1, "Ran 0 tests in 0.000s\nFAILED (errors=1)", False),
        ("make test", 5, "make: *** [test] Error 5", False),  # not pytest's 5
        ("python3 -m pytest -q", 1, "1 failed in 0.1s", False),
        # pytest's usage error: an addopts option whose plugin is missing, a missing path
        ("python3 -m pytest -q", 4, PYTEST_USAGE, True),
        ("pytest tests/", 4, "ERROR: file or directory not found: tests/\n", True),
        ("make test", 4, "make: *** [test] Error 4", False),  # not pytest's 4
        # pytest's internal error before any test: a conftest hook that raised (python-
        # dateutil's marks `no_cover`, pytest-cov's, under filterwarnings=error without it)
        ("python3 -m pytest -q", 3, PYTEST_INTERNAL, True),
        # one after tests ran: they ran
        ("python3 -m pytest -q", 3, "INTERNALERROR> KeyError: 'x'\n1 passed in 0.1s", False),
        ("make test", 3, "INTERNALERROR> x\nno tests ran in 0.01s", False),  # not pytest's
    ],
)
def test_a_run_that_found_no_test_is_told_from_one_that_ran(
    command: str, exit_code: int, output: str, empty: bool
) -> None:
    assert (no_tests_ran(command, exit_code, output) is not None) is empty


def test_a_pytest_internal_error_says_what_raised() -> None:
    said = no_tests_ran("python3 -m pytest -q", 3, PYTEST_INTERNAL)
    assert said is not None and "exit 3" in said
    assert "PytestUnknownMarkWarning: Unknown pytest.mark.no_cover" in said


def test_a_pytest_usage_error_says_what_pytest_refused() -> None:
    said = no_tests_ran("python3 -m pytest -q", 4, PYTEST_USAGE)
    assert said is not None and "unrecognized arguments: -n" in said and "addopts" in said


@pytest.mark.parametrize(
    ("refused", "plugin"),
    [
        ("--cov=sqlparse", "pytest-cov"),
        ("--cov", "pytest-cov"),
        ("-n 4", "pytest-xdist"),
        ("-n auto --dist loadfile", "pytest-xdist"),
        ("--timeout=30", "pytest-timeout"),
        ("--benchmark-skip", "pytest-benchmark"),
        ("--reruns 2", "pytest-rerunfailures"),
        ("--doctest-plus", "pytest-doctestplus"),
        ("--frobnicate", None),
    ],
)
def test_a_pytest_usage_error_names_the_plugin_of_an_option_it_refused(
    refused: str, plugin: str | None
) -> None:
    """sqlparse tested with `--cov=sqlparse` and no pytest-cov said to check "that the
    plugins ... it needs are in the environment" without saying which: the option's plugin
    is named where it is a well-known one."""
    output = PYTEST_USAGE.replace(
        "unrecognized arguments: -n", f"unrecognized arguments: {refused}"
    )
    said = no_tests_ran("python3 -m pytest -q", 4, output)
    assert said is not None and f"unrecognized arguments: {refused}" in said
    if plugin is None:
        assert "is an option of" not in said, said
    else:
        assert f"is an option of {plugin}" in said, said
        assert "add it to the test requirements" in said


MAKE_NO_UV = "uv pip install -e .\nmake: uv: No such file or directory\n" + (
    "make: *** [Makefile:25: test] Error 127"
)
TOX_NO_NETWORK = """\
py311: install_deps> python -I -m pip install click ipython pytest pytest-cov
ERROR: No matching distribution found for click
py311: exit 1 (8.88 seconds) /workspace> python -I -m pip install click ipython pid=14
  py311: FAIL code 1 (9.69 seconds)
  evaluation failed :( (9.83 seconds)
"""
TOX_FAILED = """\
FAILED tests/test_parser.py::test_parse_stream[a=b c -expected21]
2 failed, 258 passed in 3.16s
py311: exit 1 (4.10 seconds) /workspace> pytest --cov pid=31
  py311: FAIL code 1 (12.01 seconds)
"""


@pytest.mark.parametrize(
    ("command", "output", "said"),
    [
        # dash, the sandbox's /bin/sh on Debian, and bash as sh
        ("pytest 'tests", "/bin/sh: 1: Syntax error: Unterminated quoted string", "parse"),
        ("pytest &&", "sh: -c: line 1: syntax error: unexpected end of file", "parse"),
        ("cd nowhere && pytest", "/bin/sh: 1: cd: can't cd to nowhere", "`cd` failed"),
        ("cd src && pytest", "sh: line 1: cd: src: No such file or directory", "`cd` failed"),
        ("make tset", "make: *** No rule to make target 'tset'.  Stop.", "'tset'"),
        ("make -C sub tset", "make[1]: *** No rule to make target 'tset'.  Stop.", "'tset'"),
        # a recipe's command is not installed (python-dotenv's `make test` runs `uv` first)
        ("make test", MAKE_NO_UV, "make: uv: No such file or directory"),
        ("make test", "/bin/sh: 1: uv: not found\nmake: *** [Makefile:2: test] Error 127", "uv"),
        # tox 4 with no network: its environment's pip install failed, no test ran
        ("tox -e py311", TOX_NO_NETWORK, "tox could not install"),
        # tests that ran and failed
        ("tox -e py311", TOX_FAILED, None),
        ("make test", "make: *** [Makefile:18: test] Error 1", None),
        # a file a rule needs is missing: the goal exists, its recipe's trouble is the code's
        ("make test", "make: *** No rule to make target 'gen.py', needed by 'test'.  Stop.", None),
        # a cd after the tests ran is not the command's start
        ("pytest; cd docs", "1 failed\n/bin/sh: 1: cd: can't cd to docs", None),
        ("pytest -q", "E   assert 'Syntax error: x' == ''\n1 failed", None),
    ],
)
def test_a_command_the_shell_or_make_refused_ran_no_test(
    command: str, output: str, said: str | None
) -> None:
    """`--test-cmd "make tset"`, an unclosed quote or tox with no network to install its
    environment exits non-zero having run nothing: it read as tests that ran and failed
    (`tests_failing`, or `no_changes`), not `tests_not_run`."""
    why = why_tests_did_not_run(command, 2, output)
    assert (why is None) if said is None else (why is not None and said in why), why
    tests = {"exit_code": 2, "passed": False, "not_run": why}
    expected = Outcome.TESTS_FAILING if said is None else Outcome.TESTS_NOT_RUN
    assert repair_outcome(patch="diff", tests=tests) is expected


@pytest.mark.parametrize("command", ["tox -e py311", "tox", "nox -s tests"])
def test_tox_that_is_not_installed_is_told_to_give_the_runner(command: str) -> None:
    """`--test-cmd "tox -e py311"` on pluggy ended `tests_not_run` with "is it installed in
    the session's environment?": `--setup auto` never installs tox or nox (they build
    environments of their own, with a network the test runs do not have)."""
    output = f"--- stderr ---\n/bin/sh: 1: {command.split()[0]}: not found"
    why = why_tests_did_not_run(command, 127, output) or ""
    assert "exit 127" in why and "python3 -m pytest" in why
    assert "is it installed" not in why


def test_a_failed_test_that_prints_what_a_refusal_looks_like_ran() -> None:
    """pytest exits 1 for failed tests: a test of a shell script may print the shell's
    syntax error; only bash's `cd` exits 1 when it refuses (dash's exits 2)."""
    syntax = "/bin/sh: 1: Syntax error: Unterminated quoted string\n1 failed in 0.1s"
    assert why_tests_did_not_run("python3 -m pytest", 1, syntax) is None
    bash_cd = "sh: line 1: cd: src: No such file or directory"
    assert "`cd` failed" in (why_tests_did_not_run("cd src && pytest", 1, bash_cd) or "")


@pytest.mark.parametrize(
    ("exit_code", "output", "said"),
    [
        # `pytest -q | tail -3`, `pytest; true`: the shell exits 0, pytest said it failed
        (0, "FAILED tests/test_lru.py::test_lru\n2 failed, 474 passed in 1.54s", "2 failed"),
        (0, "===== 1 failed, 518 passed, 2 warnings in 2.75s =====", "1 failed"),
        (0, "1 passed, 1 error in 0.20s", "1 error"),
        (0, "Ran 4 tests in 0.001s\n\nFAILED (failures=1)", "FAILED (failures=1)"),
        (
            0,
            "Ran 2 tests in 0.001s\n\nFAILED (failures=1, expected failures=1)",
            "FAILED (failures=1, expected failures=1)",
        ),
        # passed, or failed with the runner's own exit code: nothing is hidden
        (0, "474 passed, 24 subtests passed in 1.54s", None),
        (0, "3 passed, 1 xfailed in 0.10s", None),
        (0, "Ran 4 tests in 0.001s\n\nOK", None),
        # a project's own runner that counts none failed, in pytest's words: it passed
        (0, "test_a ... ok\n12 passed, 0 failed in 0.52s", None),
        (0, "3 passed, 0 errors in 0.05s", None),
        (0, "12 passed, 10 failed in 0.52s", "10 failed"),
        (1, "2 failed, 474 passed in 1.54s", None),
        # a passing test printed an inner run's summary (pytester, `-rP`): the last counts
        (0, "PASSED test_plugin.py::test_reports\n1 failed in 0.02s\n3 passed in 0.40s", None),
        (0, "Ran 2 tests in 0.1s\n\nFAILED (failures=1)\nRan 2 tests in 0.1s\n\nOK", None),
        (
            0,
            "Ran 2 tests in 0.1s\n\nFAILED (failures=1)\nRan 3 tests in 0.1s\n\n"
            "OK (skipped=1, expected failures=1)",
            None,
        ),
    ],
)
def test_failures_the_runner_counted_are_not_hidden_by_the_exit_code(
    exit_code: int, output: str, said: str | None
) -> None:
    """A test command whose pipe or `;` exits 0 after pytest or unittest counted failures
    (`pytest -q | tail -3`) read as a pass: the session ended `repaired`."""
    why = hidden_failure(exit_code, output)
    assert (why is None) if said is None else (why is not None and said in why), why


def test_a_hidden_failure_names_the_or_that_hid_it() -> None:
    """`pytest -q || true` was told "a pipe or a `;` exits as its last command": neither is
    in that command, so the user looked for the wrong thing."""
    why = hidden_failure(0, "2 failed, 474 passed in 1.54s")
    assert why is not None and "`|| true`" in why, why


_BANNER = "+++++++++++++++++ Timeout +++++++++++++++++\n~~~~ Stack of MainThread ~~~~\n"
_UNITTEST_FAILED = "FAIL: test_a (t.T.test_a)\n---\nRan 1 test in 0.1s\n\nFAILED (failures=1)\n"


@pytest.mark.parametrize(
    ("command", "exit_code", "output", "said"),
    [
        # a `timeout` in the test command stopped the runner before its summary
        ("timeout 60 python3 -m pytest -q", 124, "t.py::test_a FAILED\n", "own `timeout`"),
        ("timeout -s KILL 60 pytest", 137, "", "own `timeout`"),
        ("/usr/bin/timeout 5 pytest", 124, "", "own `timeout`"),
        # a signal killed the runner (the memory limit's KILL): the shell's 128 + N, or N
        ("pytest -q", 137, "", "a signal killed it (exit 137)"),
        ("pytest -q", -9, "", "a signal killed it (exit -9)"),
        # pytest-timeout's thread method ends the run at the hanging test
        ("pytest --timeout 5", 1, "t.py::test_a FAILED\n" + _BANNER, "pytest-timeout"),
        # its signal method fails the test and goes on to the summary: the run ended
        ("pytest --timeout 5", 1, _BANNER + "FAILED t.py::test_b\n2 failed in 5.1s\n", None),
        # pytest's -x or --maxfail stopped it at a failure: the tests after it did not run
        (
            "pytest -x",
            1,
            "FAILED t.py::test_a\n!!!!! stopping after 1 failures !!!!!\n1 failed in 0.2s\n",
            "pytest stopped after 1 failures (`-x` or `--maxfail`)",
        ),
        ("pytest -x", 0, "!!!!! stopping after 1 failures !!!!!\n", None),
        # unittest's -f / --failfast stops at the first failure and says nothing of it
        ("python3 -m unittest -f", 1, _UNITTEST_FAILED, "unittest stopped at its first"),
        ("python -m unittest --failfast -v", 1, _UNITTEST_FAILED, "`-f` or `--failfast`"),
        ("cd src && python3 -m unittest discover -vf", 1, _UNITTEST_FAILED, "unittest stopped"),
        ("python3 -m unittest -b -f tests.test_x", 1, _UNITTEST_FAILED, "unittest stopped"),
        # not failfast: `-k` takes the rest of its word (`-kf`: the pattern "f"), a module
        # named f, or pytest's own -f (pytest-xdist's looponfail), or a run that passed
        ("python3 -m unittest -kf", 1, _UNITTEST_FAILED, None),
        ("python3 -m unittest -v tests/f.py", 1, _UNITTEST_FAILED, None),
        ("python3 -m unittest -f", 0, "Ran 3 tests in 0.1s\n\nOK\n", None),
        ("python3 -m unittest -v", 1, _UNITTEST_FAILED, None),
        # a run that exited 0 passed: a banner printed on the way (a script's earlier,
        # ignored pytest run; a test's own output) and no pytest summary after it cut nothing
        ("./run_tests.sh", 0, _BANNER + "Ran 3 tests in 0.1s\n\nOK\n", None),
        # a run that ended by itself, a `timeout` of another exit, or 124 of another program
        ("timeout 60 pytest -q", 1, "FAILED t.py::test_a\n1 failed in 0.1s\n", None),
        ("pytest -q", 124, "", None),
        ("pytest -q", 0, "3 passed in 0.1s", None),
        ("pytest -q", 2, "", None),
        # tickwork killed it itself: no exit code, no verdict to ask about
        ("timeout 60 pytest -q", None, "", None),
    ],
)
def test_a_run_cut_short_names_only_the_failures_it_reached(
    command: str, exit_code: int | None, output: str, said: str | None
) -> None:
    """A test run that a timer or a signal stopped before its runner's summary was taken
    for the repair's run before any change, and its `failed_before` counted too few."""
    why = cut_short(command, exit_code, output)
    assert (why is None) if said is None else (why is not None and said in why), why


_STOPPED = (
    "E   ModuleNotFoundError: No module named '{}'\n"
    "!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!\n1 error in 0.49s"
)


@pytest.mark.parametrize(
    ("exit_code", "output", "missing"),
    [
        # a test requirement the environment lacks (boltons, tabulate): no test ran
        (2, _STOPPED.format("pytz"), "pytz"),
        (2, _STOPPED.format("hypothesis.strategies"), "hypothesis.strategies"),
        # the project's own module is gone: the code under repair is broken
        (2, _STOPPED.format("mypkg.sub"), None),
        (2, _STOPPED.format("mypkg") + "\n" + _STOPPED.format("pytz"), None),
        # not a collection stop: a test that imports in its body ran, and failed
        (1, "E   ModuleNotFoundError: No module named 'pytz'\n1 failed in 0.1s", None),
        (
            2,
            "E   ImportError: cannot import name 'x' from 'mypkg'\nInterrupted: 1 error "
            "during collection",
            None,
        ),
    ],
)
def test_a_module_the_environment_lacks_stopped_the_tests(
    exit_code: int, output: str, missing: str | None
) -> None:
    """pytest stopped at collection for want of a module the environment lacks read as
    failing tests (`tests_failing`), though none ran."""
    assert missing_module(exit_code, output, {"mypkg", "tests"}) == missing
    why = why_tests_did_not_run("python3 -m pytest", exit_code, output, own=lambda: {"mypkg"})
    assert (why is None) if missing is None else (f"{missing!r}" in (why or ""))


def test_a_missing_module_is_named_as_python_named_it() -> None:
    """The reason read "the session's environment has no module 'hypothesis' (No module
    named), which ...": a fragment of Python's message, cut where the name was."""
    why = why_tests_did_not_run("pytest", 2, _STOPPED.format("hypothesis"), own=frozenset) or ""
    assert "(Python says: No module named 'hypothesis')" in why
    assert "(No module named)" not in why


def test_a_missing_module_says_when_setup_had_no_network() -> None:
    output = _STOPPED.format("pytz")
    online = why_tests_did_not_run("pytest", 2, output, own=frozenset) or ""
    offline = why_tests_did_not_run("pytest", 2, output, own=frozenset, setup_online=False) or ""
    assert "test requirements" in online and "no network" not in online
    assert "setup had no network" in offline
    assert why_tests_did_not_run("pytest", 2, output) is None  # the project's modules unknown


def test_the_projects_modules_are_asked_only_of_a_run_stopped_at_collection() -> None:
    """`own` walks the working copy: a run that passed, failed or refused its command has
    no use for it."""
    asked: list[str] = []

    def own() -> frozenset[str]:
        asked.append("own")
        return frozenset({"mypkg"})

    def online() -> bool:
        asked.append("online")
        return True

    for code, output in ((0, "3 passed in 0.1s"), (1, "1 failed in 0.1s"), (4, "error: x")):
        why_tests_did_not_run("pytest", code, output, own=own, setup_online=online)
    assert asked == []
    why = why_tests_did_not_run("pytest", 2, _STOPPED.format("pytz"), own=own, setup_online=online)
    assert "'pytz'" in (why or "") and asked == ["own", "online"]


def test_a_missing_module_the_project_declares_is_not_to_be_declared_again() -> None:
    """A module the project declares, that setup could not install (no network), was met
    with "add it to the project's test requirements", where it is already."""
    output = _STOPPED.format("pytz")
    note = "setup had no network (TICKWORK_EGRESS_ALLOW is empty), so it installed only ..."
    environment = {"key": "0123456789abcdef", "missing": ["pytz"], "note": note}
    why = why_tests_did_not_run("pytest", 2, output, own=frozenset, environment=environment) or ""
    assert "'pytz'" in why and f"the project declares it, but {note}" in why
    assert "test requirements" not in why
    environment = {"key": "0123456789abcdef", "missing": ["pytz"]}
    why = why_tests_did_not_run("pytest", 2, output, own=frozenset, environment=environment) or ""
    assert "setup did not install it" in why and "tickwork env show 0123456789ab" in why


def test_a_missing_module_the_project_declares_in_an_extra_auto_skips_names_it() -> None:
    """idna keeps pytest and hypothesis in its `all` extra (beside ruff, mypy, ty), which
    `auto` does not install: "add it to the project's test requirements" asked for what the
    project has; the reason names the extra and the setup that installs it."""
    output = _STOPPED.format("hypothesis")
    environment = {"key": "0123456789abcdef", "missing": [], "elsewhere": {"hypothesis": "all"}}
    why = why_tests_did_not_run("pytest", 2, output, own=frozenset, environment=environment) or ""
    assert "'hypothesis'" in why and "its `all` extra" in why, why
    assert "--setup \"/env/bin/pip install -e '.[all]' pytest\"" in why, why
    assert "add it to the project's test requirements" not in why


def test_a_missing_module_is_found_in_an_extra_by_the_distribution_that_provides_it() -> None:
    """pyparsing's tests import `railroad`, which its `diagrams` extra declares as the
    distribution railroad-diagrams."""
    output = _STOPPED.format("railroad")
    elsewhere = {"railroad-diagrams": "diagrams", "jinja2": "diagrams"}
    environment = {"key": "0123456789abcdef", "missing": [], "elsewhere": elsewhere}
    why = why_tests_did_not_run("pytest", 2, output, own=frozenset, environment=environment) or ""
    assert "declares it (railroad-diagrams) in its `diagrams` extra" in why, why
    assert "pip install -e '.[diagrams]'" in why, why


_RULE, _DASHES = "=" * 70, "-" * 70


def _unittest(*reports: str, ran: int | None = None) -> str:
    """unittest's output of a run whose tests are `reports` (each a header, its rule and
    what it printed), as Python 3.11 to 3.13 print it."""
    count = len(reports) if ran is None else ran
    body = "".join(f"{_RULE}\n{report}\n\n" for report in reports)
    ran = f"Ran {count} test{'s' * (count != 1)} in 0.000s"
    return f"{body}{_DASHES}\n{ran}\n\nFAILED (errors={len(reports)})\n"


def _unimported(name: str, *frames: str, raised: str) -> str:
    """The report of a test module unittest could not import (`_FailedTest`)."""
    loader = '  File "/usr/lib/python3.11/unittest/loader.py", line 162, in loadTestsFromName\n'
    trace = "".join(f'  File "{frame}", line 1, in <module>\n    import x\n' for frame in frames)
    return (
        f"ERROR: {name} (unittest.loader._FailedTest.{name})\n{_DASHES}\n"
        f"ImportError: Failed to import test module: {name}\n"
        f"Traceback (most recent call last):\n{loader}    module = __import__(module_name)\n"
        f"{trace}{raised}\n"
    )


#: `python3 -m unittest -q tests.test_mroe`: more-itertools' tests.test_more misspelled
MISSPELLED = _unimported(
    "test_mroe", raised="ModuleNotFoundError: No module named 'tests.test_mroe'"
)
#: a test module that imports the code under repair, which the session broke
BROKEN = _unimported(
    "tests.test_more",
    "/workspace/tests/test_more.py",
    "/workspace/mypkg/more.py",
    raised="SyntaxError: invalid syntax",
)
#: `python3 -m unittest -q tests.test_more.Nope`
NO_CLASS = (
    f"ERROR: Nope (unittest.loader._FailedTest.Nope)\n{_DASHES}\n"
    "AttributeError: module 'tests.test_more' has no attribute 'Nope'\n"
)


def _wanting(module: str) -> str:
    """The report of a test module that imports `module`, which Python could not find."""
    return _unimported(
        "tests.test_more",
        "/workspace/tests/test_more.py",
        raised=f"ModuleNotFoundError: No module named '{module}'",
    )


@pytest.mark.parametrize(
    ("output", "said"),
    [
        pytest.param(
            _unittest(MISSPELLED), "(test_mroe: No module named 'tests.test_mroe')", id="misspelled"
        ),
        pytest.param(_unittest(NO_CLASS), "(Nope: no such attribute)", id="no_such_test_class"),
        pytest.param(
            _unittest(_wanting("pytz")),
            "unittest could not import its test modules: the session's environment has no "
            "module 'pytz'",
            id="a_module_the_environment_lacks",
        ),
        pytest.param(
            _unittest(MISSPELLED, _wanting("pytz")),
            "unittest could not import its test modules: the session's environment has no "
            "module 'pytz'",
            id="one_misspelled_and_one_wanting",
        ),
        # the code under repair is broken: its tests ran as far as they could, and failed
        pytest.param(_unittest(BROKEN), None, id="a_syntax_error_in_the_code_under_test"),
        pytest.param(_unittest(_wanting("mypkg.gone")), None, id="a_module_of_its_own_is_gone"),
        pytest.param(_unittest(MISSPELLED, BROKEN), None, id="one_misspelled_and_one_broken"),
        # tests of the project's ran beside the one unittest could not load
        pytest.param(_unittest(MISSPELLED, ran=5), None, id="other_tests_ran"),
    ],
)
def test_a_unittest_run_that_loaded_none_of_its_tests_ran_none(
    output: str, said: str | None
) -> None:
    """`python3 -m unittest -q tests.test_mroe` (a typo) ended `tests_failing`: unittest
    ran its `_FailedTest` for the module it could not import, "Ran 1 test", exit 1. No
    test ran, as pytest's "file or directory not found" (`tests_not_run`) says of the same
    typo. A test module that exists but fails to import for the code under repair (a
    SyntaxError, a module of the project's own gone) is `tests_failing`, as pytest's
    collection errors are."""
    command = "python3 -m unittest -q tests.test_mroe"
    why = why_tests_did_not_run(command, 1, output, own=lambda: {"mypkg", "tests"})
    assert (why is None) if said is None else (said in (why or "")), why
    tests = {"command": command, "exit_code": 1, "passed": False, "not_run": why}
    expected = Outcome.TESTS_FAILING if said is None else Outcome.TESTS_NOT_RUN
    assert repair_outcome(patch=PATCH, tests=tests) is expected
    # a run of none that exited 0 is not asked: it passed
    assert why_tests_did_not_run(command, 0, _unittest(MISSPELLED), own=frozenset) is None


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ("E       fixture 'mocker' not found\n", "'mocker' (of pytest-mock)"),
        (
            "E       fixture 'benchmark' not found\nE       fixture 'mocker' not found\n"
            "E       fixture 'mocker' not found\n",
            "'benchmark' (of pytest-benchmark), 'mocker' (of pytest-mock):",
        ),
        ("E       fixture 'my_own' not found\n", None),
        ("assert fixture 'mocker' not found in text\n", None),
    ],
    ids=["one", "two, each once", "the project's own", "not pytest's line"],
)
def test_a_plugin_s_fixture_pytest_lacked_is_named(output: str, said: str | None) -> None:
    found = lacking_fixtures(output)
    assert (found is None) if said is None else (said in str(found)), found
