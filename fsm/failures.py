"""Which tests a run's output says failed, and which of a repair's failing tests already
failed before the session changed anything.

A test that fails whatever the model does (python-dateutil's tz tests on a machine whose
tz data differs) ends a repair `tests_failing` as surely as one the session broke. The
outcome stays what the final run says; the result says which of its failing tests failed
in a run before any change too (`failed_before`), so the user sees it.

The output is the test command's, so untrusted: what is read of it is bounded
(`MAX_SCANNED_CHARS`), and so is what is kept (`MAX_FAILING`, `MAX_ID_CHARS`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_FAILING",
    "MAX_ID_CHARS",
    "Unloaded",
    "failed_before",
    "failed_before_line",
    "failing_tests",
    "passed_before",
    "passed_before_line",
    "unloaded_tests",
]

#: the most failing test ids a run's record keeps, and the longest id kept
MAX_FAILING = 200
MAX_ID_CHARS = 300
#: the most of an output read, its head and its tail (a summary is at the end)
MAX_SCANNED_CHARS = 400_000
#: how many of the tests that failed before a summary names
SHOWN = 10

#: pytest's short test summary (`FAILED tests/test_x.py::test_y - AssertionError`,
#: `ERROR tests/test_z.py`), not unittest's verdict (`FAILED (failures=1)`)
_PYTEST = re.compile(r"^(?:FAILED|ERROR) (?!\()(\S[^\n]*?)(?: - [^\n]*)?$", re.MULTILINE)
#: pytest 9's line for a failed subtest (`self.subTest`, the `subtests` fixture): its
#: description (`[msg]`, `(k=v, ...)` or both, `(<subtest>)`) before the test's id
#: (`SUBFAILED(code='x') tests/test_e.py::T::test_codes - AssertionError`)
_PYTEST_SUBTEST = re.compile(r"^SUBFAILED([^\n]*)", re.MULTILINE)
#: the test's id after a description that could not be read: the first word with `::`
_FIRST_ID = re.compile(r" (\S+::\S+)")
#: unittest's header of a failure: `FAIL: test_y (pkg.test_x.T.test_y)` (Python 3.11 on),
#: `ERROR: test_y (pkg.test_x.T)` (before), with a subtest's `[...]` or `(...)` after it; a
#: module it could not import: `ERROR: pkg.test_x (unittest.loader._FailedTest.pkg.test_x)`
_UNITTEST = re.compile(r"^(?:FAIL|ERROR): ([\w.]+) \(([\w.]+)\)", re.MULTILINE)
#: the test unittest puts in place of a module it could not import (or load tests from)
_FAILED_IMPORT = ("unittest.loader._FailedTest", "unittest.loader.ModuleImportFailure")


def failing_tests(output: str) -> list[str]:
    """The ids of the tests a run's output says failed or errored, in its order, each
    once: pytest's short test summary (its default `-rfE`: `FAILED path::test`, and
    `SUBFAILED(...) path::test` for a failed subtest, as its test's id) and
    unittest's `FAIL: name (module.Class.name)` headers (as `module.Class.name`; a test
    module it could not import as the module's name). At most
    MAX_FAILING ids, each at most MAX_ID_CHARS characters; none if the output names none."""
    if len(output) > MAX_SCANNED_CHARS:
        half = MAX_SCANNED_CHARS // 2
        output = output[:half] + "\n" + output[-half:]
    found: dict[str, None] = {}
    named = [(m.start(), m.group(1).strip()) for m in _PYTEST.finditer(output)]
    for match in _PYTEST_SUBTEST.finditer(output):
        test = _subtest_id(match.group(1))
        if test is not None:
            named.append((match.start(), test))
    for _, test in sorted(named):
        found[test[:MAX_ID_CHARS]] = None
    for match in _UNITTEST.finditer(output):
        name, where = match.group(1), match.group(2)
        if where.startswith(_FAILED_IMPORT):
            test = name  # the module, as pytest names a file it could not collect
        else:
            test = where if where.endswith(f".{name}") else f"{where}.{name}"
        found[test[:MAX_ID_CHARS]] = None
    return list(found)[:MAX_FAILING]


#: unittest's count of the tests a run ran, and the rules between its reports
_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_RULE = re.compile(r"^(?:=+|-+)$")
#: a traceback's frame, and a file of unittest's own (or of the import system's) among them
_FRAME = re.compile(r'^\s*File "([^"\n]*)", line \d+', re.MULTILINE)
_UNITTEST_FILE = re.compile(r"[\\/]unittest[\\/]|^<frozen ")
#: the error of a name unittest could not load: a module that is not there, or an attribute
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_NO_ATTRIBUTE = re.compile(r"AttributeError: .* has no attribute ")


@dataclass(frozen=True)
class Unloaded:
    """A test unittest put in place of a name it could not load (`_FailedTest`)."""

    #: the name as its header gives it (`test_x`, or `tests.test_x` from discovery)
    name: str
    #: the module a ModuleNotFoundError named, when that is what stopped it
    missing: str | None
    #: the name is not there: no module of it (nor a package of its path), or no such
    #: attribute; its traceback passes through no file but unittest's own
    absent: bool


def unloaded_tests(output: str) -> tuple[Unloaded, ...]:
    """The tests a unittest run put in place of the names it could not load (a test module
    that failed to import, a test it could not find), when they are all the tests it ran
    (as many as its `Ran N tests` lines count): none of the project's tests ran. Else ()."""
    if len(output) > MAX_SCANNED_CHARS:
        half = MAX_SCANNED_CHARS // 2
        output = output[:half] + "\n" + output[-half:]
    headers = [m for m in _UNITTEST.finditer(output) if m.group(2).startswith(_FAILED_IMPORT)]
    ran = sum(int(n) for n in _RAN.findall(output))
    if not headers or ran != len(headers):
        return ()
    ends = [m.start() for m in headers[1:]] + [len(output)]
    found = []
    for header, end in zip(headers, ends, strict=True):
        block = output[header.end() : end]
        if counted := _RAN.search(block):
            block = block[: counted.start()]
        lines = [ln for ln in block.splitlines() if ln.strip() and not _RULE.match(ln)]
        # the error raised last: a traceback's frames and source lines are indented
        raised = next((ln for ln in reversed(lines) if not ln[0].isspace()), "")
        missing = _NO_MODULE.match(raised)
        own = [f for f in _FRAME.findall(block) if not _UNITTEST_FILE.search(f)]
        absent = not own and bool(missing or _NO_ATTRIBUTE.match(raised))
        found.append(Unloaded(header.group(1), missing.group(1) if missing else None, absent))
    return tuple(found)


