"""Importable objects named `module:attr`, as `TICKWORK_IMPORTS` lists them."""

from __future__ import annotations

import importlib
from typing import Any

from tickwork.fsm.errors import ConfigurationError


def load_object(spec: str) -> Any:
    """The object `spec` (`module:attr`) names; ConfigurationError says why it cannot be had."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"{spec!r} is not an importable object; write it as module:attr")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} for {spec!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigurationError(
            f"module {module_name!r} has no {attr!r} (from {spec!r})"
        ) from None
