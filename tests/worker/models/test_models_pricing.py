from __future__ import annotations

import logging
import math
import uuid

import pytest
from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.values import PRICE_RATES, Usage
from tickwork.worker.models import Price, Providers, cost_usd, price_for
from tickwork.worker.models.base import estimate_schemas, estimate_tokens, transcript_text
from tickwork.worker.models.pricing import (
    DEFAULT_MAX_COMPLETION,
    RATES,
    billed,
    next_call,
    passes_on,
    session_price,
)
from tickwork.worker.models.providers import Provider

MILLION = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)


def bill(spec, config, reply_model, usage, overrides=None, *, providers=None):
    """USD for one call of a session of model `spec` and `config`, as an agent's THINK and
    a graph node bill it: at the session's price (`session_price`), then `billed`."""
    providers = providers or Providers()
    price = session_price(spec, config, overrides, providers=providers)
    return billed(price, spec, reply_model, usage, overrides)


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
    assert price_for(name) == Price(0.40, 1.60, cached=0.10, max_completion=32_768)


@pytest.mark.parametrize(
    "name", ["claude-sonnet-4-5-20250929", "anthropic:claude-sonnet-4-5", "claude-sonnet-4-5"]
)
def test_anthropic_models_are_priced_with_their_cache_reads_and_writes(name):
    assert price_for(name) == Price(3.0, 15.0, cached=0.30, cache_write=3.75, max_completion=64_000)


@pytest.mark.parametrize(
    ("model", "usage", "usd"),
    [
        # 0.4 of gpt-4o's prompt tokens cached, at half its $2.50
        pytest.param(
            "gpt-4o",
            Usage(prompt_tokens=1_000_000, completion_tokens=0, cached_prompt_tokens=400_000),
            0.6 * 2.5 + 0.4 * 1.25,
            id="openai_cached",
        ),
        # a model without a cached price pays its prompt price for them
        pytest.param(
            "gpt-4-turbo",
            Usage(prompt_tokens=1_000_000, completion_tokens=0, cached_prompt_tokens=400_000),
            10.0,
            id="no_discount",
        ),
        # Anthropic: 0.2 read ($0.30), 0.3 written ($3.75), 0.5 plain ($3), 1M out ($15)
        pytest.param(
            "claude-sonnet-4-5",
            Usage(
                prompt_tokens=1_000_000,
                completion_tokens=1_000_000,
                cached_prompt_tokens=200_000,
                cache_creation_tokens=300_000,
            ),
            0.5 * 3.0 + 0.2 * 0.30 + 0.3 * 3.75 + 15.0,
            id="anthropic_reads_and_writes",
        ),
        # a server reporting more cached tokens than prompt tokens is not paid back
        pytest.param(
            "gpt-4o",
            Usage(prompt_tokens=100, completion_tokens=0, cached_prompt_tokens=10**9),
            100 * 1.25 / 1e6,
            id="cached_beyond_prompt",
        ),
    ],
)
def test_cached_prompt_tokens_are_charged_at_the_cached_price(model, usage, usd):
    assert cost_usd(model, usage) == pytest.approx(usd)


@pytest.mark.parametrize(
    ("override", "price"),
    [
        pytest.param([1, 2, 0.5], Price(1, 2, cached=0.5, max_completion=16_384), id="list_cached"),
        pytest.param(
            {"prompt": 1, "completion": 2, "cached": 0.1, "cache_write": 1.25},
            Price(1, 2, cached=0.1, cache_write=1.25, max_completion=16_384),
            id="dict_cache",
        ),
        pytest.param(
            {"prompt": 1, "completion": 2, "max_completion": 4096},
            Price(1, 2, cached=1.25, max_completion=4096),
            id="dict_max",
        ),
        # what an override leaves unset comes from the tables
        pytest.param([1, 2], Price(1, 2, cached=1.25, max_completion=16_384), id="table_fills"),
    ],
)
def test_overrides_may_give_cache_prices_and_the_models_limit(override, price):
    assert price_for("gpt-4o", {"gpt-4o": override}) == price


@pytest.mark.parametrize(
    ("override", "window"),
    [
        pytest.param({"prompt": 0, "completion": 0, "context_window": 131_072}, 131_072, id="dict"),
        pytest.param([0, 0, None, None, None, 8_192], 8_192, id="sixth"),
        pytest.param([0, 0], 16_384, id="none"),
    ],
)
def test_an_operator_gives_a_models_context_window_next_to_its_price(override, window):
    from tickwork.worker.models.pricing import context_window

    overrides = {"my-vllm": override}
    assert context_window("openai:my-vllm", overrides, providers=Providers()) == window
    assert context_window("react:openai:my-vllm", overrides, providers=Providers()) == window
    assert context_window("openai:gpt-4o", overrides, providers=Providers()) == 128_000


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


