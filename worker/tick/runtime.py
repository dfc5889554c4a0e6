"""What a worker process holds: store, job kinds, models, the publisher and its leases."""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import Token
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from tickwork.fsm.budgets import TenantDay, stop_reason
from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.values import RUNTIME_LEVEL, Head
from tickwork.store import Store
from tickwork.store.port import Sessions, Ticks
from tickwork.worker.config.process import Loop, Refusals
from tickwork.worker.config.process import owner_name as owner_name  # advance reads it here
from tickwork.worker.config.secrets import Masker, masker_for
from tickwork.worker.config.settings import Settings
from tickwork.worker.config.stores import build_store
from tickwork.worker.config.tenants import Tenants, TenantSettings
from tickwork.worker.files.workspaces import Workspaces
from tickwork.worker.jobs import Jobs
from tickwork.worker.models import Model, Poster, Providers, make_model, pooled_client
from tickwork.worker.observers.report import Observers
from tickwork.worker.sandbox.fence import WATCHDOG
from tickwork.worker.sandbox.shell import GUARD, Guard
from tickwork.worker.tick.liveness import Liveness
from tickwork.worker.tick.retention import restoring

log = logging.getLogger("tickwork.worker")

#: how long `Runtime.close` waits for each of its threads to end: a step under way (a lease
#: renewal, a look at a head) finishes first, and one stuck on an unanswering database is
#: left to end on its own (the threads are daemons)
CLOSE_WAIT_S = 2.0

#: publishes a tick `(session_id, version)` after `countdown` seconds; tickwork itself
#: always passes 0: a delayed tick waits in the outbox, not in the broker
#: (docs/DESIGN.md section 11)
Publish = Callable[[str, int, float], None]


def utc_now() -> datetime:
    return datetime.now(UTC)


class _Restartable:
    """The background `Loop` of `Leases` or `Watches`: `start` (called under the owner's
    `lock`) starts it, and `close` stops it and puts a fresh one from `new_loop` in its
    place, so the next `start` starts a thread again (a stopped `Loop` starts no more)."""

    def __init__(self, lock: threading.Lock, new_loop: Callable[[], Loop]) -> None:
        self._lock, self._new_loop = lock, new_loop
        self._loop = new_loop()

    def start(self) -> None:
        self._loop.start()

    def period(self) -> float:
        return self._loop.period()

    def close(self, wait_s: float) -> None:
        """Stop the thread, waiting up to `wait_s` (outside the lock) for a step under way."""
        # swapped under the owner's lock: a `start` never starts the loop just stopped
        with self._lock:
            loop, self._loop = self._loop, self._new_loop()
            loop.stop()
        loop.join(wait_s)


