from __future__ import annotations

import logging
import uuid

import pytest

from fsm.errors import ConfigurationError
from fsm.values import Usage
from worker.models import Price, Providers, cost_usd, price_for
from worker.models.pricing import call_cost, next_call, session_price

MILLION = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)


def test_known_model():
    usage = Usage(prompt_tokens=10_000, completion_tokens=2_000)

    assert cost_usd("gpt-4o", usage) == pytest.approx(10_000 * 2.5e-6 + 2_000 * 10e-6)
    assert cost_usd("gpt-4o-mini", MILLION) == pytest.approx(0.75)


@pytest.mark.parametrize(
    "name",
    [
        "gpt-4.1-mini-2025-04-14",
        "openai/gpt-4.1-mini",
        "openai:gpt-4.1-mini",
        "react:openai:gpt-4.1-mini",
    ],
)
def test_dated_and_prefixed_names_price_as_the_base_model(name):
    assert price_for(name) == Price(0.40, 1.60)


def test_scripted_is_free():
    assert cost_usd("scripted", MILLION) == 0


@pytest.mark.parametrize("override", [Price(1, 2), (1, 2), [1, 2], {"prompt": 1, "completion": 2}])
def test_overrides_replace_and_add(override):
    assert cost_usd("gpt-4o", MILLION, {"gpt-4o": override}) == 3
    assert cost_usd("my-local-llama", MILLION, {"my-local-llama": override}) == 3


def test_an_exact_override_beats_the_base_name():
    overrides = {"gpt-4o-2024-05-13": (5, 15)}

    assert cost_usd("gpt-4o-2024-05-13", MILLION, overrides) == 20
    assert cost_usd("gpt-4o-2024-08-06", MILLION, overrides) == 12.5


@pytest.mark.parametrize("override", [(1,), {"prompt": 1}, ("a", 2), (-1, 2), (float("nan"), 1)])
def test_bad_overrides_are_refused(override):
    with pytest.raises(ConfigurationError, match="price override for 'm'"):
        cost_usd("m", MILLION, {"m": override})


def test_unknown_model_costs_nothing_and_warns_once(caplog):
    name = f"mystery-{uuid.uuid4().hex}"
    caplog.set_level(logging.WARNING, logger="worker.models.pricing")

    costs = [cost_usd(name, MILLION) for _ in range(3)]

    assert costs == [0, 0, 0]
    warned = [r for r in caplog.records if name in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].levelno == logging.WARNING
    assert "price overrides" in warned[0].getMessage()


@pytest.mark.parametrize(
    ("spec", "config", "overrides", "price"),
    [
        pytest.param("openai:gpt-4o", {}, {}, Price(2.5, 10.0), id="table"),
        pytest.param("openai:local", {}, {}, None, id="unknown"),
        pytest.param("openai:local", {}, {"local": [1, 2]}, Price(1, 2), id="override"),
        pytest.param(
            "openai:gpt-4o", {"price": {"prompt": 3, "completion": 4}}, {}, Price(3, 4), id="given"
        ),
        pytest.param("scripted:/a/b.json", {}, {}, Price(0, 0), id="scripted"),
        pytest.param("react:scripted:/a/b.json", {}, {}, Price(0, 0), id="react_scripted"),
        pytest.param("scripted:/a.json", {}, {"scripted": [5, 5]}, Price(5, 5), id="scripted_set"),
    ],
)
def test_session_price(spec, config, overrides, price):
    assert session_price(spec, config, overrides, providers=Providers()) == price


def test_a_call_is_charged_at_the_price_given_at_submit_first():
    given = {"price": {"prompt": 1.0, "completion": 0.0}}
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=0)
    assert (
        call_cost("openai:gpt-4o", given, "gpt-4o-2024-08-06", usage, providers=Providers()) == 1.0
    )
    assert call_cost("openai:gpt-4o", {}, "gpt-4o-2024-08-06", usage, providers=Providers()) == 2.5
    assert (
        call_cost("openai:gpt-4o", {}, "served-under-another-name", usage, providers=Providers())
        == 2.5
    )
    assert call_cost("openai:local", {}, "local", usage, providers=Providers()) == 0.0


@pytest.mark.parametrize(
    ("last", "price", "tokens", "cost"),
    [
        pytest.param(None, None, 25, 0.0, id="first_call_transcript_only"),
        pytest.param(Usage(prompt_tokens=1000, completion_tokens=200), None, 1400, 0.0, id="last"),
        pytest.param(
            Usage(prompt_tokens=1000, completion_tokens=200),
            Price(1.0, 10.0),
            1400,
            (1200 * 1.0 + 200 * 10.0) / 1e6,
            id="priced",
        ),
    ],
)
def test_next_call_estimate(last, price, tokens, cost):
    messages = [{"role": "user", "content": "x" * 100}]
    ahead = next_call(messages, last=last, price=price)
    assert ahead.tokens == tokens
    assert ahead.cost_usd == pytest.approx(cost)


def test_next_call_counts_the_completion_allowed():
    ahead = next_call([], last=None, price=Price(0, 1.0), max_completion_tokens=1_000_000)
    assert (ahead.tokens, ahead.cost_usd) == (1_000_000, 1.0)
