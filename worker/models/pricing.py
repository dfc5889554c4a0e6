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

from tickwork.fsm.budgets import NextCall
from tickwork.fsm.context import MAX_WINDOW, MIN_WINDOW
from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.values import Usage
from tickwork.worker.models.base import (
    Message,
    estimate_schemas,
    estimate_tokens,
    transcript_text,
)
from tickwork.worker.models.transport import MIN_ANSWER_ROOM

#: the model name the scripted model reports, priced at zero
SCRIPTED = "scripted"

log = logging.getLogger(__name__)


class Price(NamedTuple):
    """USD per million tokens, and the most tokens the model writes in one call."""

    prompt: float
    completion: float
    #: prompt tokens read from the provider's prompt cache; None: at `prompt`
    cached: float | None = None
    #: prompt tokens written to the provider's prompt cache (Anthropic); None: at `prompt`
    cache_write: float | None = None
    #: the most completion tokens the model writes in one call; None: DEFAULT_MAX_COMPLETION
    max_completion: int | None = None
    #: the model's context window in tokens, for sessions submitted without one; None: the
    #: built-in CONTEXT_WINDOWS, else DEFAULT_CONTEXT_WINDOW (`context_window`)
    context_window: int | None = None

    @property
    def cached_rate(self) -> float:
        return self.prompt if self.cached is None else self.cached

    @property
    def cache_write_rate(self) -> float:
        return self.prompt if self.cache_write is None else self.cache_write


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

#: Anthropic's list prices (cache reads at 0.1 of the prompt price, 5-minute cache writes
#: at 1.25); a dated name such as `claude-sonnet-4-5-20250929` is priced as its base
ANTHROPIC_PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "claude-opus-4-1": Price(15.00, 75.00, 1.50, 18.75, 32_000),
        "claude-opus-4": Price(15.00, 75.00, 1.50, 18.75, 32_000),
        "claude-sonnet-4-5": Price(3.00, 15.00, 0.30, 3.75, 64_000),
        "claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75, 64_000),
        "claude-3-7-sonnet": Price(3.00, 15.00, 0.30, 3.75, 64_000),
        "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25, 64_000),
        "claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00, 8_192),
        "claude-3-haiku": Price(0.25, 1.25, 0.03, 0.30, 4_096),
    }
)

#: OpenAI's price of cached prompt tokens (its published discount is per model: 0.1 of
#: the prompt price for gpt-5, 0.25 for gpt-4.1, o3 and o4-mini, 0.5 for gpt-4o, o1 and
#: o3-mini); a model not here pays its prompt price for them
CACHED_PRICES: Mapping[str, float] = MappingProxyType(
    {
        "gpt-5": 0.125,
        "gpt-5-mini": 0.025,
        "gpt-5-nano": 0.005,
        "gpt-4.1": 0.50,
        "gpt-4.1-mini": 0.10,
        "gpt-4.1-nano": 0.025,
        "gpt-4o": 1.25,
        "gpt-4o-mini": 0.075,
        "o1": 7.50,
        "o3": 0.50,
        "o3-mini": 0.55,
        "o4-mini": 0.275,
    }
)

#: the most completion tokens each model of PRICES writes in one call: a larger cap is
#: refused by the server (400), so the cap sent is never above it
MAX_COMPLETION: Mapping[str, int] = MappingProxyType(
    {
        "gpt-5": 128_000,
        "gpt-5-mini": 128_000,
        "gpt-5-nano": 128_000,
        "gpt-4.1": 32_768,
        "gpt-4.1-mini": 32_768,
        "gpt-4.1-nano": 32_768,
        "gpt-4o": 16_384,
        "gpt-4o-mini": 16_384,
        "o1": 100_000,
        "o3": 100_000,
        "o3-mini": 100_000,
        "o4-mini": 100_000,
        "gpt-4-turbo": 4_096,
        "gpt-3.5-turbo": 4_096,
    }
)

#: the cap of a model whose own limit no table knows: enough for a step's thought and
#: calls; raise it with `max_completion` in TICKWORK_PRICES
DEFAULT_MAX_COMPLETION = 8_192
#: the completion cap leaves the prompt's estimate and 1/N of it more in the context window,
#: for what a tokenizer counts beyond four characters a token: an eighth, or where that
#: leaves too little room for an answer a thirty-second, or none (the estimate is scaled to
#: the server's count of the last prompt; a server counting more refuses, naming the
#: prompt's length, and the call is asked again within its room)
WINDOW_MARGINS = (8, 32, None)

