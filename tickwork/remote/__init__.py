"""tickwork over its HTTP API: `Client` (blocking) and `AsyncClient` (asyncio).

from tickwork.remote import Client
with Client("http://tickwork.internal:8000", token="...") as tw:
    head = tw.submit("repair", {"repo": URL, "ref": "main", "test_command": "pytest -q"})
    for frame in tw.watch(head.id):
        print(frame.kind, frame.data)
"""

from __future__ import annotations

from tickwork.api.inputs import RepairInput
from tickwork.events import EventPage, Streamed

from .client import AsyncClient, Client
from .errors import RemoteError, ServerUnreachable
from .plans import Identity

__all__ = [
    "AsyncClient",
    "Client",
    "EventPage",
    "Identity",
    "RemoteError",
    "RepairInput",
    "ServerUnreachable",
    "Streamed",
]
