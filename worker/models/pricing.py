"""What a model call costs: a price table per model, overridable from settings.

Prices are OpenAI's list prices in USD per million tokens (standard tier, uncached
prompt tokens); check them against the provider's page and override what differs.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from fsm.budgets import NextCall
from fsm.errors import ConfigurationError
from fsm.values import Usage

from .base import Message, estimate_tokens, transcript_text

#: the model name the scripted model reports, priced at zero
SCRIPTED = "scripted"

log = logging.getLogger(__name__)


class Price(NamedTuple):
    """USD per million tokens."""

    prompt: float
    completion: float


#: list prices; a dated name such as `gpt-4o-2024-08-06` is priced as `gpt-4o`
PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "gpt-5": Price(1.25, 10.00),
        "gpt-5-mini": Price(0.25, 2.00),
        "gpt-5-nano": Price(0.05, 0.40),
        "gpt-4.1": Price(2.00, 8.00),
        "gpt-4.1-mini": Price(0.40, 1.60),
        "gpt-4.1-nano": Price(0.10, 0.40),
        "gpt-4o": Price(2.50, 10.00),
        "gpt-4o-mini": Price(0.15, 0.60),
        "o1": Price(15.00, 60.00),
        "o3": Price(2.00, 8.00),
        "o3-mini": Price(1.10, 4.40),
        "o4-mini": Price(1.10, 4.40),
        "gpt-4-turbo": Price(10.00, 30.00),
        "gpt-3.5-turbo": Price(0.50, 1.50),
        "scripted": Price(0.0, 0.0),
    }
)

#: what an override may be: a Price, `[prompt, completion]` or `{"prompt": .., "completion": ..}`
PriceLike = Price | Sequence[float] | Mapping[str, float]

_DATED = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4})$")
_warned: set[str] = set()


def price_for(model: str, overrides: Mapping[str, PriceLike] | None = None) -> Price | None:
    """The price of `model`, the overrides first, or None if neither knows it."""
    table: dict[str, Price] = dict(PRICES)
    for name, price in (overrides or {}).items():
        table[name] = as_price(name, price)
    for name in _candidates(model):
        if name in table:
            return table[name]
    return None


class SpecPrices(Protocol):
    """What prices a whole model spec: the model providers (worker.models.providers)."""

    def price(self, spec: str, overrides: Mapping[str, PriceLike] | None = None) -> Price | None:
        """The price of the model `spec` names (the overrides first), or None if unknown."""


def session_price(
    spec: str,
    config: Mapping[str, Any],
    overrides: Mapping[str, PriceLike] | None = None,
    *,
    providers: SpecPrices,
) -> Price | None:
    """The price of a session's model: the one given at submit (`config["price"]`), else
    its provider's for its spec (the overrides first); a scripted model is free."""
    given = config.get("price")
    if given is not None:
        return as_price(spec, given)
    return providers.price(spec, overrides)


def charge(price: Price, usage: Usage) -> float:
    """USD for `usage` tokens at `price`."""
    return (usage.prompt_tokens * price.prompt + usage.completion_tokens * price.completion) / 1e6


def call_cost(
    spec: str,
    config: Mapping[str, Any],
    reply_model: str,
    usage: Usage,
    overrides: Mapping[str, PriceLike] | None = None,
    *,
    providers: SpecPrices,
) -> float:
    """USD for one model call of a session: at the price given at submit, else at the
    table's price of the model the server named, else of the session's spec."""
    if config.get("price") is not None:
        return charge(as_price(spec, config["price"]), usage)
    if reply_model and price_for(reply_model, overrides) is not None:
        return cost_usd(reply_model, usage, overrides)
    price = session_price(spec, config, overrides, providers=providers)
    return charge(price, usage) if price is not None else cost_usd(reply_model or spec, usage)


def next_call(
    messages: list[Message],
    *,
    last: Usage | None,
    price: Price | None,
    max_completion_tokens: int | None = None,
) -> NextCall:
    """What the next model call is expected to use, for the budget check before it: the
    transcript's tokens (at least what the last call read and wrote, which the transcript now
    holds) and as many completion tokens as allowed, else as the last call wrote."""
    prompt = estimate_tokens(transcript_text(messages))
    if last is not None:
        prompt = max(prompt, last.total)
    completion = max_completion_tokens or (last.completion_tokens if last is not None else 0)
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion)
    cost = charge(price, usage) if price is not None else 0.0
    return NextCall(tokens=usage.total, cost_usd=cost)


def cost_usd(model: str, usage: Usage, overrides: Mapping[str, PriceLike] | None = None) -> float:
    """USD for `usage` tokens of `model`; an unknown model costs 0 and is logged once."""
    price = price_for(model, overrides)
    if price is None:
        if model not in _warned:
            _warned.add(model)
            log.warning(
                "no price for model %r: its calls count as $0 and max_cost_usd does not "
                "limit it; add it to the price overrides",
                model,
            )
        return 0.0
    return charge(price, usage)


def _candidates(model: str) -> list[str]:
    """The name as given, without a spec prefix (`openai:`), a provider prefix (`openai/`)
    or a date suffix (`-2024-08-06`)."""
    names = [model]
    bare = model
    while bare.startswith(("react:", "openai:")):
        bare = bare.partition(":")[2]
    bare = bare.rsplit("/", 1)[-1]
    names += [bare, _DATED.sub("", bare)]
    return list(dict.fromkeys(names))


def as_price(name: str, value: PriceLike) -> Price:
    """`value` as the price of model `name`; ConfigurationError says what is wrong."""
    try:
        if isinstance(value, str | bytes):
            raise TypeError("a price is two numbers, not text")
        if isinstance(value, Mapping):
            price = Price(float(value["prompt"]), float(value["completion"]))
        else:
            prompt, completion = value
            price = Price(float(prompt), float(completion))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"price override for {name!r} must be [prompt, completion] or "
            f'{{"prompt": .., "completion": ..}} in USD per million tokens, got {value!r}'
        ) from exc
    if not all(math.isfinite(p) and p >= 0 for p in price):
        raise ConfigurationError(
            f"price override for {name!r} must be finite and not negative, got {value!r}"
        )
    return price


#: the context windows of the models the price table knows, in tokens (input and output
#: together, as the providers publish them); a dated name takes its undated one's
CONTEXT_WINDOWS: Mapping[str, int] = MappingProxyType(
    {
        "gpt-5": 400_000,
        "gpt-5-mini": 400_000,
        "gpt-5-nano": 400_000,
        "gpt-4.1": 1_047_576,
        "gpt-4.1-mini": 1_047_576,
        "gpt-4.1-nano": 1_047_576,
        "gpt-4o": 128_000,
        "gpt-4o-mini": 128_000,
        "o1": 200_000,
        "o3": 200_000,
        "o3-mini": 200_000,
        "o4-mini": 200_000,
        "gpt-4-turbo": 128_000,
        "gpt-3.5-turbo": 16_385,
        # a scripted model plays its replies by their number: never compact its transcript
        "scripted": 10_000_000,
    }
)

#: the window of a model the table does not know (a local vLLM or Ollama model): small on
#: purpose, so its transcript is masked early rather than refused; give the real one with
#: --context-window
DEFAULT_CONTEXT_WINDOW = 16_384


def context_window(spec: str) -> int:
    """The context window of the model `spec` names, from the table, else the default."""
    if spec.startswith("scripted:"):
        return CONTEXT_WINDOWS["scripted"]
    for name in _candidates(spec):
        if name in CONTEXT_WINDOWS:
            return CONTEXT_WINDOWS[name]
    return DEFAULT_CONTEXT_WINDOW
