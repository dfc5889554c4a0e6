"""tickwork.parsing: the choice of the one id a start names, made once for the local CLI
(`Reads.session_id`) and the remote one (`remote/ids.py`)."""

from __future__ import annotations

import pytest
from tickwork.fsm.errors import InvalidInput, SessionNotFound

from tickwork import parsing
from tickwork.parsing import NO_START, ambiguous, one_id


def test_a_start_names_its_one_id_refuses_none_as_told_and_names_several() -> None:
    missing = SessionNotFound.of("3f9a0c", hint=NO_START)
    assert one_id("3f9a0c", ["3f9a0c11"], none=missing) == "3f9a0c11"
    with pytest.raises(SessionNotFound) as none:
        one_id("3f9a0c", [], none=missing)
    assert none.value is missing
    assert one_id("3f9a0c", [], none="3f9a0c") == "3f9a0c"  # the id to take instead
    with pytest.raises(InvalidInput) as several:
        one_id("3f9a0c", ["3f9a0c11", "3f9a0c22"], none=missing)
    assert several.value.message == (
        "'3f9a0c' is the start of 2 session ids (3f9a0c11, 3f9a0c22); give more characters of "
        "the one you mean"
    )

    def told(given: str, found: list[str]) -> ValueError:
        return ValueError(ambiguous(given, found).message)

    many = [f"3f9a0c{n}" for n in range(6)]
    with pytest.raises(ValueError, match=r"start of more than 5 session ids \(.*3f9a0c4, \.\.\.\)"):
        one_id("3f9a0c", many, none=missing, several=told)


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("1.5m", 90.0), (" 2H ", 7200.0), ("1d", 86400.0)],
)
def test_a_duration_is_seconds_or_a_number_with_a_unit(given: str, seconds: float) -> None:
    assert parsing.seconds(given, example="--deadline 2h") == seconds


def test_a_duration_in_a_unit_not_taken_says_which_units_are() -> None:
    with pytest.raises(InvalidInput) as weeks:
        parsing.seconds("1w", example="--deadline 2h")
    assert str(weeks.value) == (
        "'1w' is not a duration: give seconds, or a number with s, m, h or d, e.g. --deadline 2h"
    )
    assert parsing.seconds("1w", example="--since 1w", units="smhdw") == 7 * 86400


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("", "invalid id: it is empty; give an id, or leave id out for a random one"),
        ("i" * 65, "invalid id: it is 65 characters long; at most 64 characters are taken"),
        ("a b", "invalid id: session id 'a b' may only hold letters, digits, '_', '-' and '.'"),
        ("a\n", "invalid id: session id 'a\\n' may only hold letters"),
    ],
)
def test_a_new_session_id_is_refused_saying_what_is_wrong(given: str, said: str) -> None:
    """The CLI's --id, the API's bodies and the client check a new id in the same words."""
    assert parsing.new_session_id("run-1.a_b", what="id") == "run-1.a_b"
    with pytest.raises(InvalidInput) as refused:
        parsing.new_session_id(given, what="id")
    assert str(refused.value).startswith(said)
