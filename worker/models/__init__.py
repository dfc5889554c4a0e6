"""The model layer: what a model is, the shipped models, prices, and `make_model`."""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx

from fsm.errors import ConfigurationError

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
    "cost_usd",
    "make_model",
    "pooled_client",
    "price_for",
]

SPEC_FORMS = "scripted:PATH, openai:MODEL, react:openai:MODEL or react:scripted:PATH"


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
