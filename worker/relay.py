"""The relay: publishes ticks whose message may be lost and revives sessions whose worker died.

It runs in a thread inside every worker (no beat needed) and as `tickwork relay --once`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from store.relay import due_ticks, expired_leases

from . import metrics  # issue 8: relay metrics
from .runtime import Runtime

log = logging.getLogger("tickwork.relay")


@dataclass(frozen=True)
class RelayPass:
    republished: int
    lease_expiries: int


@metrics.counted_relay  # issue 8: relay republishes and lease expiries
def relay_once(rt: Runtime) -> RelayPass:
    now = rt.clock()
    revived = expired_leases(rt.store.engine, now=now)
    due = due_ticks(rt.store.engine, now=now, older_than_s=rt.settings.relay_after_s)
    for tick in (*revived, *due):
        rt.publish(tick.session_id, tick.version, tick.countdown)
    if revived or due:
        log.info("relay: %d ticks republished, %d expired leases", len(due), len(revived))
    return RelayPass(republished=len(due), lease_expiries=len(revived))


class RelayThread(threading.Thread):
    """Runs `relay_once` every `relay_period_s` until stopped."""

    def __init__(self, rt: Runtime) -> None:
        super().__init__(name="tickwork-relay", daemon=True)
        self.rt = rt
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.rt.settings.relay_period_s):
            try:
                relay_once(self.rt)
            except Exception as exc:
                log.warning(
                    "relay pass failed (%s); trying again in %ss",
                    exc,
                    self.rt.settings.relay_period_s,
                )

    def stop(self) -> None:
        self.stopped.set()
