"""The model layer: what a model is, the shipped models and providers, prices, `make_model`."""

from __future__ import annotations

import os
from collections.abc import Mapping

from tickwork.worker.models.anthropic import AnthropicMessagesModel
from tickwork.worker.models.base import Message, Model, ModelSettings, ToolSchema
from tickwork.worker.models.openai import DEFAULT_BASE_URL, OpenAIChatModel
from tickwork.worker.models.pricing import PRICES, Price, cost_usd, price_for
from tickwork.worker.models.providers import MAX_MODEL_NAME, Provider, Providers
from tickwork.worker.models.react import ReActModel
from tickwork.worker.models.scripted import ScriptedModel
from tickwork.worker.models.transport import ClientPool, Poster, pooled_client

__all__ = [
    "DEFAULT_BASE_URL",
    "MAX_MODEL_NAME",
    "PRICES",
    "AnthropicMessagesModel",
    "ClientPool",
    "Message",
    "Model",
    "ModelSettings",
    "OpenAIChatModel",
    "Poster",
    "Price",
    "Provider",
    "Providers",
    "ReActModel",
    "ScriptedModel",
    "ToolSchema",
    "check_spec",
    "cost_usd",
    "make_model",
    "pooled_client",
    "price_for",
    "spec_help",
]


def spec_help(providers: Providers | None = None) -> str:
    """The accepted forms of a model spec, said for a person who gave another."""
    return (providers or Providers()).help


def check_spec(spec: str, providers: Providers | None = None) -> str:
    """`spec` if it names a model one of `providers` (default: the shipped ones and those of
    the entry points) can run, else InvalidModelSpec saying what to write.

    Checked at submit, so that a bad spec is refused there instead of failing the session
    later; the spec is untrusted input (the name goes into URLs, logs and the store).
    """
    return (providers or Providers()).check(spec)


def make_model(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    client: Poster | None = None,
    providers: Providers | None = None,
) -> Model:
    """The model a spec names, made by its provider (default: the shipped ones and those of
    the entry points).

    `openai:MODEL` talks to `base_url`, else `OPENAI_BASE_URL`, else OpenAI itself, with
    `api_key` or `OPENAI_API_KEY` (required for OpenAI itself, optional for a local server),
    through `client` if given (shared, left open), else a connection per call.
    `anthropic:MODEL` likewise with `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY`.
    `env` stands in for `os.environ`.
    """
    return (providers or Providers()).make(
        spec,
        base_url=base_url,
        api_key=api_key,
        timeout_s=timeout_s,
        env=os.environ if env is None else env,
        client=client,
    )