class Leases:
    """Renews the leases of this process's running calls from one background thread.

    A lease whose renewal is refused (another worker took the session over) or that could
    not be renewed for `lease_s` is lost: `lost` says so, and a running command polls it
    and is killed at once, so it never runs beside the same command on another worker.
    While a tick holds its lease, the commands it starts are also registered with this
    process's watchdog (`tickwork.worker.sandbox.fence`), which kills them shortly before the lease
    runs out unless a renewal moved it: that holds while this process is stopped."""

    #: the part of the lease after its last renewal a command may still run unwatched
    FENCED = 0.9

    def __init__(self, store: Ticks, *, lease_s: float, clock: Callable[[], datetime]) -> None:
        self._store, self._clock = store, clock
        #: how long a lease lasts, from the claim that takes it or the renewal that moves it
        self.lease_s = lease_s
        self._held: dict[tuple[str, int], str] = {}
        #: when each held lease was last known ours (monotonic), and why a lost one is lost
        self._renewed: dict[tuple[str, int], float] = {}
        self._lost: dict[tuple[str, int], str] = {}
        #: lost leases still renewed: given up when this process's sign of life was lost
        #: (`lose_all`), they stay its own unless another worker took the session over
        self._given_up: set[tuple[str, int]] = set()
        #: the process groups of the commands each held lease's tick runs
        self._commands: dict[tuple[str, int], set[int]] = {}
        self._lock = threading.Lock()
        self._loop = _Restartable(
            self._lock,
            lambda: Loop(
                "leases", self.renew_all, every_s=self.lease_s / 3, log=log, what="lease renewal"
            ),
        )

    def close(self, *, wait_s: float = CLOSE_WAIT_S) -> None:
        """Stop the renewal thread, waiting up to `wait_s` for a renewal under way; the next
        lease held starts a new one. A lease still held meanwhile is not renewed, and is
        lost once `lease_s` passes (`lost`), as if this process had stalled."""
        self._loop.close(wait_s)

    def hold(self, session_id: str, version: int, owner: str) -> _Held:
        return _Held(self, (session_id, version), owner)

    def lost(self, session_id: str, version: int) -> str | None:
        """Why this process no longer holds the lease of `session_id` at `version`, or None
        while it does (or holds none: a call outside a tick is not fenced)."""
        key = (session_id, version)
        with self._lock:
            if key in self._lost or key not in self._renewed:
                return self._lost.get(key)
            quiet = time.monotonic() - self._renewed[key]
        if quiet > self.lease_s:
            # this process was stalled (or the database away) longer than the lease: another
            # worker may hold it now, whatever the renewal thread has not yet found out
            return (
                f"the lease of session {session_id} was not renewed for {quiet:.0f}s "
                f"(TICKWORK_LEASE_S={self.lease_s:g}), so another worker may have taken it over"
            )
        return None

    @contextmanager
    def watched(self, key: tuple[str, int], pid: int) -> Iterator[None]:
        """The command `pid` (a process group) killed by the watchdog once `key`'s lease is
        about to run out, for as long as the `with` lasts."""
        # told under the lock, so a renewal's newer deadline is never overwritten and a
        # command's `forget` is the last word about its pid (which may be reused after)
        with self._lock:
            self._commands.setdefault(key, set()).add(pid)
            renewed = self._renewed.get(key, time.monotonic())
            WATCHDOG.tell(pid, renewed + self.lease_s * self.FENCED)
        try:
            yield
        finally:
            with self._lock:
                self._commands.get(key, set()).discard(pid)
                WATCHDOG.tell(pid, None)

    def lose_all(self, reason: str) -> None:
        """Every lease this process holds is lost for `reason` (its sign of life is gone, so
        a relay may soon take its sessions over): their commands are killed at once. They
        are still renewed: a tick whose session was not taken over meanwhile saves."""
        with self._lock:
            held = [key for key in self._held if key not in self._lost]
            for key in held:
                self._lost[key] = reason
                self._given_up.add(key)
        if held:
            log.warning("%s: the leases of %d running ticks are given up", reason, len(held))

    def _add(self, key: tuple[str, int], owner: str) -> None:
        with self._lock:
            self._held[key] = owner
            self._renewed[key] = time.monotonic()
            self._lost.pop(key, None)
            self._given_up.discard(key)
            self._commands[key] = set()
            self._loop.start()  # under the lock: never the loop `close` just stopped

    def _remove(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._held.pop(key, None)
            self._renewed.pop(key, None)
            self._lost.pop(key, None)
            self._given_up.discard(key)
            self._commands.pop(key, None)

    def renew_all(self) -> None:
        """Renew every held lease once, in one statement (the thread does it every third of
        the lease)."""
        with self._lock:
            held = {
                key: owner
                for key, owner in self._held.items()
                if key not in self._lost or key in self._given_up
            }
        if not held:
            return
        asked = time.monotonic()
        try:
            ours = self._store.renew_leases(
                [(*key, owner) for key, owner in held.items()],
                now=self._clock(),
                lease_s=self.lease_s,
            )
        except Exception:
            log.exception("could not renew the leases of %d running ticks", len(held))
            return
        refused = []
        with self._lock:
            for key in held:
                if key not in self._held:
                    continue
                if key in ours:
                    self._renewed[key] = asked
                    for pid in self._commands.get(key, ()):
                        WATCHDOG.tell(pid, asked + self.lease_s * self.FENCED)
                    continue
                session_id, version = key
                self._given_up.discard(key)
                self._lost[key] = (
                    f"the lease of session {session_id} v{version} is no longer this worker's "
                    "(its renewal was refused: another worker took the session over)"
                )
                refused.append(key)
        for session_id, version in refused:
            log.warning(
                "session %s v%d: the lease renewal was refused, another worker has taken the "
                "session over; its running command is killed",
                session_id,
                version,
            )


@dataclass
class _Held:
    """A held lease; while it is entered, the commands this context starts are guarded by it
    (`tickwork.worker.sandbox.shell.GUARD`)."""

    leases: Leases
    key: tuple[str, int]
    owner: str
    _token: Token[Guard | None] | None = None

    def __enter__(self) -> None:
        self.leases._add(self.key, self.owner)
        self._token = GUARD.set(self)

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            GUARD.reset(self._token)
        self.leases._remove(self.key)

    def watch(self, pid: int) -> AbstractContextManager[None]:
        return self.leases.watched(self.key, pid)


class Watches:
    """Why each tool running in this process must stop: one thread for the whole process
    (started at the first call and kept, so a tick starts none) looks at the head of every
    session whose tool runs, every `every_s`. `watch` gives the call its `stop`: a cancel,
    the deadline or the cost budget (`tickwork.fsm.budgets.stop_reason`), or the tick's
    lease lost, else None. Commands poll it and kill their sandbox at once instead of
    running to their end."""

    def __init__(self, store: Sessions, *, every_s: float, clock: Callable[[], datetime]) -> None:
        self._store, self._clock = store, clock
        self._watched: set[_Watch] = set()
        self._lock = threading.Lock()
        self._loop = _Restartable(
            self._lock,
            lambda: Loop(
                "stops", self.look, every_s=every_s, log=log, what="a look at the running tools"
            ),
        )

    def close(self, *, wait_s: float = CLOSE_WAIT_S) -> None:
        """Stop the thread, waiting up to `wait_s` for a look under way; the next `watch`
        starts a new one. A call still watched meanwhile sees no new cancel or deadline."""
        self._loop.close(wait_s)

    @contextmanager
    def watch(
        self, session_id: str, *, lease: Callable[[], str | None] | None = None
    ) -> Iterator[Callable[[], str | None]]:
        """The `stop` of a call of `session_id` for as long as the `with` lasts; `lease`:
        why the tick's lease is lost (`Leases.lost`), or None (fencing, issue 24)."""
        watch = _Watch(session_id, lease)
        with self._lock:
            self._watched.add(watch)
            self._loop.start()  # under the lock: never the loop `close` just stopped
        try:
            yield watch
        finally:
            with self._lock:
                self._watched.discard(watch)

    def look(self) -> None:
        """Look once at the head of every watched session (the thread does it every `every_s`)."""
        with self._lock:
            watched = [w for w in self._watched if w.reason is None]
        for watch in watched:
            try:
                head = self._store.get(watch.session_id)
            except Exception as exc:
                log.warning(
                    "a look at session %s while its tool runs failed (%s); trying again in %gs",
                    watch.session_id,
                    exc,
                    self._loop.period(),
                )
                continue
            watch.reason = stop_reason(head, now=self._clock())


@dataclass(eq=False)
class _Watch:
    """One running call's `stop`."""

    session_id: str
    lease: Callable[[], str | None] | None
    reason: str | None = None

    def __call__(self) -> str | None:
        return self.reason or (self.lease() if self.lease is not None else None)


class Background(Protocol):
    """A thread a worker runs beside its ticks."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class Runtime:
    settings: Settings
    store: Store
    jobs: Jobs
    publish_tick: Publish
    publish_dead_letter: Callable[[str, str, str], None] = lambda *_: None
    #: raises if the broker does not answer now (a new connection to it); the relay asks
    #: it before taking ticks while this process's publishes fail (`cannot_publish`)
    check_broker: Callable[[], None] = lambda: None
    clock: Callable[[], datetime] = utc_now
    jitter: Callable[[], float] = random.random
    #: told of every tick's report after its save (metrics, webhooks, tracing), registered
    #: when the app is built (`tickwork.worker.tick.wiring.install`); none for a bare Runtime
    observers: Observers = field(default_factory=Observers)
    #: threads this process runs beside its ticks (the webhook dispatcher), started with
    #: the worker and stopped with it
    background: list[Background] = field(default_factory=list)
    #: the runtime level this worker runs: it claims no session that needs a higher one
    #: (a test may raise it to stand for a worker of a later release)
    level: int = RUNTIME_LEVEL
    #: the leases of this process's ticks; `leases.lease_s` is how long each lasts
    leases: Leases = field(init=False)
    #: this process's sign of life, taken at its first claim and leased under (a worker
    #: process's is enabled: `tickwork.worker.tick.app.runtime`; a bare Runtime's is not)
    liveness: Liveness = field(init=False)
    #: why each of this process's running tools must stop, looked at from one thread
    watches: Watches = field(init=False)
    #: the refused ticks this process knows are recorded, not written again (`advance`)
    refusals: Refusals = field(default_factory=Refusals, init=False)
    _models: dict[str, Model] = field(default_factory=dict, init=False)
    #: one pool of model-server connections for this process's models, made on first use
    _http: Poster | None = field(default=None, init=False)
    _models_lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    #: the last publish of this process failed: its relay takes no ticks until the broker
    #: answers again (a relay that cannot publish would only move the outbox's rows out of
    #: the reach of the relays that can)
    cannot_publish: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.leases = Leases(self.store, lease_s=self.settings.lease_s, clock=self.clock)
        self.liveness = Liveness(
            self.store, every_s=self.settings.liveness_period_s, lose_all=self.leases.lose_all
        )
        self.watches = Watches(self.store, every_s=self.settings.stop_poll_s, clock=self.clock)

    def owner(self, node: str | None = None) -> str:
        """Who a tick of this thread leases its session as: `owner_name(node)` (`node`: the
        Celery worker's name), under this process's sign of life while it holds one."""
        return self.liveness.owner(owner_name(node))

    @functools.cached_property
    def providers(self) -> Providers:
        """The model providers: the shipped ones, the entry points', TICKWORK_IMPORTS'."""
        return Providers(self.settings.imports)

    @functools.cached_property
    def tenants(self) -> Tenants:
        """The tenants' quotas (TICKWORK_TENANTS_FILE), read again when the file changes."""
        return Tenants.of(self.settings.section(TenantSettings))

    def tenant_day(self, head: Head) -> TenantDay | None:
        """What the session's tenant spent of its `max_usd_per_day` on the UTC day the
        session was created (its spending counts to that day), read once a tick, before its
        model calls; None when the tenant has no such quota (nothing is read)."""
        quota = self.tenants.quotas(head.tenant).max_usd_per_day
        if quota is None:
            return None
        day = head.created_at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        spent = self.store.day_spent(head.tenant, day=day)
        return TenantDay(tenant=head.tenant, quota_usd=quota, spent_usd=spent, day=day)

    @functools.cached_property
    def masker(self) -> Masker:
        """What a tick masks in what it stores: the secret patterns of the settings and the
        secret values in this process's environment, read at the first tick."""
        return masker_for(self.settings)

    @functools.cached_property
    def workspaces(self) -> Workspaces:
        """This host's working copies of sessions' files, and the artifact store behind them."""
        # issue 16: blobs retention moved to the archive are read back from there
        artifacts = restoring(self.store.artifacts(self.settings.artifacts_url), self.settings)
        return Workspaces(
            self.settings.workspaces_path,
            self.store,
            artifacts,
            max_bytes=self.settings.workspaces_max_bytes,
        )

    def model(self, spec: str) -> Model:
        with self._models_lock:
            if spec not in self._models:
                if not spec:
                    raise ConfigurationError(
                        "the session names no model; submit it with --model or set TICKWORK_MODEL"
                    )
                if self._http is None:
                    self._http = pooled_client()
                self._models[spec] = make_model(
                    spec,
                    timeout_s=self.settings.model_timeout_s,
                    client=self._http,
                    providers=self.providers,
                )
            return self._models[spec]

    def close(self) -> None:
        """Close what this runtime opened, as `Engine.dispose` or Celery's `app.close` do:
        what is used again is opened again, lazily. Its sign of life is given up (its
        connection closed) and its watch stopped, and the next tick's lease takes it
        again; the lease renewal and stop watch threads are stopped and joined
        (`CLOSE_WAIT_S` each at most), and the next tick's lease or watched call starts new
        ones; the model-server
        connections are closed (a model asked for later opens new ones). Close it once its
        ticks have ended: a tick still running has its lease no longer renewed. The store
        is the caller's to close, and so are the `background` threads (started by whoever
        started the worker)."""
        self.liveness.stop()
        self.leases.close()
        self.watches.close()
        with self._models_lock:
            if self._http is not None:
                self._http.close()
            self._http = None
            self._models.clear()

    def publish(self, session_id: str, version: int) -> bool:
        """Publish a tick to run now; a failure is logged, the relay covers it. Whether
        the broker took it."""
        try:
            self.publish_tick(session_id, version, 0.0)
        except Exception as exc:
            self.cannot_publish = True
            log.warning(
                "could not publish the tick of %s v%d (%s); the session is saved and the relay "
                "will publish it once the broker is back (within TICKWORK_RELAY_AFTER_S=%gs)",
                session_id,
                version,
                exc,
                self.settings.relay_after_s,
            )
            return False
        self.cannot_publish = False
        return True

    def announce_dead_letter(self, head: Head) -> None:
        """The notice of a session failed (and so dead-lettered) that this process saved,
        by a tick or by the relay's expiry: best effort, after the commit; the dead letter
        itself is in the database either way."""
        try:
            self.publish_dead_letter(head.id, head.error_code or "", head.error_message)
        except Exception as exc:
            log.warning("could not announce dead letter %s: %s", head.id, exc)


#: a worker process's Postgres pool: a threads worker's 250 ticks want ~30 connections at
#: once in a burst, and one opened past the pool is closed when given back, so the
#: engine's default (10 kept, 40 more) had Postgres start a backend for most statements of
#: a burst (at 500 in flight: Postgres's CPU 18 s against 6 s with 30 kept;
#: ops/bench/in_flight.py). Clients, the API and the CLI keep the default; either gives
#: way to TICKWORK_DATABASE_POOL_SIZE and _OVERFLOW (`Settings.database_pool`).
WORKER_POOL = {"pool_size": 30, "max_overflow": 10}


def worker_store(settings: Settings) -> Store:
    """The store of a worker process: `build_store` with WORKER_POOL on a server database."""
    return build_store(settings, pool={} if settings.db_url.startswith("sqlite") else WORKER_POOL)