def _subtest_id(line: str) -> str | None:
    """The test's id in a SUBFAILED line after `SUBFAILED`: past its description, `[msg]`
    (balanced brackets), then ` (k=v, ...)` or `(<subtest>)` (balanced parentheses, the
    values' quoted reprs skipped), so a description's `::` or space is not taken for the
    id. A description that does not close: the first word with `::`, as before."""
    at = 0
    if line.startswith("["):
        at = _closing(line, 0, "[", "]", quoted=False)
        if at > 0 and line.startswith(" (", at):
            at = _closing(line, at + 1, "(", ")", quoted=True)
    elif line.startswith("("):
        at = _closing(line, 0, "(", ")", quoted=True)
    if at > 0 and line.startswith(" ", at):
        test = line[at + 1 :].split(" ", 1)[0]
        if "::" in test:
            return test
    found = _FIRST_ID.search(line)
    return found.group(1) if found else None


def _closing(text: str, start: int, opening: str, closing: str, *, quoted: bool) -> int:
    """The index just past the `closing` that balances the `opening` at `start`; -1 when
    none does. `quoted`: a `'...'` or `"..."` (a repr, its backslash escapes too) is skipped."""
    depth, at, quote = 0, start, ""
    while at < len(text):
        char = text[at]
        if quote:
            if char == "\\":
                at += 1
            elif char == quote:
                quote = ""
        elif quoted and char in "'\"":
            quote = char
        elif char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return at + 1
        at += 1
    return -1


def failed_before(before: Sequence[str], final: Sequence[str]) -> dict[str, Any] | None:
    """Which of the final run's failing tests (`final`) failed in the run before any change
    (`before`) too: `count` of `of`, the first SHOWN of them (`tests`); None when the final
    run names no failing test (there is nothing to compare)."""
    if not final:
        return None
    earlier = set(before)
    both = [test for test in final if test in earlier]
    return {"count": len(both), "of": len(final), "tests": both[:SHOWN]}


def failed_before_line(found: Mapping[str, Any] | None) -> str | None:
    """One line for a person of `failed_before` (a repair's result), None when no failing
    test failed before any change."""
    if not isinstance(found, Mapping):
        return None
    count, of = found.get("count"), found.get("of")
    if not isinstance(count, int) or not isinstance(of, int) or count < 1:
        return None
    tests = [str(t) for t in found.get("tests") or ()]
    more = ", …" if count > len(tests) else ""
    return (
        f"{count} of the {of} failing tests failed before any change too (in the session's "
        f"first test run): {', '.join(tests)}{more}"
    )


def passed_before(before: Any, final: Any) -> bool:
    """Whether a repair's tests passed in its run before any change (`before`, the result's
    `tests_before`) and in its final run (`final`, the result's `tests`) too: its patch
    mended no failing test (a bug no test reaches, or nothing to repair)."""
    return (
        isinstance(before, Mapping)
        and before.get("passed") is True
        and isinstance(final, Mapping)
        and final.get("passed") is True
    )


def passed_before_line(before: Any, final: Any) -> str | None:
    """One line for a person when a repair's tests passed in its run before any change
    (`before`, the result's `tests_before`), None otherwise: with a final run (`final`, the
    result's `tests`) that passed, the patch mended no failing test (a bug no test reaches,
    or nothing to repair); with one that ran and failed, the session's changes broke them."""
    if not isinstance(before, Mapping) or before.get("passed") is not True:
        return None
    if not isinstance(final, Mapping):
        return None
    where = f"in the session's first test run, step {before.get('step')}"
    if passed_before(before, final):
        return (
            f"the tests passed before any change too ({where}): the patch repaired no "
            "failing test; check that it is wanted"
        )
    if final.get("not_run") or final.get("exit_code") is None:
        return None  # they did not run at the end: the outcome says why
    return f"the tests passed before any change ({where}): the session's changes made them fail"
