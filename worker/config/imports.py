"""Importable objects named `module:attr`, as `TICKWORK_IMPORTS` lists them."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from tickwork.fsm.errors import ConfigurationError, NotImportable


def load_object(spec: str) -> Any:
    """The object `spec` (`module:attr`) names; NotImportable says why this process cannot
    have it (ConfigurationError: `spec` is not written module:attr)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"{spec!r} is not an importable object; write it as module:attr")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise NotImportable(
            f"cannot import {module_name!r} for {spec!r}: {exc}{_hint(module_name, exc)}"
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise NotImportable(f"module {module_name!r} has no {attr!r} (from {spec!r})") from None


def _hint(module_name: str, exc: ImportError) -> str:
    """What to do when a module is not found: the spec's own module is not on sys.path
    (which holds the installed packages, not the working directory), or one it imports is
    not installed."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not missing:
        return ""
    if module_name == missing or module_name.startswith(f"{missing}."):
        return (
            f"; Python looks for {missing!r} in the installed packages and PYTHONPATH, not "
            "in the working directory: install it, or set PYTHONPATH to the folder that "
            "holds it, for this command and for the workers"
        )
    return f"; {module_name!r} imports {missing!r}, which is not installed in {sys.prefix}"
