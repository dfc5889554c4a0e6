"""The Python client API, `tickwork.Tickwork`: one handle on a deployment that reads
(`tickwork.reads.Reads`: sessions, files, patches, dead letters) and writes
(`tickwork.writes.Writes`: submit, decide, cancel, fork, close dead letters)."""

from __future__ import annotations

from .reads import Reads
from .writes import Writes


class Tickwork(Reads, Writes):
    """One handle on a tickwork deployment, configured from settings: everything `Reads`
    and `Writes` offer, on one store and one Celery app (made on first publish)."""