@pytest.mark.parametrize(
    "override",
    [
        (1,),
        {"prompt": 1},
        ("a", 2),
        (-1, 2),
        (float("nan"), 1),
        (1, 2, -0.5),
        (1, 2, 3, 4, 5, 131_072, 7),
        (1, 2, None, None, None, 100),
        {"prompt": 1, "completion": 2, "context": 3},
        {"prompt": 1, "completion": 2, "context_window": 10**8},
        {"prompt": 1, "completion": 2, "context_window": 1.5e4 + 0.5},
        {"prompt": 1, "completion": 2, "max_completion": 0.5},
        {"prompt": 1, "completion": 2, "max_completion": float("inf")},
        (True, 2),
    ],
)
def test_bad_overrides_are_refused(override):
    with pytest.raises(ConfigurationError, match="price override for 'm'"):
        cost_usd("m", MILLION, {"m": override})


@pytest.mark.parametrize(
    ("override", "why"),
    [
        (
            {"prompt": 1, "completion": 2, "contxt_window": 100_000},
            "unknown key(s) 'contxt_window'",
        ),
        ({"prompt": 1}, "no 'completion'"),
        ({"prompt": 1, "completion": 2, "context_window": 100}, "context_window 100 is out of"),
        ((1, 2, None, None, 0), "max_completion 0 is out of bounds (at least 1)"),
        ((1,), "it has 1 number(s), not two to six"),
        (("a", 2), "prompt 'a' is not a number"),
        ({"prompt": 1, "completion": 2, "max_completion": 0.5}, "max_completion 0.5 is not a"),
    ],
)
def test_a_bad_override_names_what_is_wrong(override, why):
    with pytest.raises(ConfigurationError) as refused:
        cost_usd("m", MILLION, {"m": override})
    assert f"price override for 'm': {why}" in str(refused.value)
    assert "write [prompt, completion]" in str(refused.value)


def test_unknown_model_costs_nothing_and_warns_once(caplog):
    name = f"mystery-{uuid.uuid4().hex}"
    caplog.set_level(logging.WARNING, logger="tickwork.worker.models.pricing")

    costs = [cost_usd(name, MILLION) for _ in range(3)]

    assert costs == [0, 0, 0]
    warned = [r for r in caplog.records if name in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].levelno == logging.WARNING
    assert "price overrides" in warned[0].getMessage()


@pytest.mark.parametrize(
    ("spec", "config", "overrides", "price"),
    [
        pytest.param("openai:gpt-4o", {}, {}, Price(2.5, 10.0, 1.25, None, 16_384), id="table"),
        pytest.param("openai:local", {}, {}, None, id="unknown"),
        pytest.param("openai:local", {}, {"local": [1, 2]}, Price(1, 2), id="override"),
        pytest.param(
            "openai:gpt-4o",
            {"price": {"prompt": 3, "completion": 12}},
            {},
            Price(3, 12, cached=1.5, max_completion=16_384),
            id="given_keeps_the_models_limit",
        ),
        pytest.param(
            "openai:gpt-4o",
            {"price": {"prompt": 0, "completion": 12}},
            {},
            Price(2.5, 12, cached=1.25, max_completion=16_384),
            id="given_never_below_the_table",
        ),
        pytest.param(
            "openai:local",
            {"price": {"prompt": 0, "completion": 0}},
            {"local": [1, 2]},
            Price(1, 2),
            id="given_never_below_the_override",
        ),
        pytest.param("scripted:/a/b.json", {}, {}, Price(0, 0), id="scripted"),
        pytest.param("react:scripted:/a/b.json", {}, {}, Price(0, 0), id="react_scripted"),
        pytest.param("scripted:/a.json", {}, {"scripted": [5, 5]}, Price(5, 5), id="scripted_set"),
    ],
)
def test_session_price(spec, config, overrides, price):
    assert session_price(spec, config, overrides, providers=Providers()) == price


def test_the_rates_a_submission_gives_are_the_prices_first_fields_in_their_order():
    """`PRICE_RATES` orders --price, the API's price list and `show`'s price line; a price
    given at submit is stored as `Price`'s fields by name and compared on `RATES`."""
    assert Price._fields[: len(PRICE_RATES)] == PRICE_RATES
    assert tuple(RATES) == PRICE_RATES


