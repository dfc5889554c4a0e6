"""tickwork: durable LLM agent sessions on Celery, Postgres and Redis."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Tickwork

__all__ = ["Tickwork"]


def __getattr__(name: str) -> Any:
    # imported on first use, so the `tickwork` command starts without Celery and httpx
    if name == "Tickwork":
        from .client import Tickwork

        return Tickwork
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
