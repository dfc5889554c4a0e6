"""Persistence for tickwork sessions: SQLAlchemy Core on Postgres or SQLite."""

from .engine import make_engine
from .sessions import Claimed, Store

__all__ = ["Claimed", "Store", "make_engine"]
