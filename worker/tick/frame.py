"""What every kind of session's tick shares: the `Runner` interface, the claimed `Tick` it
is given, and the frame around a call (start it, time it, stop it, report it).

A session's kind (`tickwork.fsm.kinds.kind_of`) picks its runner once, in `advance`: the
agent loop's (`tickwork.worker.tick.agent`) or a graph's (`tickwork.worker.tick.graphs`).
A runner says which phase the tick is and returns the change to save; it does its I/O
through the frame, which records the call in the tick's report for the observers.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tickwork.fsm.errors import ClaimLost, TreeFull
from tickwork.fsm.transitions import Change
from tickwork.fsm.values import Head, ToolCall
from tickwork.store import Claimed
from tickwork.worker.observers.report import Phase, TickReport, ToolRun
from tickwork.worker.tick.files import TickFiles
from tickwork.worker.tick.runtime import Runtime

__all__ = ["Runner", "Stop", "Tick", "run_call", "tool_run"]

T = TypeVar("T")

#: why a running call must stop now (a cancel, the deadline, the lease lost), or None
Stop = Callable[[], str | None]


@dataclass
class Tick:
    """One claimed tick, as its runner sees it."""

    rt: Runtime
    claimed: Claimed
    files: TickFiles
    #: filled in as the tick goes; the observers get it after the save
    report: TickReport

    @property
    def head(self) -> Head:
        return self.claimed.head


class Runner(Protocol):
    """What one kind of session's tick does."""

    def phase(self, head: Head) -> Phase:
        """The phase a tick of the claimed `head` is (for the report)."""
        ...

    def advance(self, tick: Tick) -> Change:
        """The micro-phase: the change to save. An exception fails the session (INTERNAL),
        but for those `advance` leaves to run again (the database or artifacts away)."""
        ...

    def tree_full(self, tick: Tick, change: Change, refused: TreeFull) -> Change:
        """What the tick saves instead of `change`, whose children the store refused: their
        tree is full (`refused`; a spawn elsewhere in the tree saved since the tick counted
        it). Nothing of `change` was stored."""
        ...

    def idempotent(self, tick: Tick) -> bool:
        """Whether the step's next call (a tool call, a node run), if found started, may
        run again from the start (its tool's or node's `idempotent`): a tick that fails
        the session without running it closes it as not run (`machine.fail`), as the
        runner's own deadline and cancel do. It may raise, as `advance` may."""
        ...


def tool_run(call: ToolCall, began_ns: int, *, is_error: bool, arguments: Any) -> ToolRun:
    """The report of `call`, run (or refused) from `began_ns` until now."""
    return ToolRun(
        call_id=call.call_id,
        name=call.name,
        started_ns=began_ns,
        ended_ns=time.time_ns(),
        is_error=is_error,
        arguments=arguments,
    )


def run_call(
    tick: Tick,
    call: ToolCall,
    run: Callable[[Stop], T],
    *,
    rerun: bool,
    arguments: Any,
    is_error: Callable[[T], bool] = lambda _: False,
) -> tuple[T, float]:
    """Run `call` as `run(stop)` and its milliseconds: the call is marked started (and
    committed) first, by the claim or here, its lease and the session's head are watched
    while it runs (`stop` says why it must stop), and the tick's report gets it
    (`is_error` of what it returned; an error if it raised)."""
    rt, head = tick.rt, tick.head
    lease = functools.partial(rt.leases.lost, head.id, head.version)
    if tick.claimed.started != call.call_id:
        rt.store.start_call(
            head.id, head.version, call, owner=tick.claimed.owner, now=rt.clock(), rerun=rerun
        )
    elif (why := lease()) is not None:
        # started by the claim: the lease is checked here, as `start_call` checks it; the
        # call, left started, runs again at the session's next tick
        raise ClaimLost(f"{why}; call {call.call_id} was not run")
    began = time.time_ns()
    failed = True
    try:
        with rt.watches.watch(head.id, lease=lease) as stop:
            value = run(stop)
        failed = is_error(value)
        return value, (time.time_ns() - began) / 1e6
    finally:
        tick.report.tool = tool_run(call, began, is_error=failed, arguments=arguments)
