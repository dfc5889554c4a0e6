"""`Client` and `AsyncClient`: the HTTP API from Python, for a service or notebook that
may reach only the API (not the database or the broker).

Both carry out the same plans (`plans.py`): each method below is one plan, given to the
client's runner, so what is sent and how the answer is read is written once. Only the
sending (and, for `watch`, the reading of the stream) differs between the two.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import httpx

from tickwork.events import Streamed
from tickwork.fsm.errors import ConfigurationError

from . import ids, plans
from .errors import RemoteError, error_of, unreachable
from .plans import Call, Plan, Sleep
from .stream import Follow

P = ParamSpec("P")
T = TypeVar("T")
#: seconds a request may take, unless the constructor says otherwise
TIMEOUT_S = 30.0
#: seconds a stream may stay silent (the server sends a heartbeat every 15 s by default)
STREAM_READ_S = 60.0


def base_url(server: str | None) -> str:
    """The server's root URL from `server` or TICKWORK_SERVER, without a trailing /api/v1."""
    url = (server or os.environ.get("TICKWORK_SERVER") or "").strip()
    if not url:
        raise ConfigurationError(
            "no tickwork server given: pass server='http://HOST:PORT' or set TICKWORK_SERVER "
            "(the address `tickwork serve` listens on)"
        )
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigurationError(
            f"the tickwork server {url!r} is not an http:// or https:// URL with a host, "
            "e.g. http://127.0.0.1:8000"
        )
    return url.rstrip("/").removesuffix(plans.PREFIX).rstrip("/")


def bearer(token: str | None) -> str:
    found = (token or os.environ.get("TICKWORK_TOKEN") or "").strip()
    if not found:
        raise ConfigurationError(
            "no API token given: set TICKWORK_TOKEN (in Python: Client(token=...)) to a "
            "token of the server's TICKWORK_API_TOKENS"
        )
    return found


def read(call: Call[T], response: httpx.Response) -> T:
    if not response.is_success:
        raise error_of(response)
    return call.read(response)


def _as_method(method: Callable[..., Any], plan: Callable[..., Any]) -> None:
    """Give `method` the plan's signature with `self` first: `functools.wraps` alone makes
    `inspect.signature` (help(), IDEs) drop the plan's own first parameter as if it were
    `self` (`submit` showed no `kind`), or fail for a plan of keywords only."""
    own = inspect.signature(plan)
    self_ = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    gives = str(own.return_annotation)  # "Plan[Head]": the method gives the Head
    method.__signature__ = own.replace(  # type: ignore[attr-defined]
        parameters=[self_, *own.parameters.values()],
        return_annotation=gives[5:-1] if gives.startswith("Plan[") else own.return_annotation,
    )


def blocking(plan: Callable[P, Plan[T]]) -> Callable[Concatenate[Client, P], T]:
    """The plan as a method of `Client`."""

    @functools.wraps(plan)
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.run(plan(*args, **kwargs))

    _as_method(method, plan)
    return method


