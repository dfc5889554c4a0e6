"""What one tick did, and who hears of it.

`advance` returns a `TickReport`; the observers registered on the runtime (metrics,
webhooks, tracing: `tickwork.worker.tick.wiring.install`) are called with it after the save, each on
its own: one that raises is logged and never breaks the tick or the others. The tick
itself knows none of them (docs/DESIGN.md section 7).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tickwork.fsm.machine import Change
from tickwork.fsm.values import EventKind, Head, Status, Usage

log = logging.getLogger("tickwork.observers")


class Outcome(StrEnum):
    DROPPED = "dropped"  #: stale, duplicate, leased, suspended or finished: nothing to do
    LOST = "lost"  #: the session moved on while we worked; our result was discarded
    SAVED = "saved"  #: one micro-phase applied
    ERROR = "error"  #: the tick raised (the database or artifact store away); the relay retries


class Phase(StrEnum):
    NONE = "none"  #: the claim found nothing to do
    THINK = "think"  #: a model call
    EXECUTE = "execute"  #: a tool call
    NODE = "node"  #: one node of a graph session (worker/tick/graphs.py)
    COMPACT = "compact"  #: a model call that summarised the transcript (fsm/context.py)


@dataclass(frozen=True)
class ModelCall:
    """The model call a THINK tick made (or a graph node's calls, as one: `calls` of them,
    their use summed); times are wall-clock nanoseconds since the epoch."""

    #: the session's model spec (`openai:gpt-4o`, `scripted:/path`)
    spec: str
    started_ns: int
    ended_ns: int
    #: ok, retry (a transient error, tried again later) or failed
    outcome: str
    #: the model the server says answered ("" when it did not answer)
    response_model: str = ""
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    #: why it failed (retry, failed), as stored
    error: str = ""
    #: the messages sent, for tracers that capture content (unmasked: mask before showing)
    messages: tuple[Any, ...] = ()
    #: the completion cap sent with the call (what the budgets left, at most the model's own)
    max_tokens: int | None = None
    #: how many calls this is (a graph node may call the model more than once)
    calls: int = 1


@dataclass(frozen=True)
class ToolRun:
    """The tool call an EXECUTE tick ran (or the node a graph tick ran); times are
    wall-clock nanoseconds since the epoch."""

    call_id: str
    name: str
    started_ns: int
    ended_ns: int
    is_error: bool = False
    #: the arguments it ran with, a node's input state (unmasked: mask before showing)
    arguments: Any = None


@dataclass
class TickReport:
    """One tick: what it was asked, what it did, how long each part took.

    The tick fills it in as it goes (the phase, the claim, the model or tool call, the
    change) and `close`s it; observers get it closed, and must not change it."""

    session_id: str
    #: the version the tick was asked to advance from
    version: int
    phase: Phase = Phase.NONE
    outcome: Outcome = Outcome.DROPPED
    #: wall-clock nanoseconds since the epoch, from before the claim to after the save
    started_ns: int = field(default_factory=time.time_ns)
    ended_ns: int = 0
    claim_s: float = 0.0
    #: the model or tool call, and what surrounds it (preparing, checking)
    io_s: float = 0.0
    save_s: float = 0.0
    #: the head the tick claimed (None: dropped)
    claimed: Head | None = None
    #: what the tick saved (or would have, if LOST), masked as stored
    change: Change | None = None
    #: the head after the save (SAVED only)
    head: Head | None = None
    model: ModelCall | None = None
    tool: ToolRun | None = None
    #: the exception's type name when the tick raised (ERROR)
    error: str = ""

    def close(self, outcome: Outcome, *, error: str = "") -> TickReport:
        """The report of a tick that ended with `outcome` (and `error`, if it raised)."""
        self.outcome, self.error, self.ended_ns = outcome, error, time.time_ns()
        return self

    @property
    def seconds(self) -> float:
        return (self.ended_ns - self.started_ns) / 1e9

    @property
    def status(self) -> Status | None:
        """The session's status after the tick (None: nothing saved)."""
        return self.head.status if self.head is not None else None

    @property
    def waiting(self) -> tuple[str, ...]:
        """The calls that started waiting for a person with this tick's save."""
        if self.head is None or self.change is None:
            return ()
        if self.head.status is not Status.WAITING_APPROVAL or not any(
            e.kind is EventKind.APPROVAL_REQUESTED for e in self.change.events
        ):
            return ()
        return self.head.awaiting


Observer = Callable[[TickReport], None]


@dataclass
class Observers:
    """The hooks told of every tick, in the order they were added."""

    _hooks: list[Observer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, hook: Observer) -> Observer:
        with self._lock:
            self._hooks.append(hook)
        return hook

    def remove(self, hook: Observer) -> None:
        with self._lock:
            self._hooks.remove(hook)

    def __len__(self) -> int:
        return len(self._hooks)

    def notify(self, report: TickReport) -> None:
        """Tell each hook; one that raises is logged, the others still hear of it."""
        with self._lock:
            hooks = list(self._hooks)
        for hook in hooks:
            try:
                hook(report)
            except Exception:
                log.exception(
                    "observer %s failed on the tick of %s v%d",
                    getattr(hook, "__qualname__", hook),
                    report.session_id,
                    report.version,
                )
