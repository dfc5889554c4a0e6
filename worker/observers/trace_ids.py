"""The ids of sessions' traces and spans, derived from what is stored so that every host
finds the same ones without storing any (why: `tickwork.worker.observers.tracing`)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import NamedTuple

from tickwork.fsm.errors import SessionNotFound
from tickwork.fsm.values import Head

log = logging.getLogger("tickwork.tracing")

#: the roots whose trace id a worker keeps (one store read each; a tree's children tick on
#: any worker)
ROOTS_KEPT = 1024


def session_ids(session_id: str, created_at: datetime) -> tuple[int, int]:
    """The session's trace id and its `invoke_agent` span id: the same on every host."""
    digest = hashlib.sha256(f"tickwork:{session_id}:{created_at.isoformat()}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def spawn_span_id(trace_id: int, session_id: str, call_id: str) -> int:
    """The id of the `execute_tool` span of the tick in which the session's call `call_id`
    spawned children, in the trace `trace_id`: their `invoke_agent` spans' parent."""
    digest = hashlib.sha256(f"tickwork:{trace_id:032x}:{session_id}:{call_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


class TraceIds(NamedTuple):
    """Where a session's spans go."""

    trace_id: int
    #: its `invoke_agent` span's
    span_id: int
    #: a child in its root's trace: the span of the tick that spawned it (`spawn_span_id`)
    spawned_by: int | None


class TreeTraces:
    """The trace ids of sessions, a child's its root's: each root is read with `heads` once,
    and the last `size` roots are kept."""

    def __init__(self, heads: Callable[[str], Head], size: int = ROOTS_KEPT) -> None:
        self._heads, self._size = heads, size
        self._kept: OrderedDict[str, int | None] = OrderedDict()
        self._lock = threading.Lock()

    def ids(self, head: Head) -> TraceIds:
        trace_id, span_id = session_ids(head.id, head.created_at)
        if head.root_id is None or head.parent_id is None or head.spawn_call is None:
            return TraceIds(trace_id, span_id, None)
        root = self._root(head.root_id)
        if root is None:
            return TraceIds(trace_id, span_id, None)
        return TraceIds(root, span_id, spawn_span_id(root, head.parent_id, head.spawn_call))

    def _root(self, root_id: str) -> int | None:
        """The root's trace id; None if the root is gone."""
        with self._lock:
            if root_id in self._kept:
                self._kept.move_to_end(root_id)
                return self._kept[root_id]
        try:
            root = self._heads(root_id)
        except SessionNotFound:
            log.info("the root %s of a traced child is gone; the child has its own trace", root_id)
            found = None
        else:
            found = session_ids(root.id, root.created_at)[0]
        with self._lock:
            self._kept[root_id] = found
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
        return found


class SessionIds:
    """Random ids, but the next span this thread starts `given` ids gets them."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        self._random = RandomIdGenerator()
        self._next = threading.local()

    @contextlib.contextmanager
    def given(self, span_id: int | None, *, trace_id: int | None = None) -> Iterator[None]:
        """Within it, the next span id is `span_id` and a new trace's id is `trace_id` (None:
        random)."""
        self._next.trace_id, self._next.span_id = trace_id, span_id
        try:
            yield
        finally:
            self._next.trace_id = self._next.span_id = None

    def generate_trace_id(self) -> int:
        found: int | None = getattr(self._next, "trace_id", None)
        return found if found is not None else self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        """A session's trace id is a hash of it, not random (W3C trace context level 2)."""
        return getattr(self._next, "trace_id", None) is None

    def generate_span_id(self) -> int:
        found: int | None = getattr(self._next, "span_id", None)
        if found is not None:
            self._next.span_id = None
            return found
        return self._random.generate_span_id()
