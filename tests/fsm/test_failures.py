"""Which tests a run's output says failed (`tickwork.fsm.failures`): pytest's short summary
and unittest's headers, bounded, and which of a final run's failing tests failed before."""

from __future__ import annotations

from tickwork.fsm.failures import (
    MAX_FAILING,
    MAX_ID_CHARS,
    failed_before,
    failed_before_line,
    failing_tests,
)

PYTEST = """\
..F.E
=========================== short test summary info ============================
FAILED dateutil/test/test_tz.py::TzLocalTest::testEquality - AssertionError: x
FAILED dateutil/test/test_tz.py::test_gettz[a - b]
ERROR dateutil/test/test_imports.py - ImportError: nope
2 failed, 1 error, 470 passed in 3.10s
"""

UNITTEST = """\
test_add (test_calc.T.test_add) ... FAIL
======================================================================
FAIL: test_add (test_calc.T.test_add)
----------------------------------------------------------------------
ERROR: test_old (tests.test_old.OldCase)
----------------------------------------------------------------------
FAIL: test_sub (test_calc.T.test_sub) (i=2)
Ran 3 tests in 0.001s

FAILED (failures=2, errors=1)
"""


def test_pytest_short_summary_gives_the_failing_ids() -> None:
    assert failing_tests(PYTEST) == [
        "dateutil/test/test_tz.py::TzLocalTest::testEquality",
        "dateutil/test/test_tz.py::test_gettz[a",
        "dateutil/test/test_imports.py",
    ]


def test_a_failed_subtest_is_named_by_its_test() -> None:
    # pytest 9 reports a failed `self.subTest` (idna's error-code test) on a line of its own,
    # its description before the id; the test was missing from the failing ones
    output = (
        "FAILED tests/test_idna.py::IDNATests::test_encode - AssertionError: x\n"
        "SUBFAILED(code='label_too_long') tests/test_idna_errors.py::E::test_codes - Asse...\n"
        "SUBFAILED[a message: with words] (i=1) tests/t.py::test_sub\n"
        "SUBFAILED(<subtest>) tests/t.py::test_sub - ValueError\n"
        # a description with a space then `::` in it: its parenthesised part ends at its `)`
        "SUBFAILED(k='a b::c') tests/t.py::test_spaced - AssertionError\n"
        "SUBFAILED[see a::b (here)] (k='x) y::z', n=(1, 2)) tests/t.py::test_both\n"
        "SUBFAILED[a [message] that does not close tests/t.py::test_open - x\n"
        "SUBPASSED(i=2) tests/t.py::test_other\n"
        "3 failed, 6432 passed, 55 subtests passed in 83.19s\n"
    )
    assert failing_tests(output) == [
        "tests/test_idna.py::IDNATests::test_encode",
        "tests/test_idna_errors.py::E::test_codes",
        "tests/t.py::test_sub",
        "tests/t.py::test_spaced",
        "tests/t.py::test_both",
        "tests/t.py::test_open",  # as before: the first word with `::`
    ]


def test_unittest_headers_give_module_class_and_test_and_its_verdict_is_none() -> None:
    assert failing_tests(UNITTEST) == [
        "test_calc.T.test_add",
        "tests.test_old.OldCase.test_old",
        "test_calc.T.test_sub",
    ]


def test_a_test_module_unittest_could_not_import_is_named_by_the_module() -> None:
    """Discovery's header of a module that failed to import names the module dotted
    (`tests.test_x`), which was not read at all, and the test in its place
    (`unittest.loader._FailedTest`), which is no test of the project's."""
    output = (
        "ERROR: tests.test_x (unittest.loader._FailedTest.tests.test_x)\n"
        "ImportError: Failed to import test module: tests.test_x\n"
        "FAIL: test_a (tests.test_y.T.test_a)\n"
        "ERROR: test_z (unittest.loader._FailedTest.test_z)\n"  # `python -m unittest test_z`
        "ERROR: test_old (unittest.loader.ModuleImportFailure)\n"  # before Python 3.5
        "FAILED (failures=1, errors=3)\n"
    )
    assert failing_tests(output) == ["tests.test_x", "tests.test_y.T.test_a", "test_z", "test_old"]


def test_a_passing_run_names_none() -> None:
    assert failing_tests("....\n4 passed in 0.1s\n") == []
    assert failing_tests("Ran 4 tests in 0.1s\n\nOK\n") == []


def test_what_is_kept_of_untrusted_output_is_bounded() -> None:
    many = "".join(f"FAILED t.py::test_{i}\n" for i in range(MAX_FAILING * 3))
    assert len(failing_tests(many)) == MAX_FAILING
    long = failing_tests("FAILED " + "x" * 10_000 + "\n")
    assert long == ["x" * MAX_ID_CHARS]
    huge = "FAILED t.py::first\n" + "." * 5_000_000 + "\nFAILED t.py::last\n"
    assert failing_tests(huge) == ["t.py::first", "t.py::last"]


def test_failed_before_counts_the_final_failures_that_failed_first_too() -> None:
    found = failed_before(["a", "tz1", "tz2"], ["tz1", "new", "tz2"])
    assert found == {"count": 2, "of": 3, "tests": ["tz1", "tz2"]}
    line = failed_before_line(found)
    assert line is not None and line.startswith("2 of the 3 failing tests failed before any")
    assert line.endswith(": tz1, tz2")
    assert failed_before(["a"], []) is None  # nothing failing at the end: nothing to say
    none = failed_before(["a"], ["b"])
    assert none == {"count": 0, "of": 1, "tests": []} and failed_before_line(none) is None
