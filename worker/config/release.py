"""This release of tickwork: its version, kept in one place (pyproject.toml) and read from the
installed package's metadata, so `tickwork --version`, the API's document and the worker's
start line cannot disagree; and the runtime level its workers run (`tickwork.fsm.values`)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed

from tickwork.fsm.values import RUNTIME_LEVEL

__all__ = ["RUNTIME_LEVEL", "version"]


def version() -> str:
    """The installed tickwork's version; "0+unknown" when it runs from a tree never installed."""
    try:
        return _installed("tickwork")
    except PackageNotFoundError:
        return "0+unknown"