def test_a_call_is_charged_at_the_price_given_at_submit_first_but_never_below_the_table():
    given = {"price": {"prompt": 3.0, "completion": 0.0}}
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=0)
    assert bill("openai:gpt-4o", given, "gpt-4o-2024-08-06", usage) == 3.0
    # a price of 0 stored before the submit refused it (or a child's) bills the table's
    free = {"price": {"prompt": 0.0, "completion": 0.0}}
    assert bill("openai:gpt-4o", free, "gpt-4o", usage) == 2.5
    assert bill("openai:local", free, "local", usage) == 0.0
    assert bill("openai:gpt-4o", {}, "gpt-4o-2024-08-06", usage) == 2.5
    assert bill("openai:gpt-4o", {}, "served-under-another-name", usage) == 2.5
    assert bill("openai:local", {}, "local", usage) == 0.0


@pytest.mark.parametrize(
    ("last", "price", "tokens", "cost"),
    [
        pytest.param(None, None, 25, 0.0, id="first_call_transcript_only"),
        pytest.param(Usage(prompt_tokens=1000, completion_tokens=200), None, 1200, 0.0, id="last"),
        pytest.param(
            Usage(prompt_tokens=1000, completion_tokens=200),
            Price(1.0, 10.0),
            1200,
            1200 * 1.0 / 1e6,
            id="priced",
        ),
    ],
)
def test_next_call_estimates_the_prompt(last, price, tokens, cost):
    messages = [{"role": "user", "content": "x" * 100}]
    ahead = next_call(messages, last=last, price=price)
    assert ahead.tokens == tokens
    assert ahead.cost_usd == pytest.approx(cost)


@pytest.mark.parametrize(
    ("price", "asked", "limit"),
    [
        pytest.param(None, None, DEFAULT_MAX_COMPLETION, id="unknown_model"),
        pytest.param(Price(1, 2, max_completion=16_384), None, 16_384, id="models_own"),
        pytest.param(Price(1, 2, max_completion=16_384), 500, 500, id="settings_tighter"),
        pytest.param(Price(1, 2, max_completion=100), 500, 100, id="model_tighter"),
    ],
)
def test_next_call_knows_the_most_the_model_may_write(price, asked, limit):
    ahead = next_call([], last=None, price=price, max_completion_tokens=asked)
    assert ahead.max_completion_tokens == limit
    assert ahead.usd_per_completion_token == (price.completion / 1e6 if price else 0.0)


