"""TICKWORK_BUDGETS is JSON, or one variable per budget (TICKWORK_BUDGETS__MAX_STEPS): a bad
budget is named as the operator wrote it, with the budgets it takes."""

from __future__ import annotations

import pytest
from tickwork.fsm.errors import ConfigurationError
from tickwork.worker.config.settings import load_settings


def refused(monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    return str(caught.value)


def test_a_misspelt_budget_in_the_json_names_the_variable_and_the_budgets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = refused(monkeypatch, TICKWORK_BUDGETS='{"max_step": 3}')
    # the variable set, not one nobody set (TICKWORK_BUDGETS__MAX_STEP)
    assert message.startswith("invalid setting TICKWORK_BUDGETS: its key 'max_step'"), message
    assert "__" not in message
    assert "max_steps, max_tokens, max_cost_usd, deadline_s" in message


def test_a_bad_budget_value_in_the_json_names_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    message = refused(monkeypatch, TICKWORK_BUDGETS='{"max_steps": 0}')
    assert message.startswith("invalid setting TICKWORK_BUDGETS: its key 'max_steps'"), message
    assert "positive" in message and "__" not in message


def test_a_budget_variable_of_its_own_is_named_as_set(monkeypatch: pytest.MonkeyPatch) -> None:
    message = refused(monkeypatch, TICKWORK_BUDGETS__MAX_STEPS="0")
    assert message.startswith("invalid setting TICKWORK_BUDGETS__MAX_STEPS='0'"), message
    message = refused(monkeypatch, TICKWORK_BUDGETS__MAX_STEPS="5", TICKWORK_BUDGETS__MAX_STEP="3")
    assert message.startswith("invalid setting TICKWORK_BUDGETS__MAX_STEP='3'"), message
    assert "max_steps, max_tokens" in message


def test_budgets_of_the_wrong_shape_say_which_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    message = refused(monkeypatch, TICKWORK_BUDGETS="[50]")
    assert """e.g. TICKWORK_BUDGETS='{"max_steps": 50}'""" in message, message
