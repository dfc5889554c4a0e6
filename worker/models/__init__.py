"""The model layer: what a model is, the shipped models, prices, and `make_model`."""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx

from fsm.errors import ConfigurationError, InvalidModelSpec

from .base import Message, Model, ModelSettings, ToolSchema
from .openai import DEFAULT_BASE_URL, OpenAIChatModel, pooled_client
from .pricing import PRICES, Price, cost_usd, price_for
from .react import ReActModel
from .scripted import ScriptedModel

__all__ = [
    "DEFAULT_BASE_URL",
    "PRICES",
    "Message",
    "Model",
    "ModelSettings",
    "OpenAIChatModel",
    "Price",
    "ReActModel",
    "ScriptedModel",
    "ToolSchema",
    "check_spec",
    "cost_usd",
    "make_model",
    "pooled_client",
    "price_for",
]

SPEC_FORMS = "scripted:PATH, openai:MODEL, react:openai:MODEL or react:scripted:PATH"
#: the accepted forms, said for a person who gave another
SPEC_HELP = (
    "openai:MODEL (any OpenAI-compatible server: OpenAI, vLLM, Ollama; e.g. openai:gpt-4o), "
    "react:openai:MODEL (a model without native tool calls) or scripted:PATH (a JSON script)"
)
#: the longest model name a spec may carry (the width of the steps' model column)
MAX_MODEL_NAME = 200


def check_spec(spec: str) -> str:
    """`spec` if it names a model tickwork can run, else InvalidModelSpec saying what to write.

    Checked at submit, so that a bad spec is refused there instead of failing the session
    later; the spec is untrusted input (the name goes into URLs, logs and the store).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidModelSpec(f"no model given; use {SPEC_HELP}")
    shown = repr(spec[:80]) + ("…" if len(spec) > 80 else "")
    if not spec.isprintable() or spec != spec.strip():
        raise InvalidModelSpec(
            f"model spec {shown} holds spaces or control characters; use {SPEC_HELP}"
        )
    kind, _, rest = spec.partition(":")
    if kind == "react" and rest.partition(":")[0] in ("openai", "scripted"):
        check_spec(rest)
        return spec
    if kind == "scripted" and rest:
        return spec
    if kind == "openai" and rest:
        if len(rest) > MAX_MODEL_NAME or any(c.isspace() for c in rest):
            raise InvalidModelSpec(
                f"model name in {shown} must be at most {MAX_MODEL_NAME} characters without spaces"
            )
        return spec
    if kind in ("openai", "scripted"):
        raise InvalidModelSpec(f"model spec {shown} names no model after {kind!r}; use {SPEC_HELP}")
    if not rest:
        hint = f"; for an OpenAI-compatible server write openai:{spec}"
    elif kind == "react":
        hint = "; react: wraps openai:MODEL or scripted:PATH"
    else:
        hint = (
            f"; tickwork does not speak {kind!r} itself: serve the model through an "
            "OpenAI-compatible endpoint (OPENAI_BASE_URL) and write openai:MODEL"
        )
    raise InvalidModelSpec(f"unknown model spec {shown}: use {SPEC_HELP}{hint}")


def make_model(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    client: httpx.Client | None = None,
) -> Model:
    """The model a spec names.

    `openai:MODEL` talks to `base_url`, else `OPENAI_BASE_URL`, else OpenAI itself, with
    `api_key` or `OPENAI_API_KEY` (required for OpenAI itself, optional for a local server),
    through `client` if given (shared, left open), else a connection per call.
    `env` stands in for `os.environ`.
    """
    env = os.environ if env is None else env
    kind, _, rest = spec.partition(":")
    if kind == "react" and rest.partition(":")[0] in ("openai", "scripted"):
        inner = make_model(
            rest, base_url=base_url, api_key=api_key, timeout_s=timeout_s, env=env, client=client
        )
        return ReActModel(inner)
    if kind == "scripted" and rest:
        return ScriptedModel(rest)
    if kind == "openai" and rest:
        url = base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        key = api_key or env.get("OPENAI_API_KEY") or None
        if key is None and "api.openai.com" in url:
            raise ConfigurationError(
                f"model {spec!r} needs an API key for {url}: set OPENAI_API_KEY, or set "
                "OPENAI_BASE_URL to a server that needs none"
            )
        return OpenAIChatModel(rest, base_url=url, api_key=key, timeout_s=timeout_s, client=client)
    raise ConfigurationError(f"unknown model spec {spec!r}; use {SPEC_FORMS}")