#: what an override may be: a Price, `[prompt, completion]` (or up to `cached`,
#: `cache_write`, `max_completion`, `context_window` after them) or `{"prompt": ..,
#: "completion": .., ...}`
PriceLike = Price | Sequence[float] | Mapping[str, float]

_DATED = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")
_warned: set[str] = set()


def price_for(model: str, overrides: Mapping[str, PriceLike] | None = None) -> Price | None:
    """The price of `model`, the overrides first, or None if neither knows it."""
    table: dict[str, Price] = {**PRICES, **ANTHROPIC_PRICES}
    for name, price in (overrides or {}).items():
        table[name] = as_price(name, price)
    for name in _candidates(model):
        if name in table:
            return _completed(name, table[name])
    return None


def _completed(name: str, price: Price) -> Price:
    """`price` with the cached price and the model's limit from their tables where unset."""
    if price.cached is None and name in CACHED_PRICES:
        price = price._replace(cached=CACHED_PRICES[name])
    if price.max_completion is None and name in MAX_COMPLETION:
        price = price._replace(max_completion=MAX_COMPLETION[name])
    return price


class SpecPrices(Protocol):
    """What prices a whole model spec: the model providers (tickwork.worker.models.providers)."""

    def price(self, spec: str, overrides: Mapping[str, PriceLike] | None = None) -> Price | None:
        """The price of the model `spec` names (the overrides first), or None if unknown."""


#: a price's rates by field: what a given price is compared on with the configured one
RATES = {
    "prompt": "prompt",
    "completion": "completion",
    "cached": "cached_rate",
    "cache_write": "cache_write_rate",
}


def below(given: Price, configured: Price) -> list[str]:
    """The rates (`RATES`) of `given` that are lower than `configured`'s."""
    return [f for f, rate in RATES.items() if getattr(given, rate) < getattr(configured, rate)]


def floored(given: Price, configured: Price | None) -> Price:
    """`given` with each rate below `configured`'s raised to it: a price given at submit may
    make a session's bill higher than the operator's price, never lower."""
    if configured is None:
        return given
    given = discounted(given, configured)
    # a cached rate `configured` leaves unset is its prompt rate: unset, it follows the prompt's
    raised = {f: getattr(configured, f) for f in below(given, configured)}
    if given.max_completion is None:
        # the price was given, not the model: the cap sent must still be one it accepts
        raised["max_completion"] = configured.max_completion
    return given._replace(**raised)


def discounted(given: Price, configured: Price) -> Price:
    """`given` with the cache rates it leaves unset at `configured`'s discount on its prompt
    rate: `--price 3,15` for a Claude model bills cache reads at $0.30, as its list price
    does, not at $3 (a given price has no cache rates unless TICKWORK_PRICES-style)."""
    unset = {
        f: getattr(configured, f) * (given.prompt / configured.prompt if configured.prompt else 1)
        for f in ("cached", "cache_write")
        if getattr(given, f) is None and getattr(configured, f) is not None
    }
    return given._replace(**unset)


def session_price(
    spec: str,
    config: Mapping[str, Any],
    overrides: Mapping[str, PriceLike] | None = None,
    *,
    providers: SpecPrices,
) -> Price | None:
    """The price of a session's model: its provider's for its spec (the overrides first;
    a scripted model is free), or the one given at submit (`config["price"]`) where that
    is higher or the model has no configured price."""
    configured = providers.price(spec, overrides)
    given = config.get("price")
    if given is None:
        return configured
    return floored(as_price(spec, given), configured)


def passes_on(
    given: PriceLike,
    *,
    parent: str,
    child: str,
    overrides: Mapping[str, PriceLike] | None = None,
    providers: SpecPrices,
) -> bool:
    """Whether a child session of model `child` takes the price `given` at its parent's
    submit, by the submit's rule: the parent's price stands for its provider's models (a
    scripted child's too) where it is not below the child model's configured price, or
    where neither model has one (only a trusted caller prices a model that has none)."""
    if child.split(":", 1)[0] != parent.split(":", 1)[0]:
        return False
    configured = providers.price(child, overrides)
    if configured is None:
        return providers.price(parent, overrides) is None
    return not below(discounted(as_price(parent, given), configured), configured)


