"""tickwork: durable LLM agent sessions on Celery, Postgres and Redis."""

from .client import Tickwork

__all__ = ["Tickwork"]
