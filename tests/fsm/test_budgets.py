"""Budget values and checks (DESIGN 6)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from fsm.budgets import exhausted_budget, model_retry_delay, stop_reason
from fsm.values import Budgets, ErrorCode

FIELDS = list(Budgets.model_fields)
BAD = [
    pytest.param(-1, id="negative"),
    pytest.param(0, id="zero"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="minus_inf"),
]


def test_every_budget_is_checked() -> None:
    assert set(FIELDS) == {
        "max_steps",
        "max_tokens",
        "max_cost_usd",
        "deadline_s",
        "max_consecutive_repeats",
        "max_loop_interventions",
        "max_model_retries",
        "max_calls_per_step",
    }


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("field", FIELDS)
def test_budgets_reject_values_that_are_not_positive_and_finite(field: str, value: float) -> None:
    # the code raises pydantic's ValidationError (a ValueError), not InvalidBudget
    with pytest.raises(ValidationError) as raised:
        Budgets(**{field: value})
    assert [e["loc"] for e in raised.value.errors()] == [(field,)]
    assert field in str(raised.value)


@pytest.mark.parametrize("field", FIELDS)
def test_budgets_accept_small_positive_values(field: str) -> None:
    assert getattr(Budgets(**{field: 1}), field) == 1


def test_budgets_reject_booleans() -> None:
    with pytest.raises(ValidationError, match="max_steps"):
        Budgets(max_steps=True)


def test_budgets_are_frozen() -> None:
    with pytest.raises(ValidationError):
        Budgets().max_steps = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "at_s", "code"),
    [
        pytest.param({}, 0, None, id="fresh"),
        pytest.param({"step": 3}, 0, ErrorCode.BUDGET_STEPS, id="steps"),
        pytest.param({"tokens": 100}, 0, ErrorCode.BUDGET_TOKENS, id="tokens"),
        pytest.param({"cost_usd": 1.0}, 0, ErrorCode.BUDGET_COST, id="cost"),
        pytest.param({}, 3600, ErrorCode.DEADLINE, id="deadline"),
        pytest.param({}, 3599, None, id="before_deadline"),
        pytest.param(
            {"tokens": 100, "cost_usd": 5.0},
            9999,
            ErrorCode.BUDGET_TOKENS,
            id="first_exhausted_wins",
        ),
    ],
)
def test_exhausted_budget(
    build: Any, fields: dict[str, Any], at_s: float, code: ErrorCode | None
) -> None:
    head = build.head(
        budgets={"max_steps": 3, "max_tokens": 100, "max_cost_usd": 1.0, "deadline_s": 3600},
        **fields,
    )
    spent = exhausted_budget(head, now=build.at(at_s))
    assert (spent.code if spent else None) is code


@pytest.mark.parametrize(
    ("fields", "at_s", "words"),
    [
        pytest.param({}, 0, None, id="fresh"),
        pytest.param({"cancel_requested": True}, 0, "cancelled", id="cancel"),
        pytest.param({}, 3600, "deadline passed", id="deadline"),
        pytest.param({"cost_usd": 1.0}, 0, "cost budget", id="cost"),
        # a running call of the last step may finish: steps and tokens do not stop it
        pytest.param({"step": 3, "tokens": 100}, 0, None, id="steps_and_tokens_go_on"),
        pytest.param({"step": 3}, 3600, "deadline passed", id="deadline_after_last_step"),
    ],
)
def test_stop_reason_of_a_running_tool(
    build: Any, fields: dict[str, Any], at_s: float, words: str | None
) -> None:
    head = build.head(
        budgets={"max_steps": 3, "max_tokens": 100, "max_cost_usd": 1.0, "deadline_s": 3600},
        **fields,
    )
    reason = stop_reason(head, now=build.at(at_s))
    assert (reason is None) if words is None else (words in (reason or "")), reason


@pytest.mark.parametrize(
    ("attempt", "jitter", "delay"),
    [
        (1, 0.0, 0.5),
        (1, 1.0, 1.0),
        (2, 0.0, 1.0),
        (3, 0.5, 3.0),
        (10, 0.0, 30.0),
        (10, 1.0, 60.0),
    ],
)
def test_model_retry_delay(attempt: int, jitter: float, delay: float) -> None:
    assert model_retry_delay(attempt, jitter=jitter) == delay