def awaited(
    plan: Callable[P, Plan[T]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    """The plan as a coroutine method of `AsyncClient`."""

    @functools.wraps(plan)
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.run(plan(*args, **kwargs))

    _as_method(method, plan)
    return method


def _renamed(follow: Follow, given: str, refused: RemoteError) -> bool:
    """Whether a watch refused 404 for the id `given` may look for the one id it starts
    with (once, before any event): not for an archived session's whole id."""
    return (
        follow.session_id == given
        and refused.status == 404
        and refused.code == "session_not_found"
        and not ids.archived(refused)  # a whole id: an archived session's, not a start
    )


class _Base:
    def __init__(
        self, server: str | None, token: str | None, timeout: float, stream_read_s: float
    ) -> None:
        self.base_url = base_url(server)
        self._headers = {"Authorization": f"Bearer {bearer(token)}", "Accept": "application/json"}
        self._timeout = httpx.Timeout(timeout)
        self._stream_timeout = httpx.Timeout(timeout, read=stream_read_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"


class Client(_Base):
    """The tickwork HTTP API, blocking. Use it as a context manager, or `close()` it.

    `server` [default: TICKWORK_SERVER] is the address `tickwork serve` listens on;
    `token` [default: TICKWORK_TOKEN] one of its TICKWORK_API_TOKENS. A refused request
    raises `RemoteError` (with the API's `code`, `message` and HTTP `status`). A method of
    one session takes its whole id or a unique start of it (6 characters or more, as the
    CLI takes one); `session_id` says which session a start names (`remote/ids.py`).
    """

    def __init__(
        self,
        server: str | None = None,
        *,
        token: str | None = None,
        timeout: float = TIMEOUT_S,
        stream_read_s: float = STREAM_READ_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(server, token, timeout, stream_read_s)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self._timeout,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        request = self._http.build_request(
            call.method, call.path, params=call.params, json=call.json, headers=call.headers
        )
        try:
            response = self._http.send(request)
        except httpx.TransportError as exc:
            raise unreachable(
                exc, self.base_url, sent=request, timeout_s=self._timeout.read
            ) from exc
        return read(call, response)

    def run(self, plan: Plan[T]) -> T:
        """Carry out a plan: send each call it yields (a refusal raised in the plan, where
        it is caught or goes on), sleep each pause."""
        try:
            step = next(plan)
            while True:
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    step = plan.send(None)
                else:
                    try:
                        answer = self.send(step)
                    except RemoteError as exc:  # the plan may read a refusal
                        step = plan.throw(exc)
                    else:
                        step = plan.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def watch(
        self, session_id: str, *, after: int = 0, give_up_after: float = 60.0
    ) -> Iterator[Streamed]:
        """The session's events after event id `after` as they happen, then its `end`
        frame (`session_id` its whole id or a unique start of one). A dropped connection
        or a restarting server is resumed from the last event given (Last-Event-ID),
        nothing lost or given twice; after `give_up_after` seconds without a good read it
        raises ServerUnreachable."""
        follow = Follow(session_id, after, give_up_after)
        while not follow.ended:
            try:
                request = follow.request(self._http)
                response = self._http.send(request, stream=True)
                try:
                    if not response.is_success:
                        response.read()
                    try:
                        follow.opened(response)
                    except RemoteError as exc:
                        if not _renamed(follow, session_id, exc):
                            raise
                        follow.session_id = self.run(ids.started(session_id, exc))
                        continue
                    for line in response.iter_lines():
                        item = follow.feed(line)
                        if item is not None:
                            yield item
                        if follow.ended:
                            return
                finally:
                    response.close()
                time.sleep(follow.closed_early())
            except httpx.TransportError as exc:
                time.sleep(follow.broke(exc, self.base_url))

    me = blocking(plans.me)
    session_id = blocking(ids.session_id)
    submit = blocking(plans.submit)
    get = blocking(ids.named(plans.get))
    timeline = blocking(ids.named(plans.timeline))
    sessions = blocking(plans.sessions)
    archived_sessions = blocking(plans.archived_sessions)
    events = blocking(ids.named(plans.events))
    waiting = blocking(ids.named(plans.waiting))
    patch = blocking(ids.named(plans.patch))
    forks = blocking(ids.named(plans.forks))
    wait = blocking(ids.named(plans.wait))
    decide = blocking(ids.named(plans.decide))
    approve = blocking(ids.named(plans.approve))
    edit = blocking(ids.named(plans.edit))
    reject = blocking(ids.named(plans.reject))
    provide_output = blocking(ids.named(plans.provide_output))
    cancel = blocking(ids.named(plans.cancel))
    fork = blocking(ids.named(plans.fork))
    dead_letters = blocking(plans.dead_letters)
    dead_letter = blocking(ids.lettered(plans.dead_letter))
    dead_letter_stats = blocking(plans.dead_letter_stats)
    export_dead_letters = blocking(plans.export_dead_letters)
    fork_dead_letter = blocking(ids.lettered(plans.fork_dead_letter))
    resolve_dead_letter = blocking(ids.lettered(plans.resolve_dead_letter))
    dismiss_dead_letter = blocking(ids.lettered(plans.dismiss_dead_letter))
    close_dead_letter = blocking(ids.lettered(plans.close_dead_letter))


class AsyncClient(_Base):
    """The tickwork HTTP API for asyncio: `Client`'s methods, awaited (and `watch` an async
    iterator). Use it as an async context manager, or `await aclose()`."""

    def __init__(
        self,
        server: str | None = None,
        *,
        token: str | None = None,
        timeout: float = TIMEOUT_S,
        stream_read_s: float = STREAM_READ_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(server, token, timeout, stream_read_s)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self._timeout,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        request = self._http.build_request(
            call.method, call.path, params=call.params, json=call.json, headers=call.headers
        )
        try:
            response = await self._http.send(request)
        except httpx.TransportError as exc:
            raise unreachable(
                exc, self.base_url, sent=request, timeout_s=self._timeout.read
            ) from exc
        return read(call, response)

    async def run(self, plan: Plan[T]) -> T:
        """Carry out a plan: send each call it yields (a refusal raised in the plan, where
        it is caught or goes on), sleep each pause."""
        try:
            step = next(plan)
            while True:
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    step = plan.send(None)
                else:
                    try:
                        answer = await self.send(step)
                    except RemoteError as exc:  # the plan may read a refusal
                        step = plan.throw(exc)
                    else:
                        step = plan.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def watch(
        self, session_id: str, *, after: int = 0, give_up_after: float = 60.0
    ) -> AsyncIterator[Streamed]:
        """`Client.watch`, as an async iterator."""
        follow = Follow(session_id, after, give_up_after)
        while not follow.ended:
            try:
                request = follow.request(self._http)
                response = await self._http.send(request, stream=True)
                try:
                    if not response.is_success:
                        await response.aread()
                    try:
                        follow.opened(response)
                    except RemoteError as exc:
                        if not _renamed(follow, session_id, exc):
                            raise
                        follow.session_id = await self.run(ids.started(session_id, exc))
                        continue
                    async for line in response.aiter_lines():
                        item = follow.feed(line)
                        if item is not None:
                            yield item
                        if follow.ended:
                            return
                finally:
                    await response.aclose()
                await asyncio.sleep(follow.closed_early())
            except httpx.TransportError as exc:
                await asyncio.sleep(follow.broke(exc, self.base_url))

    me = awaited(plans.me)
    session_id = awaited(ids.session_id)
    submit = awaited(plans.submit)
    get = awaited(ids.named(plans.get))
    timeline = awaited(ids.named(plans.timeline))
    sessions = awaited(plans.sessions)
    archived_sessions = awaited(plans.archived_sessions)
    events = awaited(ids.named(plans.events))
    waiting = awaited(ids.named(plans.waiting))
    patch = awaited(ids.named(plans.patch))
    forks = awaited(ids.named(plans.forks))
    wait = awaited(ids.named(plans.wait))
    decide = awaited(ids.named(plans.decide))
    approve = awaited(ids.named(plans.approve))
    edit = awaited(ids.named(plans.edit))
    reject = awaited(ids.named(plans.reject))
    provide_output = awaited(ids.named(plans.provide_output))
    cancel = awaited(ids.named(plans.cancel))
    fork = awaited(ids.named(plans.fork))
    dead_letters = awaited(plans.dead_letters)
    dead_letter = awaited(ids.lettered(plans.dead_letter))
    dead_letter_stats = awaited(plans.dead_letter_stats)
    export_dead_letters = awaited(plans.export_dead_letters)
    fork_dead_letter = awaited(ids.lettered(plans.fork_dead_letter))
    resolve_dead_letter = awaited(ids.lettered(plans.resolve_dead_letter))
    dismiss_dead_letter = awaited(ids.lettered(plans.dismiss_dead_letter))
    close_dead_letter = awaited(ids.lettered(plans.close_dead_letter))
