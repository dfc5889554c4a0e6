"""The HTTP API, the approvals and dead-letter page, and /metrics: `tickwork serve`.

`make_api` is imported on first use, so the API's models (`bodies`, `answers`, `inputs`)
load without FastAPI's app, the store's client or Celery: the remote client uses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .settings import ApiSettings, Role, TokenSpec

if TYPE_CHECKING:
    from .app import make_api

__all__ = ["ApiSettings", "Role", "TokenSpec", "make_api"]


def __getattr__(name: str) -> Any:
    if name == "make_api":
        from .app import make_api

        return make_api
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
