"""The HTTP API, the approvals and dead-letter page, and /metrics: `tickwork serve`."""

from __future__ import annotations

from .app import make_api
from .settings import ApiSettings, Role, TokenSpec

__all__ = ["ApiSettings", "Role", "TokenSpec", "make_api"]
