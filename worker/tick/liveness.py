"""This worker's sign of life, and the relay's watch over the signs of the others
(docs/DESIGN.md section 3, "Liveness"; the signs themselves are `tickwork.store.liveness`'s).

A worker process takes a sign when it starts (a Postgres advisory lock on a connection of
its own, or a locked file beside the SQLite database) and leases its sessions under it. The
relay in every worker looks every `TICKWORK_LIVENESS_PERIOD_S` for leases whose sign is
gone, and takes over those still gone `TICKWORK_LIVENESS_GRACE_S` later: a worker killed
mid-tick has its sessions running again on another worker about a second later, instead
of when their lease runs out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from tickwork.fsm.errors import StoreError
from tickwork.fsm.wording import counted
from tickwork.store.liveness import Sign, new_key
from tickwork.store.owners import signed
from tickwork.store.port import Relay
from tickwork.store.relay import Due
from tickwork.worker.config.process import Loop

log = logging.getLogger("tickwork.liveness")


class Liveness:
    """Holds this process's sign while it runs, and checks it every `every_s` from a thread
    of its own. A sign found lost (its connection ended: the database restarted, the
    network cut) loses every lease this process holds at once (`lose_all`: its commands are
    killed), well before a relay may take its sessions over (after the grace), and is taken
    again (same key) as soon as the database answers.

    Until the sign is held (never, where the database has none, or with `enabled` False)
    leases are taken unsigned and end by expiry only. An enabled sign is taken at the
    first lease (`owner`): a process that never ticks (the CLI's relay) holds none. Once
    `stop` has given it up, the next lease takes it again (same key) with a new watch, as
    the runtime's other threads start again when used after `Runtime.close`."""

    def __init__(
        self,
        store: Relay,
        *,
        every_s: float,
        lose_all: Callable[[str], None],
        enabled: bool = False,
    ) -> None:
        self._store, self._lose_all = store, lose_all
        #: whether this process takes a sign at its first lease (a worker's does:
        #: `tickwork.worker.tick.app.runtime`; a bare Runtime's does not)
        self.enabled = enabled
        self._begun = False
        self._begin = threading.Lock()
        self.key = new_key()
        self._sign: Sign | None = None
        #: orders taking the sign against `stop`: a sign taken once stopped is never kept
        #: (its connection would be left open, never released)
        self._holding = threading.Lock()
        #: the last check found the sign lost
        self._lost = False
        self._every_s = every_s
        self._loop = self._new_loop()

    def _new_loop(self) -> Loop:
        """A watch that takes and checks the sign for itself: once stopped (`stop` put a new
        one in its place), a late step of it takes no sign."""
        loop = Loop(
            "liveness",
            lambda: self._check(loop),
            every_s=self._every_s,
            log=log,
            what="a look at this worker's sign",
        )
        return loop

    def start(self) -> None:
        """Take the sign and watch it; where it cannot be taken now (the database away), the
        watch takes it later, and leases taken meanwhile are unsigned."""
        loop = self._loop
        if loop.stopped.is_set():
            return
        try:
            self._take(loop)
        except StoreError as exc:
            log.warning(
                "this worker holds no sign of life yet (%s): a session it leases meanwhile is "
                "taken over only when its lease runs out",
                exc,
            )
        loop.start()

    def _take(self, loop: Loop) -> None:
        with self._holding:
            if self._sign is None and not loop.stopped.is_set():
                self._sign = self._store.hold_sign(self.key)
                if self._sign is None:
                    loop.stop()  # the database keeps no signs: leases end by expiry

    def stop(self) -> None:
        """Give the sign up; the leases taken under it are taken over by the next relay,
        and the next lease (`owner`) takes it again."""
        loop = self._loop
        loop.stop()
        loop.join(2.0)
        with self._holding:  # a tick's first lease may be taking it right now
            sign, self._sign = self._sign, None
            self._loop, self._lost = self._new_loop(), False
            self._begun = False
        if sign is not None:
            sign.release()

    def owner(self, owner: str) -> str:
        """The lease owner `owner` under this process's sign, while it holds one (taken at
        the first call, when enabled). While the sign is lost the owner is unsigned: a relay
        may take over any lease signed with it, and this worker would still be running the
        session (`lose_all` gives up only the leases held when the loss is seen), so a
        lease taken meanwhile ends by expiry only."""
        if self.enabled and not self._begun:
            with self._begin:
                if not self._begun:
                    self._begun = True
                    self.start()
        return owner if self._sign is None or self._lost else signed(owner, self.key)

    def _check(self, loop: Loop | None = None) -> None:
        try:
            if self._sign is None:
                self._take(loop or self._loop)  # not taken at the start: no lease is signed yet
            else:
                self._sign.check()
        except StoreError as exc:
            was_lost, self._lost = self._lost, True  # first: leases taken from now are unsigned
            if self._sign is not None:
                self._lose_all(f"this worker's sign of life is lost ({exc})")
            if not was_lost:
                log.warning("this worker's sign of life is lost (%s); taking it again", exc)
            return
        if self._lost:
            log.warning("this worker holds its sign of life again")
        self._lost = False


class Takeover:
    """One look of the relay at the signs of the leases: those gone for `grace_s` (measured
    from this relay's first sight of them gone) have their sessions taken over, and the
    ticks published. The grace lets a worker whose connection dropped for a moment take
    its sign again (and, first, kill its running commands) before it is taken for dead.
    While `paused` (this process cannot publish: `Runtime.cannot_publish`) it takes over
    nothing, and leaves the sessions to the relays of workers that can publish them. A
    publish that fails (`publish` gives False) stops the look's publishes: that tick and
    those after it go to `give_back`, as a relay pass's do."""

    def __init__(
        self,
        store: Relay,
        publish: Callable[[str, int], bool | None],
        *,
        grace_s: float,
        clock: Callable[[], datetime],
        paused: Callable[[], bool] = lambda: False,
        give_back: Callable[[list[Due]], None] = lambda _: None,
    ) -> None:
        self._store, self._publish, self._grace_s = store, publish, grace_s
        self._clock, self._paused, self._give_back = clock, paused, give_back
        #: each sign seen gone, and when it was first (monotonic)
        self._gone: dict[int, float] = {}
        #: the last look failed: the database was away
        self._away = False

    @property
    def watching(self) -> bool:
        """Whether the last look saw signs gone that are not yet past their grace."""
        return bool(self._gone)

    def __call__(self) -> list[Due]:
        try:
            gone = self._store.absent_signs()
        except StoreError as exc:
            # the database is away: every sign's grace starts again once it answers (its
            # holders reconnect meanwhile); said once, not four times a second
            if not self._away:
                log.warning("relay: cannot look for sessions whose worker is gone: %s", exc)
            self._away, self._gone = True, {}
            return []
        self._away = False
        seen = time.monotonic()
        self._gone = {key: self._gone.get(key, seen) for key in gone}
        ripe = [key for key, first in self._gone.items() if seen - first >= self._grace_s]
        if not ripe or self._paused():
            return []
        taken = self._store.take_over(ripe, now=self._clock())
        for i, tick in enumerate(taken):
            if self._publish(tick.session_id, tick.version) is False:
                self._give_back(taken[i:])  # each failure can take the broker's timeouts
                break
        if taken:
            log.warning(
                "relay: took over %s whose worker is gone: %s",
                counted(len(taken), "session"),
                ", ".join(f"{t.session_id} v{t.version} (lease of {t.owner})" for t in taken[:20])
                + (f" and {len(taken) - 20} more" if len(taken) > 20 else ""),
            )
        return taken
