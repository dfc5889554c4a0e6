"""A session's events as both Python clients give them: one frame (`Streamed`) and a page
of them (`EventPage`). The local client (`Reads.events`) and the remote one (`events`,
`watch`) return the same values, so a script reads either alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tickwork.fsm.values import Event, Status


@dataclass(frozen=True)
class Streamed:
    """One frame of a session's event stream: an event (`kind` one of `EventKind`, `data`
    its JSON view with `id`, `kind`, `at`, `data`) or the closing `end` (`data`: the
    session's final `status` and `last_id`)."""

    id: int
    kind: str
    data: dict[str, Any]

    @property
    def event(self) -> Event | None:
        """The event as the store's value; None for `end`."""
        if self.kind == "end":
            return None
        return Event.model_validate({k: v for k, v in self.data.items() if k != "id"})


@dataclass(frozen=True)
class EventPage:
    """A page of events after an id, with the session's status when it was read."""

    status: Status
    events: tuple[Streamed, ...]
    last_id: int
