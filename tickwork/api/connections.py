"""Slow and greedy clients: a deadline on request headers and bodies, a bound per client IP.

uvicorn waits for a request's headers (and, between requests, for new data after the
keep-alive timer) without a limit, and an ASGI app reads a body at the client's pace: a
client trickling bytes (slowloris) holds a connection and a task for as long as it likes.
`guarded_protocol` gives uvicorn an HTTP protocol that closes a connection whose headers
have not all arrived `header_timeout_s` after its first byte (or its opening) with a 408,
and refuses a client IP's connection beyond `max_per_ip` open at once with a 429.
`BodyTimeout` gives a request `body_timeout_s` for its whole body, then answers 408.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from .errors import answer


def _refusal(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"code": code, "message": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def guarded_protocol(*, header_timeout_s: float, max_per_ip: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the two guards; `max_per_ip` 0 turns the bound off."""
    too_slow = _refusal(
        408,
        "Request Timeout",
        "request_timeout",
        f"the request's headers did not arrive within {header_timeout_s:g}s "
        "(TICKWORK_API_HEADER_TIMEOUT_S)",
    )
    too_many = _refusal(
        429,
        "Too Many Requests",
        "too_many_connections",
        f"this address has {max_per_ip} connections open already "
        "(TICKWORK_API_MAX_CONNECTIONS_PER_IP); close some and try again",
    )

    class Guarded(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _counted: str | None = None

        def _open(self) -> Counter[str]:
            # one count per server: its state object is shared by its connections
            state: Any = self.server_state
            if not hasattr(state, "tickwork_per_ip"):
                state.tickwork_per_ip = Counter()
            return state.tickwork_per_ip  # type: ignore[no-any-return]

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            ip = self.client[0] if self.client else None
            if ip is not None and max_per_ip:
                if self._open()[ip] >= max_per_ip:
                    transport.write(too_many)
                    transport.close()
                    return
                self._open()[ip] += 1
                self._counted = ip
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._counted is not None:
                open_ = self._open()
                open_[self._counted] -= 1
                if open_[self._counted] <= 0:
                    del open_[self._counted]
                self._counted = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()  # the first byte of the next request on a kept-alive connection
            super().data_received(data)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:
                self._disarm()  # the headers are in; the body has BodyTimeout

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.write(too_slow)
                self.transport.close()

    return Guarded


class BodyTimeout:
    """ASGI middleware: a request's whole body must arrive within `timeout_s` of its
    headers; after that the app is told the client left and the answer is a 408."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app, self.timeout_s = app, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        state = {"body_done": False, "late": False, "started": False}

        async def timed_receive() -> Message:
            if state["body_done"] or state["late"]:
                return await receive()  # a stream waits for the disconnect for ever: fine
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                state["late"] = True
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["body_done"] = True
            return message

        async def guarded_send(message: Message) -> None:
            if state["late"]:
                return  # the 408 below is the answer
            state["started"] = True
            await send(message)

        try:
            await self.app(scope, timed_receive, guarded_send)
        except Exception:
            if not state["late"]:
                raise
        if state["late"] and not state["started"]:
            refusal = answer(
                408,
                "request_timeout",
                f"the request body did not arrive within {self.timeout_s:g}s "
                "(TICKWORK_API_BODY_TIMEOUT_S)",
            )
            refusal.headers["Connection"] = "close"
            await refusal(scope, receive, send)
