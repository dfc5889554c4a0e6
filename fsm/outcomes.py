"""What a finished repair session achieved: its `outcome` (issue 22).

A session that finished is `completed` whatever it produced; the outcome says whether it
repaired anything, so a list of sessions never shows a failed repair like a success:

- `repaired`: the final test run passed and the patch is not empty;
- `tests_failing`: the final tests ran and failed (or ran past their time limit, or were
  killed for their output: they ran, and did not pass), also when the command exited 0
  but the runner's own summary says tests failed (`hidden_failure`: a pipe such as
  `pytest | tail` exits as its last command);
- `tests_not_run`: the final tests could not run: the environment's setup failed, the
  command was not found (exit 126 or 127 from the shell), the shell, make or tox refused
  it (`refused_command`: a syntax error, a leading `cd` that failed, a make goal no rule
  makes or a recipe command not installed, tox that could not install its environment),
  a `python -m RUNNER` command's runner is not installed (`missing_runner`), pytest stopped
  at collection on a module the environment lacks that is not the project's own
  (`missing_module`), the sandbox could not start, or the runner found no test to run
  (`no_tests_ran`: unittest's "Ran 0 tests", pytest's exit 5, or its exit 4, a usage
  error: an option of `addopts` no plugin takes, a conftest that fails, or its exit 3, an
  internal error before any test: a conftest hook that raised), or unittest loaded none of
  its tests (every test it ran a `_FailedTest` for a name that is not there, a misspelled
  test module, or for a module the environment lacks; a test module that the code under
  repair broke, a SyntaxError, is `tests_failing`, as pytest's collection error is);
- `no_changes`: the patch is empty (or could not be made: there is none to apply).

When several apply, the first of this order wins:
`tests_not_run` > `no_changes` > `tests_failing` > `repaired`.
A run that proved nothing about the code says so first (fix the environment, then look
at the rest); then an empty patch, whatever the tests say (nothing to review or apply:
passing tests with no change means there was nothing to repair, failing ones that the
session gave up); then a patch whose tests still fail.

Sessions stored before outcomes existed have none: `outcome_of` gives None (shown `-`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any

from tickwork.fsm.failures import Unloaded, unloaded_tests

__all__ = [
    "NONE_LABEL",
    "NOT_FOUND_EXIT_CODES",
    "Outcome",
    "changed_tests",
    "cut_short",
    "hidden_failure",
    "lacking_fixtures",
    "missing_module",
    "missing_runner",
    "no_tests_ran",
    "outcome_of",
    "refused_command",
    "repair_outcome",
    "why_tests_did_not_run",
]


class Outcome(StrEnum):
    REPAIRED = "repaired"
    TESTS_FAILING = "tests_failing"
    TESTS_NOT_RUN = "tests_not_run"
    NO_CHANGES = "no_changes"


#: the shell's exit codes for a command it could not find (127) or not execute (126)
NOT_FOUND_EXIT_CODES = frozenset({126, 127})
#: the metric label of a completed session without an outcome (another job kind, or older)
NONE_LABEL = "none"


def tests_not_run(tests: Mapping[str, Any] | None) -> bool:
    """Whether the final test run never got to run the tests."""
    if not tests:
        return True
    if tests.get("not_run") or tests.get("error"):
        return True
    if tests.get("timed_out") or tests.get("killed"):
        return False  # they ran, and were stopped: they did not pass
    code = tests.get("exit_code")
    return code is None or code in NOT_FOUND_EXIT_CODES


def repair_outcome(
    *, patch: str | None, tests: Mapping[str, Any] | None, setup_failed: bool = False
) -> Outcome:
    """The outcome of a repair from its patch (None: it could not be made) and its final
    test run (`run_final_tests`' record); `setup_failed` when its environment could not be
    built (the ENV_SETUP hook)."""
    if setup_failed or tests_not_run(tests):
        return Outcome.TESTS_NOT_RUN
    if not patch:
        return Outcome.NO_CHANGES
    assert tests is not None  # tests_not_run said so otherwise
    if tests.get("passed") is True and not tests.get("timed_out"):
        return Outcome.REPAIRED
    return Outcome.TESTS_FAILING


def outcome_of(result: Mapping[str, Any] | None) -> Outcome | None:
    """The outcome a session's result records, or None (none recorded, or not one we know)."""
    value = (result or {}).get("outcome")
    try:
        return Outcome(value) if isinstance(value, str) else None
    except ValueError:
        return None


#: folders that hold tests, by the common conventions of Python, JavaScript, Go, Rust, Java
TEST_FOLDERS = frozenset({"test", "tests", "__tests__", "spec", "specs"})
_TEST_FILE = re.compile(
    r"(test_.*\.py|.*_test\.py|conftest\.py|.*_test\.go|.*\.(test|spec)\.[cm]?[jt]sx?)"
)


def changed_tests(paths: Iterable[str]) -> list[str]:
    """Those of `paths` (a patch's changed files) that look like tests: in a folder named
    as tests are (`tests/`, `__tests__/`, ...) or named as test files are (`test_*.py`,
    `*_test.go`, `*.spec.ts`, ...). A repair whose tests pass after changing them may have
    made the tests pass rather than the code: its result lists them (`tests_changed`)."""
    found = []
    for path in paths:
        parts = PurePosixPath(path).parts
        if any(p in TEST_FOLDERS for p in parts[:-1]) or (
            parts and _TEST_FILE.fullmatch(parts[-1])
        ):
            found.append(path)
    return found


def missing_runner(command: str, output: str) -> str | None:
    """The module of a `python -m MODULE ...` test command if its output says Python has no
    such module (the test runner is not installed: the tests never ran), else None."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, word in enumerate(words[:-1]):
        if word == "-m" and PurePosixPath(words[max(i - 1, 0)]).name.startswith("python"):
            module = words[i + 1]
            top = module.split(".")[0]
            # Python says it of the -m module unquoted ("python3: No module named pytest"),
            # and whole: a test's own failed import is quoted, or another name
            names = "|".join(re.escape(n) for n in {module, top})
            if re.search(rf"No module named (?:{names})(?![\w.'])", output):
                return module
    return None


#: Python's word for a module it could not import; pytest's for a run it stopped at collection
_NO_MODULE = re.compile(r"\bNo module named '?([\w.]+)'?")
_COLLECTION_STOPPED = re.compile(r"Interrupted: \d+ errors? during collection")


def missing_module(exit_code: int | None, output: str, own: Collection[str]) -> str | None:
    """The module a pytest run stopped at collection for want of (exit 2, `Interrupted: N
    errors during collection`, `No module named 'X'`) when none it could not import is one
    of the project's own top-level modules or packages (`own`): the environment lacks it and
    no test ran. A module of the project's own that is missing is the code under repair's
    fault: its tests ran as far as they could, and failed. Else None."""
    names = _wanted_at_collection(exit_code, output)
    if not names or any(name.split(".")[0] in own for name in names):
        return None
    return names[0]


def _wanted_at_collection(exit_code: int | None, output: str) -> tuple[str, ...]:
    """The modules a pytest run stopped at collection for want of, in the order it named
    them; none if it did not stop there."""
    if exit_code != 2 or not _COLLECTION_STOPPED.search(output):
        return ()
    return tuple(dict.fromkeys(str(name) for name in _NO_MODULE.findall(output)))


#: unittest's count line, and pytest's exit codes for "no tests collected" and for a usage
#: error (an option or path it refuses, a conftest that fails to import: it ran no test)
_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
PYTEST_NO_TESTS, PYTEST_USAGE_ERROR, PYTEST_INTERNAL_ERROR = 5, 4, 3
_PYTEST_REFUSAL = re.compile(r"error: (?!usage:)|while loading conftest", re.IGNORECASE)
#: pytest's closing line when it ran no test, and the last line of its internal error's trace
_PYTEST_NONE_RAN = re.compile(r"^=*\s*no tests ran\b", re.MULTILINE)
_INTERNAL = re.compile(r"^INTERNALERROR> (\S.*)$", re.MULTILINE)


def no_tests_ran(command: str, exit_code: int | None, output: str) -> str | None:
    """Why a test run proved nothing, if its runner says it found no test: unittest ran 0
    (which exits 0 before Python 3.12: it looked like a pass), pytest exited 5 ("no tests
    ran"), 4 (a usage error: it refused its options or paths, or a conftest failed to
    import, before any test) or 3 with "no tests ran" (an internal error before any test:
    a conftest hook that raised); else None."""
    counts = [int(n) for n in _RAN.findall(output)]
    if counts and not any(counts) and exit_code in (0, PYTEST_NO_TESTS):
        return (
            "the test runner found no test to run (unittest: Ran 0 tests): check the test "
            "command and that the tests are where it looks (a tests/ folder needs an "
            "__init__.py for unittest's discovery)"
        )
    if exit_code == PYTEST_NO_TESTS and ("pytest" in command or "no tests ran" in output):
        return (
            "the test runner found no test to run (pytest exit 5: no tests ran): check the "
            "test command and the paths it is given"
        )
    if (
        exit_code == PYTEST_INTERNAL_ERROR
        and "pytest" in command
        and _PYTEST_NONE_RAN.search(output)
        and (raised := _INTERNAL.findall(output))
    ):
        return (
            "pytest stopped on an internal error before running any test (exit 3: "
            f"{raised[-1].strip()[:300]}): a conftest hook or a plugin raised; check that "
            "the plugins the project's conftest and configuration use are in the environment "
            "(an unknown mark, such as pytest-cov's `no_cover` without it, is an error under "
            "`filterwarnings = error`)"
        )
    if exit_code == PYTEST_USAGE_ERROR and "pytest" in command:
        said = next(
            (line.strip() for line in output.splitlines() if _PYTEST_REFUSAL.search(line)), ""
        )
        return (
            "pytest stopped before running any test (exit 4: a usage error"
            + (f": {said[:300]}" if said else "")
            + "): "
            + _plugin_hint(said)
            + "check the test command, the project's pytest configuration (`addopts`) "
            "and that the plugins and imports it needs are in the environment"
        )
    return None


#: the options of well-known pytest plugins, as pytest refuses them without the plugin (and
#: as `auto` installs the plugin an `addopts` option needs)
PLUGIN_OPTIONS = (
    (re.compile(r"--cov\b"), "pytest-cov"),
    (re.compile(r"-n\b|--numprocesses\b|--dist\b"), "pytest-xdist"),
    (re.compile(r"--timeout\b"), "pytest-timeout"),
    (re.compile(r"--benchmark-"), "pytest-benchmark"),
    (re.compile(r"--reruns\b"), "pytest-rerunfailures"),
    (re.compile(r"--doctest-plus\b"), "pytest-doctestplus"),
    (re.compile(r"--randomly-"), "pytest-randomly"),
    (re.compile(r"--mypy\b"), "pytest-mypy"),
    (re.compile(r"--asyncio-mode\b"), "pytest-asyncio"),
)
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)")


def _plugin_hint(said: str) -> str:
    """Which plugin an option pytest refused belongs to, as the start of a sentence, or ""."""
    found = _UNRECOGNIZED.search(said)
    for word in found.group(1).split() if found else ():
        for option, plugin in PLUGIN_OPTIONS:
            if option.match(word):
                return (
                    f"`{word.split('=')[0]}` is an option of {plugin}, which the environment "
                    "lacks: add it to the test requirements or `--setup`, or drop the option; "
                )
    return ""


#: the fixtures of well-known pytest plugins, as pytest says it lacks them
PLUGIN_FIXTURES = {
    "mocker": "pytest-mock",
    "module_mocker": "pytest-mock",
    "session_mocker": "pytest-mock",
    "benchmark": "pytest-benchmark",
    "httpserver": "pytest-httpserver",
    "httpx_mock": "pytest-httpx",
    "requests_mock": "requests-mock",
    "freezer": "pytest-freezer",
    "time_machine": "time-machine",
    "event_loop": "pytest-asyncio",
    "snapshot": "syrupy",
    "fs": "pyfakefs",
    "datadir": "pytest-datadir",
    "shared_datadir": "pytest-datadir",
    "qtbot": "pytest-qt",
    "aiohttp_client": "pytest-aiohttp",
}
_FIXTURE_NOT_FOUND = re.compile(r"^E\s+fixture '(\w+)' not found$", re.MULTILINE)


def lacking_fixtures(output: str) -> str | None:
    """Which well-known plugins a pytest run lacked, by the fixtures its tests asked for and
    pytest did not find ("fixture 'mocker' not found": pytest-mock), or None: those tests
    error whatever the patch, until the environment holds the plugin."""
    found = dict.fromkeys(
        (name, PLUGIN_FIXTURES[name])
        for name in _FIXTURE_NOT_FOUND.findall(output)
        if name in PLUGIN_FIXTURES
    )
    if not found:
        return None
    said = ", ".join(f"'{name}' (of {plugin})" for name, plugin in found)
    return (
        f"pytest found no fixture {said}: the environment lacks the plugin, so the tests that "
        "use it fail whatever the patch; add it to the test requirements or `--setup`"
    )


#: the shell refused the command before running it: a syntax error (dash's words, and
#: bash's as /bin/sh)
_SHELL_SYNTAX = re.compile(
    r"^(?:/bin/)?sh: (?:\d+: Syntax error: .*|-c: line \d+: (?:syntax error|unexpected EOF).*)$",
    re.MULTILINE,
)
#: a leading `cd DIR` that failed (dash's words, and bash's)
_SHELL_CD = re.compile(
    r"^(?:/bin/)?sh: (?:\d+: cd: can't cd to .*|line \d+: cd: .*)$", re.MULTILINE
)
#: make has no rule for a goal it was given ("..., needed by 'x'" is a missing file of a
#: rule that exists, not a goal)
_MAKE_NO_GOAL = re.compile(r"make(?:\[\d+\])?: \*\*\* No rule to make target '([^']+)'\.  Stop\.")


#: make's line for a recipe command the shell could not find (127) or execute (126)
_MAKE_NOT_FOUND = re.compile(r"^make(?:\[\d+\])?: \*\*\* \[[^\]\n]*\] Error 12[67]$", re.MULTILINE)
#: what said so just before it: make's own exec ("make: uv: No such file or directory") or
#: the shell's ("/bin/sh: 1: uv: not found")
_NOT_FOUND_SAID = re.compile(
    r"^(?:make: .*: No such file or directory|(?:/bin/)?sh: .*: (?:not found|Permission denied))$",
    re.MULTILINE,
)
#: tox 4's line for a failed command of an environment's, here its pip install of the deps
#: or of the package (`py311: exit 1 (8.9 seconds) /workspace> python -I -m pip install ...`)
_TOX_INSTALL = re.compile(r"^\s*\S+: exit -?\d+ \([^)]*\) .*?> .*\bpip install\b.*$", re.MULTILINE)


def refused_command(command: str, exit_code: int | None, output: str) -> str | None:
    """Why the shell, make or tox ran no test of `command`: a shell syntax error, a leading
    `cd` to a folder that is not there, a make goal no rule makes (`make tset`) or a
    command of its recipe that is not installed (make's `Error 127`), or tox could not
    install its environment (with no network); else None. Each exits non-zero,
    which read as tests that ran and failed."""
    if exit_code == 0:
        return None
    if "tox" in command and _TOX_INSTALL.search(output):
        return (
            "tox could not install its test environment (the test command and run_tests have "
            'no network unless the job\'s `network` is "all"): run the tests with their '
            "runner in the job's environment, e.g. `python3 -m pytest`, where `--setup auto` "
            "installs tox.ini's deps"
        )
    # a failed `cd` exits 2 in dash (Debian's /bin/sh), 1 in bash
    cd = command.lstrip().startswith("cd ") and exit_code in (1, 2)
    if cd and (found := _SHELL_CD.search(output)):
        return (
            f"the test command's `cd` failed ({found.group(0).strip()}): paths are relative "
            "to the project's root, /workspace"
        )
    if exit_code != 2:  # the shell's and make's exit for what they refused
        return None
    if found := _SHELL_SYNTAX.search(output):
        return (
            f"the shell could not parse the test command ({found.group(0).strip()}): check "
            "its quotes and operators"
        )
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    makes = "make" in {PurePosixPath(w).name for w in words}
    found = _MAKE_NO_GOAL.search(output)
    if found and makes and found.group(1) in words:
        return (
            f"make has no rule for the target {found.group(1)!r} the test command names: "
            "check the target's name in the project's Makefile"
        )
    if makes and (found := _MAKE_NOT_FOUND.search(output)):
        said = _NOT_FOUND_SAID.findall(output[: found.start()])
        return (
            "a command of the make target was not found or could not run ("
            + (f"{said[-1].strip()}; " if said else "")
            + f"{found.group(0).strip()}): is it installed in the session's environment?"
        )
    return None


#: pytest's summary line (`2 failed, 474 passed in 1.54s`, between `=` without -q), and
#: the counts in it that are failures; unittest's verdict for a run with failures
_PYTEST_SUMMARY = re.compile(
    r"^=*\s*(\d+ [a-z]+(?: [a-z]+)?(?:, \d+ [a-z]+(?: [a-z]+)?)*) in \d+(?:\.\d+)?s\b.*$",
    re.MULTILINE,
)
#: (a count of none is no failure: a project's own runner may print `12 passed, 0 failed`)
_PYTEST_FAILED = re.compile(r"\b[1-9]\d* (?:failed|errors?)\b")
#: unittest's verdict: `OK`, `OK (skipped=1)`, `FAILED (failures=1, errors=2)`,
#: `FAILED (failures=1, expected failures=1)` (a count's name may have a space)
_UNITTEST_VERDICT = re.compile(
    r"^(?:OK|FAILED)(?: \([a-z_ ]+=\d+(?:, [a-z_ ]+=\d+)*\))?$", re.MULTILINE
)


def hidden_failure(exit_code: int | None, output: str) -> str | None:
    """What the test runner's own last summary says failed when the test command exited 0
    anyway (`pytest -q | tail -3` exits as `tail`, `pytest; true` as `true`), else None: a
    run whose runner counted failures did not pass, whatever the shell's exit code. Only
    the last summary counts: a passing test's output may hold an inner run's (pytester)."""
    if exit_code != 0:
        return None
    verdicts = [
        (m.start(), m.group(0).strip("= "), bool(_PYTEST_FAILED.search(m.group(1))))
        for m in _PYTEST_SUMMARY.finditer(output)
    ]
    verdicts += [
        (m.start(), m.group(0), m.group(0).startswith("FAILED"))
        for m in _UNITTEST_VERDICT.finditer(output)
    ]
    if not verdicts:
        return None
    _, said, failed = max(verdicts)
    if not failed:
        return None
    return (
        f"the test command exited 0, but its runner reported `{said.strip()}`: a pipe "
        "(`| tail`, `| tee`), a `;` or an `|| true` exits as its last command, which hides "
        "the runner's exit code; give the runner's own command"
    )


#: coreutils `timeout`'s exit code when its time ran out (137 when it sent KILL: `-s KILL`,
#: `-k`), and the highest exit code of a shell whose command a signal killed (128 + N)
_TIMEOUT_EXIT_CODES = frozenset({124, 137})
_SIGNALS_EXIT = 128 + 64
#: pytest-timeout's banner over the stacks it dumps when a test hangs; its `thread` method
#: then exits the whole run at once (`os._exit(1)`), before any summary
_PYTEST_TIMEOUT = re.compile(r"^\++ Timeout \++$", re.MULTILINE)
#: pytest's line when `-x` or `--maxfail N` stopped the run at its Nth failure
_PYTEST_MAXFAIL = re.compile(r"^!+ stopping after (\d+) failures !+$", re.MULTILINE)


def cut_short(command: str, exit_code: int | None, output: str) -> str | None:
    """Why a run of the test command ended before its runner got to the end, so its output
    names only the failing tests it reached, or None: a `timeout` in the command stopped it
    (exit 124, or 137 when it sent KILL), a signal killed it (exit 129 to 192 from the shell,
    or a negative code: the runner itself, e.g. by the memory limit), pytest-timeout
    stopped the whole run at a hanging test (its `Timeout` banner with no summary after it),
    or pytest stopped at its Nth failure (`-x`, `--maxfail N`: the tests after it did not
    run), or unittest at its first (`-f`, `--failfast`, read from the command: it prints
    nothing that says so).
    A run killed by tickwork (its time limit, its output cap: no exit code) has no verdict
    at all, and is not asked; nor is one that exited 0 (it passed, whatever it printed).
    """
    if exit_code is None or exit_code == 0:
        return None
    if exit_code in _TIMEOUT_EXIT_CODES and _program(command) == "timeout":
        return f"the command's own `timeout` stopped it (exit {exit_code}) before the runner's end"
    if exit_code < 0 or 128 < exit_code <= _SIGNALS_EXIT:
        return f"a signal killed it (exit {exit_code}) before the runner's end"
    banners = list(_PYTEST_TIMEOUT.finditer(output))
    if banners and not _PYTEST_SUMMARY.search(output, banners[-1].end()):
        return "pytest-timeout stopped the run at a test that hung, before its summary"
    if exit_code != 0 and (stopped := _PYTEST_MAXFAIL.search(output)):
        return (
            f"pytest stopped after {stopped.group(1)} failures (`-x` or `--maxfail`): the tests "
            "after them did not run"
        )
    if _unittest_failfast(command):
        return (
            "unittest stopped at its first failure (`-f` or `--failfast`): the tests after it "
            "did not run"
        )
    return None


#: unittest's options that take a value, the rest of their word or the next one (`-kf`:
#: the pattern "f"); its others (`-v`, `-f`, `-b`) may be joined in one word (`-vf`)
_UNITTEST_VALUED = frozenset("kspt")


def _unittest_failfast(command: str) -> bool:
    """Whether the command runs `python -m unittest` with `-f` or `--failfast`, which
    stops at the first failure and prints nothing that says so."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    runs = [i + 2 for i in range(len(words) - 1) if words[i : i + 2] == ["-m", "unittest"]]
    for word in words[runs[0] :] if runs else ():
        if word in ("&&", "||", ";", "|"):
            break
        if word == "--failfast":
            return True
        if re.fullmatch(r"-[A-Za-z]+", word):
            for letter in word[1:]:
                if letter == "f":
                    return True
                if letter in _UNITTEST_VALUED:
                    break
    return False


def why_tests_did_not_run(
    command: str,
    exit_code: int | None,
    output: str,
    *,
    timed_out: bool = False,
    environment: Mapping[str, Any] | None = None,
    own: Callable[[], Collection[str]] | None = None,
    setup_online: bool | Callable[[], bool] = True,
    without_environment: bool = False,
) -> str | None:
    """Why a run of the test command proved nothing about the code, or None if its tests
    ran: the shell could not find or execute it (exit 126, 127), its `python -m` runner is
    not installed (`missing_runner`), pytest stopped at collection on a module the
    environment lacks that is none of `own()`, the project's top-level modules
    (`missing_module`; not asked when `own` is None; `setup_online`: whether the
    environment's setup could reach the network; both asked only of such a run: a walk of
    the project's tree is not for every test run), the shell, make or tox refused it
    (`refused_command`), or the runner found no test (`no_tests_ran`). The
    final test run records it as `not_run`; `run_tests` tells the model the same.
    `environment`, the session's environment record (`missing`: what the project declares
    that setup did not install; `note`: why, as setup without network), says what to do
    of a missing runner; `without_environment`: the session has none (`--setup none`), so
    the project has nothing to declare, the submitter an environment to ask for."""
    if exit_code in NOT_FOUND_EXIT_CODES:
        said = f"the shell could not find or execute the test command (exit {exit_code})"
        program = _program(command)
        if program and _declared(program, environment or {}):
            hint = _runner_hint(program, environment or {})
            return f"{said}: {program} is not installed in the session's environment: {hint}"
        if program in _ENVIRONMENT_BUILDERS:
            return (
                f"{said}: {program} is not installed in the session's environment, and "
                f"`--setup auto` does not install it ({program} builds environments of its "
                "own, which needs the network the test runs do not have): run the tests with "
                "their runner, e.g. `python3 -m pytest`, for which `auto` installs the "
                "project and its test dependencies (tox.ini's deps too)"
            )
        return f"{said}: is it installed in the session's environment?"
    if exit_code != 0 and (runner := missing_runner(command, output)) is not None:
        return (
            f"the test runner {runner} is not installed in the session's environment (Python "
            f"says: No module named {runner}): "
            + (_NO_ENVIRONMENT if without_environment else _runner_hint(runner, environment or {}))
        )
    if timed_out:
        return None
    unloaded = unloaded_tests(output) if exit_code else ()
    if why := _not_found(unloaded):
        return why
    module, stopped = None, ""
    if own is not None and _wanted_at_collection(exit_code, output):
        module, stopped = missing_module(exit_code, output, own()), "pytest stopped at collection"
    elif own is not None and unloaded:
        module = _lacked(unloaded, own())
        stopped = "unittest could not import its test modules"
    if module is not None:
        said = (
            f"{stopped}: the session's environment has no module {module!r}"
            f" (Python says: No module named {module!r}), which is not one of the project's"
            " own, so no test ran"
        )
        if _declared(module, environment or {}):  # the project has nothing to add
            return f"{said}: {_runner_hint(module, environment or {})}"
        elsewhere = (environment or {}).get("elsewhere")
        found = _provider(module, elsewhere) if isinstance(elsewhere, Mapping) else None
        if found is not None:
            dist, extra = found
            named = "" if dist == _distribution(module) else f" ({dist})"
            runner = " pytest" if "pytest" in command else ""  # pyparsing's extra has none
            return (
                f"{said}: the project declares it{named} in its `{extra}` extra, which "
                "`--setup auto` does not install (it installs the test, tests, dev and testing "
                "ones): give "
                'setup commands that install it, e.g. `--setup "python3 -m venv /env" '
                f"--setup \"/env/bin/pip install -e '.[{extra}]'{runner}\"`"
            )
        if without_environment:
            return (
                f"{said}: the session has no environment (`--setup none`): submit it with "
                "`--setup auto` (the default), which installs the project and its test "
                "requirements (add it to them if they lack it), or give setup commands that "
                "install it"
            )
        return (
            f"{said}: add it to the project's test requirements, or give setup commands that "
            "install it (`--setup`)"
            + (
                ""
                if (setup_online() if callable(setup_online) else setup_online)
                else "; setup had no network (TICKWORK_EGRESS_ALLOW is empty, or the job's "
                '`network` is "none"), so it could install nothing from the package index'
            )
        )
    return refused_command(command, exit_code, output) or no_tests_ran(command, exit_code, output)


def _not_found(unloaded: Sequence[Unloaded]) -> str | None:
    """Why a unittest run that loaded none of its tests ran none, when every name it could
    not load is not there (a test module misspelled in the command, a test class or method
    it does not have), as pytest's "file or directory not found"; else None."""
    if not unloaded or not all(test.absent for test in unloaded):
        return None
    first = unloaded[0]
    error = f"No module named {first.missing!r}" if first.missing else "no such attribute"
    return (
        f"unittest found no test of the names the test command gives ({first.name}: "
        f"{error}), so no test ran: check the test command's names (dotted from the project's "
        "root, as `tests.test_x` or `tests.test_x.TestCase.test_y`)"
    )


def _lacked(unloaded: Sequence[Unloaded], own: Collection[str]) -> str | None:
    """The module the environment lacks that a unittest run could not import its test
    modules for, when each of them is not there or wants such a module (none of the
    project's `own`), as `missing_module` for pytest: no test ran. A test module that
    raised anything else (a SyntaxError in the code under test) or wants a module of the
    project's own that is gone ran as far as it could: the code under repair is broken."""
    wanted = [test.missing for test in unloaded if not test.absent]
    if not all(wanted) or any(str(name).split(".")[0] in own for name in wanted):
        return None
    return next((str(name) for name in wanted), None)


#: what to do of a test runner a session without an environment lacks
_NO_ENVIRONMENT = (
    "the session has no environment (`--setup none`): submit it with `--setup auto` (the "
    "default), which installs the project and its test dependencies, or give setup commands "
    "that install it"
)

#: test commands that build environments of their own rather than run the tests here
_ENVIRONMENT_BUILDERS = frozenset({"tox", "nox"})


def _runner_hint(runner: str, environment: Mapping[str, Any]) -> str:
    """What to do of a missing test runner: a project that declares it has nothing to fix
    when setup could not install it (no network: the note says which setting gives it)."""
    note = environment.get("note")
    note = note if isinstance(note, str) and note else None
    if _declared(runner, environment):
        if note:
            return f"the project declares it, but {note}"
        key = str(environment.get("key") or "KEY")[:12]
        return (
            "the project declares it, but setup did not install it: its log says why "
            f"(`tickwork env show {key}`)"
        )
    hint = "declare it in the project's test dependencies, or install it in the repair's setup"
    return f"{hint}; but {note}" if note else hint


def _provider(module: str, elsewhere: Mapping[Any, Any]) -> tuple[str, str] | None:
    """The distribution of `elsewhere` (distribution -> extra) that provides `module`, and
    its extra: the one of its name, else the one named for it and more (`railroad`:
    railroad-diagrams)."""
    name = _distribution(module)
    extras = {str(d): e for d, e in elsewhere.items() if isinstance(e, str)}
    if name in extras:
        return name, extras[name]
    for dist, extra in extras.items():
        if dist.startswith(f"{name}-"):
            return dist, extra
    return None


def _declared(name: str, environment: Mapping[str, Any]) -> bool:
    """Whether the environment record lists `name` (a module or a program) as declared by
    the project but not installed by setup."""
    missing = environment.get("missing")
    return isinstance(missing, list | tuple) and _distribution(name) in {
        _distribution(str(m)) for m in missing
    }


def _program(command: str) -> str | None:
    """The program a test command starts with (`pytest -q`: pytest), None if unclear."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return PurePosixPath(words[0]).name if words and "=" not in words[0] else None


def _distribution(name: str) -> str:
    """A module's or requirement's name as a distribution's (`pytest_cov`: `pytest-cov`)."""
    return re.sub(r"[-_.]+", "-", name.split(".")[0]).lower()