def charge(price: Price, usage: Usage) -> float:
    """USD for `usage` tokens at `price`: the prompt tokens read from and written to the
    provider's cache at their own prices, the others at the prompt price."""
    cached = min(usage.cached_prompt_tokens, usage.prompt_tokens)
    written = min(usage.cache_creation_tokens, usage.prompt_tokens - cached)
    plain = usage.prompt_tokens - cached - written
    return (
        plain * price.prompt
        + cached * price.cached_rate
        + written * price.cache_write_rate
        + usage.completion_tokens * price.completion
    ) / 1e6


def billed(
    price: Price | None,
    spec: str,
    reply_model: str,
    usage: Usage,
    overrides: Mapping[str, PriceLike] | None = None,
) -> float:
    """USD for one model call of a session at its `price` (`session_price`: the operator's
    price of its spec, raised to the price given at submit where that is higher), found once
    by the caller (an agent's THINK, a graph node's run). Only a spec nobody prices is billed
    by the model the server named (a router's or an alias's answer): the name in the reply is
    the server's to choose, so it never lowers (or raises) what the operator configured."""
    if price is not None:
        return charge(price, usage)
    return cost_usd(reply_model or spec, usage, overrides)


def next_call(
    messages: list[Message],
    *,
    last: Usage | None,
    price: Price | None,
    max_completion_tokens: int | None = None,
    window: int | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    scale: float = 1.0,
    tokens: int | None = None,
    schema_tokens: int | None = None,
) -> NextCall:
    """What the next model call is expected to read, for the budget check and the completion
    cap before it: the transcript's tokens (at least what the last call read and wrote, which
    the transcript now holds) at the prompt price, what each completion token costs, and the
    most it may write (the model's own limit, `max_completion_tokens` if tighter, and the
    room the model's context `window` leaves after the prompt and its `tools`' schemas);
    `scale`: how many times the estimate the server counted the last prompt
    (`tickwork.fsm.context.scale`). `tokens` and `schema_tokens`: the unscaled estimates of
    `messages` and of the schemas, where the caller made them (a THINK's plan did)."""
    text = estimate_tokens(transcript_text(messages)) if tokens is None else tokens
    schemas = estimate_schemas(tools) if schema_tokens is None else schema_tokens
    prompt = math.ceil(text * scale)
    read = math.ceil((text + schemas) * scale)
    if last is not None:
        prompt = max(prompt, last.total)
        read = max(read, last.total)
    limit = DEFAULT_MAX_COMPLETION
    if price is not None and price.max_completion is not None:
        limit = price.max_completion
    if max_completion_tokens is not None:
        limit = min(limit, max_completion_tokens)
    # vLLM, OpenAI and Anthropic refuse a call whose prompt and cap together pass the window;
    # a tokenizer counts code and JSON at fewer characters a token than the estimate, so a
    # margin is left for it (WINDOW_MARGINS; the other caps were refused every time). A
    # prompt that leaves less room than an answer needs (MIN_ANSWER_ROOM) even without one
    # is the server's to refuse: a compaction follows, where a cap of a few tokens would
    # cut the answer
    for share in WINDOW_MARGINS if window is not None else ():
        room = window - read - (read // share if share else 0)
        if room >= min(limit, MIN_ANSWER_ROOM):
            limit = min(limit, room)
            break
    return NextCall(
        tokens=prompt,
        # uncached: a cache hit only makes the call cheaper than its cap allows for
        cost_usd=prompt * price.prompt / 1e6 if price is not None else 0.0,
        usd_per_completion_token=price.completion / 1e6 if price is not None else 0.0,
        max_completion_tokens=limit,
    )


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
    while bare.startswith(("react:", "openai:", "anthropic:")):
        bare = bare.partition(":")[2]
    bare = bare.rsplit("/", 1)[-1]
    names += [bare, _DATED.sub("", bare)]
    return list(dict.fromkeys(names))


def as_price(name: str, value: PriceLike) -> Price:
    """`value` as the price of model `name`; ConfigurationError says what is wrong."""
    try:
        if isinstance(value, str | bytes):
            raise TypeError("it is text, not numbers")
        if isinstance(value, Mapping):
            unknown = sorted(str(k) for k in set(value) - set(Price._fields))
            if unknown:
                raise KeyError(f"unknown key(s) {', '.join(map(repr, unknown))}")
            missing = [k for k in ("prompt", "completion") if value.get(k) is None]
            if missing:
                raise KeyError(f"no {' and no '.join(map(repr, missing))}")
            numbers = {k: value[k] for k in Price._fields if value.get(k) is not None}
            price = _numbers(**numbers)
        else:
            if not isinstance(value, Sequence):
                raise TypeError("it is neither a list nor an object")
            if not 2 <= len(value) <= len(Price._fields):
                raise ValueError(f"it has {len(value)} number(s), not two to six")
            price = _numbers(*value)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        why = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
        raise ConfigurationError(
            f"price override for {name!r}: {why}; write [prompt, completion] or "
            f'{{"prompt": .., "completion": ..}} in USD per million tokens (and optionally '
            f'"cached", "cache_write", the model\'s "max_completion" tokens and its '
            f'"context_window" in tokens, {MIN_WINDOW:,} to {MAX_WINDOW:,}), got {value!r}'
        ) from exc
    rates = [price.prompt, price.completion, price.cached_rate, price.cache_write_rate]
    if not all(math.isfinite(p) and p >= 0 for p in rates):
        raise ConfigurationError(
            f"price override for {name!r} must be finite and not negative, got {value!r}"
        )
    return price


def _numbers(
    prompt: Any,
    completion: Any,
    cached: Any = None,
    cache_write: Any = None,
    max_completion: Any = None,
    context_window: Any = None,
) -> Price:
    return Price(
        _rate(prompt, "prompt"),
        _rate(completion, "completion"),
        None if cached is None else _rate(cached, "cached"),
        None if cache_write is None else _rate(cache_write, "cache_write"),
        _tokens(max_completion, "max_completion"),
        _tokens(context_window, "context_window", least=MIN_WINDOW, most=MAX_WINDOW),
    )


def _tokens(value: Any, name: str, *, least: int = 1, most: int | None = None) -> int | None:
    """A whole number of tokens in bounds, or None."""
    if value is None:
        return None
    try:
        whole = not isinstance(value, bool) and float(value) == int(value)
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        raise ValueError(f"{name} {value!r} is not a whole number of tokens")
    if int(value) < least or (most is not None and int(value) > most):
        bounds = f"{least:,} to {most:,}" if most is not None else f"at least {least:,}"
        raise ValueError(f"{name} {int(value):,} is out of bounds ({bounds})")
    return int(value)


def _rate(value: Any, name: str) -> float:
    try:
        if isinstance(value, bool):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} {value!r} is not a number") from None


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
        "claude-opus-4-1": 200_000,
        "claude-opus-4": 200_000,
        "claude-sonnet-4-5": 200_000,
        "claude-sonnet-4": 200_000,
        "claude-3-7-sonnet": 200_000,
        "claude-haiku-4-5": 200_000,
        "claude-3-5-haiku": 200_000,
        "claude-3-haiku": 200_000,
        # a scripted model has no window of its own (it answers compactions itself, which
        # its span still asks for): a test gives a smaller one with --context-window
        "scripted": 10_000_000,
    }
)

#: the window of a model the table does not know (a local vLLM or Ollama model): small on
#: purpose, so its transcript is masked early rather than refused; give the real one with
#: --context-window, or its context_window in TICKWORK_PRICES
DEFAULT_CONTEXT_WINDOW = 16_384


def context_window(
    spec: str,
    overrides: Mapping[str, PriceLike] | None = None,
    *,
    providers: SpecPrices | None = None,
) -> int:
    """The context window of the model `spec` names: its price's (`context_window` in
    TICKWORK_PRICES, or its provider's price), else the table's, else the default."""
    price = providers.price(spec, overrides) if providers is not None else None
    if price is not None and price.context_window is not None:
        return price.context_window
    if spec.startswith("scripted:"):
        return CONTEXT_WINDOWS["scripted"]
    for name in _candidates(spec):
        if name in CONTEXT_WINDOWS:
            return CONTEXT_WINDOWS[name]
    return DEFAULT_CONTEXT_WINDOW
