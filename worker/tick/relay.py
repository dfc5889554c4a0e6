"""The relay: publishes delayed ticks when due and ticks whose message may be lost,
revives sessions whose worker died, and admits queued sessions (`admission.py`).

It also repairs trees (docs/DESIGN.md section 16): it wakes a parent whose join is complete
but that still waits, and cancels the children still going in a cancelled tree.

It runs in a thread inside every worker (no beat needed), and every pass of it once as
`tickwork relay --once` (`relay_all_once`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from tickwork.fsm import wording
from tickwork.fsm.errors import SessionFinished
from tickwork.store.relay import Due, RelayPass, named
from tickwork.worker.config.process import Loop
from tickwork.worker.observers import metrics  # issue 8: relay metrics
from tickwork.worker.tick.admission import admit_queued
from tickwork.worker.tick.liveness import Takeover
from tickwork.worker.tick.runtime import Runtime

log = logging.getLogger("tickwork.relay")


@metrics.counted_relay  # issue 8: relay republishes and lease expiries
def relay_once(rt: Runtime) -> RelayPass:
    """One pass of the relay. A process that cannot publish takes no ticks: it passes
    until the broker answers its `check_broker` again, and the ticks a pass took but could
    not publish it gives back, due at once for the relays of workers that can."""
    now = rt.clock()
    if rt.cannot_publish and not _broker_answers(rt):
        return RelayPass(republished=0, lease_expiries=0)
    revived = rt.store.expired_leases(now=now)
    if revived:
        log.warning(
            "relay: revived %s whose lease expired: %s",
            wording.counted(len(revived), "session"),
            named(revived, lambda t: f"{t.session_id} v{t.version} (lease of {t.owner})"),
        )
    found = rt.store.due_ticks(now=now, older_than_s=rt.settings.relay_after_s)
    unsent = _publish(rt, [*revived, *found])
    if unsent:
        _give_back(rt, unsent, now=now)
        return RelayPass(republished=0, lease_expiries=len(revived), unsent=len(unsent))
    delayed = [t for t in found if t.delayed]
    lost = [t for t in found if not t.delayed]
    # the trees' repairs: a parent left waiting on a join that wakes it, an ended parent
    # not charged its `each` children's ends, children left going in a tree that was
    # cancelled (the saves and the cancels do all three themselves, but for ends before a
    # parent's own end, charged here)
    for parent_id, version in rt.store.missed_wakes(now=now):
        log.warning("relay: woke %s v%d, whose children had all ended", parent_id, version)
        rt.publish(parent_id, version)
    for parent_id in rt.store.settle_ended(now=now):
        log.info("relay: charged %s the cost of children whose results it never took", parent_id)
    for child_id in rt.store.to_cancel():
        with contextlib.suppress(SessionFinished):
            rt.store.request_cancel(child_id, now=now, by="relay: its tree is cancelled")
    if lost:
        log.info(
            "relay: republished %s whose message may be lost: %s",
            wording.counted(len(lost), "tick"),
            named(lost, lambda t: f"{t.session_id} v{t.version}"),
        )
    if delayed:
        log.info(
            "relay: published %s now due: %s",
            wording.counted(len(delayed), "delayed tick"),
            named(delayed, lambda t: f"{t.session_id} v{t.version}"),
        )
    admitted = admit_queued(rt)
    return RelayPass(
        republished=len(lost),
        lease_expiries=len(revived),
        delayed=len(delayed),
        admitted=len(admitted),
    )


def _publish(rt: Runtime, ticks: list[Due]) -> list[Due]:
    """Publish `ticks` in order until the broker fails one: that one and those after it
    (each failure can take the broker's timeouts, so the rest are not tried)."""
    for i, tick in enumerate(ticks):
        if not rt.publish(tick.session_id, tick.version):
            return ticks[i:]
    return []


def _give_back(rt: Runtime, unsent: list[Due], *, now: datetime) -> None:
    """The ticks this pass took but could not publish, due at once for any relay: as if
    published one threshold ago, their count of republications reset (a relay cut off
    from the broker must not push a row's next turn further out each time it wins it)."""
    due = now - timedelta(seconds=rt.settings.relay_after_s)
    for tick in unsent:
        rt.store.offer_again(tick.session_id, tick.version, now=due)
    log.warning(
        "relay: the broker did not take a tick; gave back %s to the relays of workers "
        "that can publish (%s); this relay takes none until the broker answers again",
        wording.counted(len(unsent), "tick"),
        named(unsent, lambda t: f"{t.session_id} v{t.version}"),
    )


def _broker_answers(rt: Runtime) -> bool:
    """Whether the broker answers a new connection now; the relay takes ticks again once
    it does."""
    try:
        rt.check_broker()
    except Exception as exc:
        log.debug("relay: the broker still does not answer (%s); this pass takes no ticks", exc)
        return False
    rt.cannot_publish = False
    log.warning("relay: the broker answers again; this relay takes ticks again")
    return True


def relay_all_once(rt: Runtime) -> RelayPass:
    """Every pass `RelayThread` runs, once (`tickwork relay --once`): the look for sessions
    whose worker is gone (unless TICKWORK_LIVENESS=false), then `relay_once`. A sign seen
    gone is looked at again after its grace, as the thread's looks do, so a worker whose
    connection dropped for a moment is not taken for dead."""
    taken: list[Due] = []
    if rt.settings.liveness:
        takeover = takeover_of(rt)
        look = counted(takeover)
        taken = look()
        if not taken and takeover.watching:
            time.sleep(rt.settings.liveness_grace_s)
            taken = look()
    return dataclasses.replace(relay_once(rt), taken_over=len(taken))


def takeover_of(rt: Runtime) -> Takeover:
    """The relay's look for sessions whose worker is gone: paused while this process cannot
    publish, and the ticks it took but could not publish given back as a pass's are."""
    return Takeover(
        rt.store,
        rt.publish,
        grace_s=rt.settings.liveness_grace_s,
        clock=rt.clock,
        paused=lambda: rt.cannot_publish,
        give_back=lambda unsent: _give_back(rt, unsent, now=rt.clock()),
    )


def counted(takeover: Takeover) -> Callable[[], list[Due]]:
    """`takeover`'s look, the sessions it takes over counted (`tickwork_relay_taken_over`)."""

    def look() -> list[Due]:
        taken = takeover()
        metrics.count_taken_over(len(taken))
        return taken

    return look


class RelayThread(Loop):
    """Runs `relay_once` every `relay_period_s` until stopped, and beside it (a loop of its
    own, `TICKWORK_LIVENESS_PERIOD_S`) the look for sessions whose worker is gone
    (`Takeover`; not with TICKWORK_LIVENESS=false)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        super().__init__(
            "relay",
            functools.partial(relay_once, rt),
            every_s=rt.settings.relay_period_s,
            log=log,
            what="relay pass",
        )
        self.takeover = Loop(
            "takeover",
            counted(takeover_of(rt)),
            every_s=rt.settings.liveness_period_s,
            log=log,
            what="look for sessions whose worker is gone",
        )

    def start(self) -> None:
        super().start()
        if self.rt.settings.liveness:
            self.takeover.start()

    def stop(self) -> None:
        self.takeover.stop()
        super().stop()

    def join(self, timeout: float | None = None) -> None:
        self.takeover.join(timeout)
        super().join(timeout)
