"""Model providers: what the prefix of a model spec (`openai:`, `anthropic:`, `react:`,
`scripted:`) stands for.

A provider is a value: its prefix, a line of help for error messages, how it checks and makes
the model the rest of a spec names, and optionally its price, its metrics label and what the
submitting host makes of the rest (a script path made absolute). `Providers` holds the shipped
ones, those of the `tickwork.models` entry points and those named in `TICKWORK_IMPORTS`, and
answers for whole specs. Adding a provider is one module holding a `Provider` plus one line:
its `module:attr` in TICKWORK_IMPORTS (of the workers and of the submitting client alike), or
an entry point in the `tickwork.models` group of the package that ships it.

The callables of a provider are given the rest of the spec (after `prefix:`) and those of
their documented keywords they take (all of them if they take `**kwargs`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tickwork.fsm.errors import ConfigurationError, InvalidModelSpec, MissingCredentials
from tickwork.worker.config.imports import load_object
from tickwork.worker.models import anthropic
from tickwork.worker.models.base import Model
from tickwork.worker.models.openai import DEFAULT_BASE_URL, OpenAIChatModel
from tickwork.worker.models.pricing import SCRIPTED, Price, PriceLike, price_for
from tickwork.worker.models.react import ReActModel
from tickwork.worker.models.scripted import ScriptedModel, load_script

#: the entry-point group installed packages list their providers in
ENTRY_POINTS = "tickwork.models"
#: what a provider's prefix may be
PREFIX = re.compile(r"[a-z][a-z0-9_-]{0,31}")
#: the longest model name a spec may carry (the width of the steps' model column)
MAX_MODEL_NAME = 200
#: the longest metrics label
MAX_LABEL = 100
T = TypeVar("T")


@dataclass(frozen=True)
class Provider:
    """What specs `prefix:REST` stand for."""

    #: what such a spec starts with, before its first `:`
    prefix: str
    #: the accepted form, for a person who wrote another: `openai:MODEL (...)`
    help: str
    #: `make(rest, ...)` -> the Model; keywords: `timeout_s`, `client` (a shared
    #: `tickwork.worker.models.Poster`, left open: `post(url, json=, headers=, timeout=)` as
    #: httpx.Client's; or None), `env` (stands in for os.environ), `base_url`,
    #: `api_key`, `spec` (the whole spec), `providers` (the registry)
    make: Callable[..., Model]
    #: `check(rest, ...)` raises InvalidModelSpec if the model cannot be made; it is
    #: untrusted input, checked at submit; keywords: `spec`, `shown` (the spec cut for a
    #: message), `providers`. None takes any non-empty rest.
    check: Callable[..., None] | None = None
    #: `price(rest, ...)` -> Price in USD per million tokens, or None if unknown; keywords:
    #: `spec`, `overrides` (TICKWORK_PRICES), `providers`. The overrides for the whole spec
    #: and for the rest come first. None: the price table (TICKWORK_PRICES first) by name.
    price: Callable[..., Price | None] | None = None
    #: `label(rest, ...)` -> the metrics label of its models (bounded: no paths, no ids);
    #: keywords: `spec`, `providers`. None: the spec itself.
    label: Callable[..., str] | None = None
    #: `resolve(rest, ...)` -> the rest to submit, made on the submitting host (e.g. a
    #: script's path made absolute and its file read); keywords: `spec`, `providers`
    resolve: Callable[..., str] | None = None


class Providers:
    """The providers a process knows: the shipped ones, then those of the `tickwork.models`
    entry points, then those `imports` (TICKWORK_IMPORTS) name; found at first use."""

    def __init__(
        self,
        imports: Iterable[str] = (),
        *,
        shipped: Iterable[Provider] | None = None,
        entry_points: bool = True,
    ) -> None:
        self._shipped = tuple(SHIPPED if shipped is None else shipped)
        self._imports = tuple(imports)
        self._entry_points = entry_points
        self._known: dict[str, Provider] | None = None

    @property
    def known(self) -> Mapping[str, Provider]:
        """prefix -> provider, in the order they were registered."""
        if self._known is None:
            known: dict[str, Provider] = {}
            for provider, origin in self._found():
                _register(known, provider, origin)
            self._known = known
        return self._known

    @property
    def help(self) -> str:
        """The accepted forms, said for a person who gave another."""
        forms = [p.help for p in self.known.values()]
        return forms[0] if len(forms) == 1 else f"{', '.join(forms[:-1])} or {forms[-1]}"

    def get(self, prefix: str) -> Provider | None:
        return self.known.get(prefix)

    def check(self, spec: str) -> str:
        """`spec` if it names a model tickwork can run, else InvalidModelSpec saying what to
        write. Checked at submit: the spec is untrusted input (the name goes into URLs, logs
        and the store)."""
        if not isinstance(spec, str) or not spec.strip():
            raise InvalidModelSpec(f"no model given; use {self.help}")
        shown = repr(spec[:80]) + ("…" if len(spec) > 80 else "")
        if not spec.isprintable() or spec != spec.strip():
            raise InvalidModelSpec(
                f"model spec {shown} holds spaces or control characters; use {self.help}"
            )
        kind, _, rest = spec.partition(":")
        provider = self.get(kind)
        if provider is not None and rest:
            if provider.check is not None:
                _call(provider.check, rest, spec=spec, shown=shown, providers=self)
            return spec
        if provider is not None:
            raise InvalidModelSpec(
                f"model spec {shown} names no model after {kind!r}; use {self.help}"
            )
        if not rest:
            hint = f"; for an OpenAI-compatible server write openai:{spec}"
        else:
            hint = (
                f"; tickwork does not speak {kind!r} itself: serve the model through an "
                "OpenAI-compatible endpoint (OPENAI_BASE_URL) and write openai:MODEL, or add "
                "a provider (TICKWORK_IMPORTS)"
            )
        raise InvalidModelSpec(f"unknown model spec {shown}: use {self.help}{hint}")

    def make(self, spec: str, **options: Any) -> Model:
        """The model `spec` names; `options` are the keywords of `Provider.make`."""
        kind, _, rest = spec.partition(":")
        provider = self.get(kind)
        if provider is None or not rest:
            hint = (
                ""
                if provider is not None or not rest
                else f"; if {kind!r} is a provider, this process must see it too: list it in "
                "TICKWORK_IMPORTS or install the package whose tickwork.models entry point "
                "names it"
            )
            raise ConfigurationError(f"unknown model spec {spec!r}; use {self.help}{hint}")
        return _call(provider.make, rest, spec=spec, providers=self, **options)

    def price(self, spec: str, overrides: Mapping[str, PriceLike] | None = None) -> Price | None:
        """The price of the model `spec` names (the overrides first), or None if unknown."""
        kind, _, rest = spec.partition(":")
        provider = self.get(kind)
        if provider is None or provider.price is None or not rest:
            return price_for(spec, overrides)
        for name in (spec, rest):
            if overrides and name in overrides:
                return price_for(name, {name: overrides[name]})
        return _call(provider.price, rest, spec=spec, overrides=overrides or {}, providers=self)

    def label(self, spec: str) -> str:
        """A bounded metrics label for the model `spec` (or a reply's model name) names."""
        kind, _, rest = spec.partition(":")
        provider = self.get(kind)
        if provider is None or provider.label is None or not rest:
            return spec[:MAX_LABEL]
        return _call(provider.label, rest, spec=spec, providers=self)[:MAX_LABEL]

    def resolve(self, spec: str) -> str:
        """`spec` as the submitting host means it (a script's path made absolute and read)."""
        kind, _, rest = spec.partition(":")
        provider = self.get(kind)
        if provider is None or provider.resolve is None or not rest:
            return spec
        return f"{kind}:{_call(provider.resolve, rest, spec=spec, providers=self)}"

    def wraps(self, rest: str) -> bool:
        """Whether `rest` names a model a wrapper (react:) can wrap: a registered prefix
        that is not a wrapper itself."""
        kind = rest.partition(":")[0]
        return kind != REACT.prefix and self.get(kind) is not None

    def _found(self) -> Iterable[tuple[Provider, str]]:
        for provider in self._shipped:
            yield provider, "tickwork"
        if self._entry_points:
            for point in importlib.metadata.entry_points(group=ENTRY_POINTS):
                origin = f"entry point {point.name!r} ({point.value}) of {ENTRY_POINTS}"
                try:
                    found = point.load()
                except Exception as exc:
                    raise ConfigurationError(f"cannot load the {origin}: {exc}") from exc
                yield _as_provider(found, origin), origin
        for spec in self._imports:
            found = load_object(spec)
            if isinstance(found, Provider):
                yield found, f"{spec} (TICKWORK_IMPORTS)"


def _register(known: dict[str, Provider], provider: Provider, origin: str) -> None:
    if not PREFIX.fullmatch(provider.prefix):
        raise ConfigurationError(
            f"model provider prefix {provider.prefix!r} from {origin} must be lower-case "
            "letters, digits, '_' or '-', starting with a letter, at most 32"
        )
    taken = known.get(provider.prefix)
    if taken is not None and taken != provider:
        raise ConfigurationError(
            f"model provider prefix {provider.prefix!r} from {origin} is taken by another "
            "provider; give it another prefix"
        )
    known[provider.prefix] = provider


def _as_provider(obj: Any, origin: str) -> Provider:
    if not isinstance(obj, Provider):
        raise ConfigurationError(
            f"{origin} is a {type(obj).__name__}, not a tickwork.worker.models.providers.Provider"
        )
    return obj


def _call(fn: Callable[..., T], rest: str, **offered: Any) -> T:
    """`fn(rest, ...)` with those of the offered keywords it takes."""
    try:
        taken = _keywords(fn)
    except TypeError:  # an unhashable callable (or no signature: raised again, as it was)
        taken = _keywords.__wrapped__(fn)
    if taken is not None:
        offered = {k: v for k, v in offered.items() if k in taken}
    return fn(rest, **offered)


@functools.lru_cache(maxsize=256)
def _keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    """The names `fn` takes, None if it takes any keyword: read once a function (a THINK
    prices its model twice)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return frozenset(params)


def _make_openai(
    rest: str,
    *,
    spec: str,
    timeout_s: float | None = None,
    client: Any = None,
    env: Mapping[str, str] | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
) -> Model:
    url, key = _endpoint(
        spec,
        env,
        base_url,
        api_key,
        vendor="OPENAI",
        default_url=DEFAULT_BASE_URL,
        host="api.openai.com",
    )
    return OpenAIChatModel(rest, base_url=url, api_key=key, timeout_s=timeout_s, client=client)


def _endpoint(
    spec: str,
    env: Mapping[str, str] | None,
    base_url: str | None,
    api_key: str | None,
    *,
    vendor: str,
    default_url: str,
    host: str,
) -> tuple[str, str | None]:
    """The base URL and API key of a vendor's model: the arguments, else `{vendor}_BASE_URL`
    and `{vendor}_API_KEY`; a URL on the vendor's own `host` needs a key."""
    env = os.environ if env is None else env
    url = base_url or env.get(f"{vendor}_BASE_URL") or default_url
    key = api_key or env.get(f"{vendor}_API_KEY") or None
    if key is None and host in url:
        raise MissingCredentials(
            f"model {spec!r} needs an API key for {url}: set {vendor}_API_KEY, or set "
            f"{vendor}_BASE_URL to a server that needs none"
        )
    return url, key


def _check_name(rest: str, *, shown: str) -> None:
    if len(rest) > MAX_MODEL_NAME or any(c.isspace() for c in rest):
        raise InvalidModelSpec(
            f"model name in {shown} must be at most {MAX_MODEL_NAME} characters without spaces"
        )


def _price_by_name(rest: str, *, spec: str, overrides: Mapping[str, PriceLike]) -> Price | None:
    return price_for(spec, overrides)


def _make_anthropic(
    rest: str,
    *,
    spec: str,
    timeout_s: float | None = None,
    client: Any = None,
    env: Mapping[str, str] | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
) -> Model:
    url, key = _endpoint(
        spec,
        env,
        base_url,
        api_key,
        vendor="ANTHROPIC",
        default_url=anthropic.DEFAULT_BASE_URL,
        host="api.anthropic.com",
    )
    return anthropic.AnthropicMessagesModel(
        rest, base_url=url, api_key=key, timeout_s=timeout_s, client=client
    )


def _make_react(rest: str, *, spec: str, providers: Providers, **options: Any) -> Model:
    if not providers.wraps(rest):
        raise ConfigurationError(f"unknown model spec {spec!r}; use {providers.help}")
    return ReActModel(providers.make(rest, **options))


def _check_react(rest: str, *, shown: str, providers: Providers) -> None:
    if not providers.wraps(rest):
        raise InvalidModelSpec(
            f"unknown model spec {shown}: use {providers.help}; react: wraps openai:MODEL, "
            "anthropic:MODEL or scripted:PATH"
        )
    providers.check(rest)


def _price_react(
    rest: str, *, overrides: Mapping[str, PriceLike], providers: Providers
) -> Price | None:
    return providers.price(rest, overrides)


def _label_react(rest: str, *, providers: Providers) -> str:
    inner = providers.label(rest)
    return inner if inner != rest[:MAX_LABEL] else f"{REACT.prefix}:{rest}"


def _resolve_react(rest: str, *, providers: Providers) -> str:
    return providers.resolve(rest)


def _resolve_script(rest: str) -> str:
    path = Path(rest).expanduser().absolute()
    load_script(path)  # a bad script fails here, not in a worker later
    # `../s.json` from one folder and `s.json` from another are one script: one spelling
    # in `show`, `ls` and `dlq stats --by model`
    tidy = Path(os.path.normpath(path))
    if tidy != path and tidy.is_file() and os.path.samefile(tidy, path):
        return str(tidy)
    return str(path)


OPENAI = Provider(
    prefix="openai",
    help="openai:MODEL (any OpenAI-compatible server: OpenAI, vLLM, Ollama; e.g. openai:gpt-4o)",
    make=_make_openai,
    check=_check_name,
    price=_price_by_name,
)
ANTHROPIC = Provider(
    prefix="anthropic",
    help="anthropic:MODEL (the Anthropic Messages API; e.g. anthropic:claude-sonnet-4-5)",
    make=_make_anthropic,
    check=_check_name,
    price=_price_by_name,
)
REACT = Provider(
    prefix="react",
    help="react:openai:MODEL (a model without native tool calls)",
    make=_make_react,
    check=_check_react,
    price=_price_react,
    label=_label_react,
    resolve=_resolve_react,
)
SCRIPTED_PROVIDER = Provider(
    prefix="scripted",
    help="scripted:PATH (a JSON script)",
    make=lambda rest: ScriptedModel(rest),
    price=lambda rest, overrides: price_for(SCRIPTED, overrides),
    label=lambda rest: SCRIPTED,
    resolve=_resolve_script,
)
#: the providers tickwork ships, in the order its help names them
SHIPPED = (OPENAI, ANTHROPIC, REACT, SCRIPTED_PROVIDER)
