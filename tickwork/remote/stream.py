"""Following a session's Server-Sent Events, and resuming where the stream broke.

`Follow` is the state both clients share: it parses frames line by line, remembers the
last event id, drops an event it has already given (so a resumed stream never doubles
one), and says whether a broken stream is worth another try. The clients only read lines
and sleep.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx

from tickwork.events import Streamed

from .errors import GATEWAY_STATUSES, RemoteError, error_of, unreachable
from .plans import _path


@dataclass
class Follow:
    """One watch of one session: the frames parsed so far and where to resume."""

    session_id: str
    last_id: int = 0
    #: how long a watch keeps reconnecting after its last good read
    give_up_after: float = 60.0
    #: seconds between reconnects (the server's `retry:` replaces it)
    delay: float = 1.0
    ended: bool = False
    _kind: str = ""
    _id: str | None = None
    _data: list[str] = field(default_factory=list)
    _good_at: float = field(default_factory=time.monotonic)

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(self.last_id)}
        return http.build_request(
            "GET", _path("sessions", self.session_id, "stream"), headers=headers
        )

    def opened(self, response: httpx.Response) -> None:
        """Raise what a refused stream says, unless it is worth trying again."""
        if response.status_code in GATEWAY_STATUSES:
            raise httpx.RemoteProtocolError(f"the server answered {response.status_code}")
        if not response.is_success:
            raise error_of(response)
        self._reset()

    def feed(self, line: str) -> Streamed | None:
        """One line of the stream; the frame it completes, if it completes one that is new."""
        self._good_at = time.monotonic()
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a heartbeat
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            self._id = value
        elif name == "event":
            self._kind = value
        elif name == "data":
            self._data.append(value)
        elif name == "retry" and value.isdigit():
            self.delay = int(value) / 1000
        return None

    def _dispatch(self) -> Streamed | None:
        kind, data, given = self._kind, "\n".join(self._data), self._id
        self._reset()
        if not data:
            return None
        event_id = int(given) if given and given.isdigit() else self.last_id
        if kind == "error":  # the token no longer reads the session: a reconnect is refused
            said = json.loads(data)
            raise RemoteError(
                str(said["message"]), code=str(said["code"]), status=int(said["status"])
            )
        if kind == "end":
            self.ended = True
            return Streamed(event_id, kind, json.loads(data))
        if event_id <= self.last_id:
            return None  # given before the stream broke
        self.last_id = event_id
        return Streamed(event_id, kind or "message", json.loads(data))

    def _reset(self) -> None:
        self._kind, self._id, self._data = "", None, []

    def broke(self, exc: httpx.TransportError, base_url: str) -> float:
        """How long to wait before resuming; the error itself once it has been too long."""
        self._reset()
        if time.monotonic() - self._good_at > self.give_up_after:
            raise unreachable(exc, base_url) from exc
        return self.delay

    def closed_early(self) -> float:
        """The stream closed without its `end` frame (a server shutting down): how long to
        wait before resuming."""
        self._reset()
        return self.delay