@pytest.mark.parametrize(
    ("prompt_chars", "limit"),
    [
        pytest.param(4 * 8_000, 16_384 - 9_000, id="room_left"),
        # 14,000 tokens and an eighth more leave 634: too little for an answer, but with a
        # thirty-second more 1,947, a cap the server takes where it counts within that (the
        # model's own, 8,192, it refused every time, and the call was asked again: two
        # requests a call)
        pytest.param(4 * 14_000, 16_384 - 14_000 - 14_000 // 32, id="room_nearer_the_window"),
        # 15,200 tokens leave 1,184 with no margin only, a cap all the same
        pytest.param(4 * 15_200, 16_384 - 15_200, id="room_with_no_margin"),
        # 15,500 tokens leave 884 even so: too little for an answer, so the cap is left at the
        # model's own and the server refuses the prompt (a compaction follows)
        pytest.param(4 * 15_500, DEFAULT_MAX_COMPLETION, id="too_little_room"),
    ],
)
def test_next_call_leaves_the_prompt_room_in_the_window_only_where_an_answer_fits(
    prompt_chars, limit
):
    messages = [{"role": "user", "content": "x" * prompt_chars}]
    ahead = next_call(messages, last=None, price=None, window=16_384)
    assert ahead.max_completion_tokens == limit


def test_next_call_reads_the_transcript_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt's tokens and what the call reads (with the schemas) come from one pass
    over the transcript: a long transcript was turned into text and estimated twice."""
    from tickwork.worker.models import pricing

    passes: list[int] = []

    def counted(messages: list[dict[str, object]]) -> str:
        passes.append(len(messages))
        return transcript_text(messages)

    monkeypatch.setattr(pricing, "transcript_text", counted)
    messages = [{"role": "user", "content": "x" * 4_000}, {"role": "assistant", "content": "y"}]
    schemas = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    ahead = next_call(messages, last=None, price=None, window=16_384, tools=schemas, scale=1.5)
    assert passes == [2]
    text = estimate_tokens(transcript_text(messages))
    assert ahead.tokens == math.ceil(text * 1.5)
    read = math.ceil((text + estimate_schemas(schemas)) * 1.5)
    assert ahead.max_completion_tokens == min(DEFAULT_MAX_COMPLETION, 16_384 - read - read // 8)


@pytest.mark.parametrize("last", [None, Usage(prompt_tokens=9_000, completion_tokens=10)])
def test_next_call_takes_the_callers_estimates_as_its_own(last: Usage | None) -> None:
    """A THINK's plan estimated the prompt and the THINK the schemas: given, they are the
    figures the estimate would have made, and nothing is estimated again."""
    messages = [{"role": "user", "content": "x" * 20_000}]
    schemas = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    asked = {"last": last, "price": Price(1, 2), "window": 16_384, "tools": schemas}
    made = next_call(messages, **asked, scale=1.3)
    given = next_call(
        [],
        **asked,
        scale=1.3,
        tokens=estimate_tokens(transcript_text(messages)),
        schema_tokens=estimate_schemas(schemas),
    )
    assert given == made


@pytest.mark.parametrize(
    ("given", "parent", "child", "passed"),
    [
        pytest.param([3, 15], "scripted:/p.json", "scripted:/c.json", True, id="raises_a_script"),
        pytest.param([0, 0], "openai:local", "openai:other-local", True, id="both_unpriced"),
        pytest.param([0, 0], "openai:local", "openai:gpt-4o", False, id="below_the_childs"),
        pytest.param([3, 12], "openai:gpt-4o", "openai:gpt-4o-mini", True, id="above_the_childs"),
        pytest.param([3, 12], "openai:gpt-4o", "openai:local", False, id="priced_for_another"),
        pytest.param([3, 12], "openai:gpt-4o", "anthropic:claude-haiku-4-5", False, id="provider"),
        pytest.param(
            [3, 15], "anthropic:claude-sonnet-4", "anthropic:claude-sonnet-4-5", True, id="cached"
        ),
    ],
)
def test_a_child_takes_its_parents_given_price_by_the_submits_rule(given, parent, child, passed):
    """The price given for the parent's model is a submitted price for the child's: it
    never lowers the child model's configured price, and stands in for a model without one
    only where the parent's model had none either (then a trusted caller gave it)."""
    assert passes_on(given, parent=parent, child=child, providers=Providers()) is passed


def test_the_operators_price_of_the_spec_wins_over_the_model_name_the_server_answers_with():
    # a gateway or vLLM's --served-model-name answers with a name of its choosing, here one
    # the built-in table prices lower: the session is billed at what the operator configured
    usage = Usage(prompt_tokens=10_000, completion_tokens=1_000)
    house = {"house-model": [100, 400]}
    cost = bill("openai:house-model", {}, "gpt-4o-mini", usage, house)
    assert cost == pytest.approx(1.4)
    # ... and at what a registered provider prices its models, whatever its replies say
    custom = Provider(
        prefix="house",
        help="house:NAME",
        make=lambda rest: None,
        price=lambda rest: Price(1.0, 2.0),
    )
    providers = Providers(shipped=[custom], entry_points=False)
    assert bill("house:x", {}, "scripted", usage, providers=providers) == pytest.approx(0.012)
    # a spec nobody prices is billed by the model that answered (a router's, an alias's)
    assert bill("openai:my-alias", {}, "gpt-4o", usage) == pytest.approx(0.035)
    assert bill("openai:my-alias", {}, "unknown-too", usage) == 0.0


@pytest.mark.parametrize(
    ("spec", "given", "cached", "written"),
    [
        # the list price given again: the cache's discount stands (0.1 reads, 1.25 writes)
        pytest.param("anthropic:claude-sonnet-4-5", [3, 15], 0.30, 3.75, id="anthropic_list"),
        # a higher price given keeps the model's discount on it
        pytest.param("anthropic:claude-sonnet-4-5", [6, 30], 0.60, 7.50, id="anthropic_raised"),
        pytest.param("openai:gpt-4o", [3, 12], 1.50, 3.0, id="openai_half"),
        # a cached rate given stands where it is not below the configured one
        pytest.param("openai:gpt-4o", [3, 12, 2], 2.0, 3.0, id="given_cached"),
        # a model with no cached price pays the prompt price given for them
        pytest.param("openai:local", [1, 2], 1.0, 1.0, id="unconfigured"),
        pytest.param("openai:gpt-4-turbo", [11, 30], 11.0, 11.0, id="no_discount"),
    ],
)
def test_a_price_given_at_submit_keeps_the_models_cache_discount(spec, given, cached, written):
    config = {"price": given}
    reads = Usage(prompt_tokens=1_000_000, completion_tokens=0, cached_prompt_tokens=1_000_000)
    writes = Usage(prompt_tokens=1_000_000, completion_tokens=0, cache_creation_tokens=1_000_000)
    assert bill(spec, config, spec, reads) == pytest.approx(cached)
    assert bill(spec, config, spec, writes) == pytest.approx(written)
    price = session_price(spec, config, providers=Providers())
    assert (price.cached_rate, price.cache_write_rate) == pytest.approx((cached, written))
