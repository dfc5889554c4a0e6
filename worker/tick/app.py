"""The Celery app, built by `make_app` from settings.

`celery -A tickwork.worker.tick.app worker` works as Celery users expect: the module attribute `app`
is built from the environment on first access, not at import. Where the working directory
holds a `worker.py`, use `celery -A tickwork worker` (tickwork/celery.py) instead.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery, signals
from celery import concurrency as pools
from celery.app.amqp import AMQP as CeleryAMQP
from celery.utils.dispatch import Signal
from celery.worker.consumer import Consumer as CeleryConsumer
from kombu import Exchange, Queue
from kombu.pools import ProducerPool
from tickwork.fsm.errors import TickworkError
from tickwork.worker.config import release
from tickwork.worker.config.allowlist import AllowList
from tickwork.worker.config.secrets import install_log_masking, masker_for
from tickwork.worker.config.settings import RoleSettings, Settings, load_settings, read_settings
from tickwork.worker.observers import metrics
from tickwork.worker.sandbox.runner import check, describe, sandbox_of
from tickwork.worker.tick import wiring as observers
from tickwork.worker.tick.broker import TRANSPORT
from tickwork.worker.tick.pruner import RetentionThread
from tickwork.worker.tick.relay import RelayThread
from tickwork.worker.tick.retention import RetentionSettings
from tickwork.worker.tick.runtime import Runtime, worker_store

log = logging.getLogger("tickwork.worker")

TICK = "tickwork.tick"
DEAD_LETTER = "tickwork.dead_letter"
TASK_MODULES = ["tickwork.tasks.tick", "tickwork.tasks.dead_letter"]
#: a tick message given back this many times (its worker killed, its channel closed) is
#: dropped by a quorum queue: the relay publishes the session's tick again from the database
RABBITMQ_DELIVERY_LIMIT = 10


class Consumer(CeleryConsumer):
    """Celery's consumer without native delayed delivery: on quorum queues Celery would
    declare 28 `celery_delayed_*` queues for countdown messages, and tickwork sends none (a
    delayed tick waits in the outbox, docs/DESIGN.md section 11)."""

    class Blueprint(CeleryConsumer.Blueprint):
        default_steps = [
            step
            for step in CeleryConsumer.Blueprint.default_steps
            if not step.endswith(":DelayedDelivery")
        ]


class AMQP(CeleryAMQP):
    """Celery's, with a producer pool of the app's own, over the app's own connection pool
    (`App.pool`)."""

    @property
    def producer_pool(self) -> ProducerPool:
        if self._producer_pool is None:
            self._producer_pool = ProducerPool(self.app.pool, limit=self.app.pool.limit)
        return self._producer_pool

    publisher_pool = producer_pool


class App(Celery):
    """tickwork's Celery app, as `make_app` builds it. What tickwork hangs on it is let go
    with it: its receivers of Celery's signals are held by the app (Celery keeps weak
    references), so an app dropped unclosed is collected whole, and `close` (or the end of
    `with make_app(...) as app:`) lets go of everything at once: the receivers
    disconnected, the relay's threads stopped, the runtime's background threads (the
    webhook dispatcher, the tracer's exporter) stopped, this process's runtime closed and
    its store's engine disposed, and its broker connections closed (its pools are its own,
    not kombu's process-wide ones Celery shares between apps on one broker). The /metrics
    server is the process's, shared by its apps' workers
    (`tickwork.worker.observers.metrics.serve_with_worker`): it stops with the app when no
    other app's worker uses it. A closed app still publishes (Celery reopens its
    broker pool) and `runtime(app)` builds a new runtime, but a worker started with it runs
    without tickwork's receivers (no relay): build a new app for that."""

    amqp_cls = f"{__name__}:AMQP"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._receivers: list[tuple[Signal, Callable[..., None]]] = []
        self._closers: list[Callable[[], None]] = []

    @property
    def pool(self) -> Any:
        """The broker connection pool, the app's own: Celery's is kombu's process-wide pool
        for the broker's URL (`kombu.pools.connections`), shared by every app on that
        broker, which `close` could not close without closing theirs."""
        if self._pool is None:
            self._ensure_after_fork()  # a forked child drops it, as Celery's own
            self._pool = self.connection_for_write().Pool(limit=self.conf.broker_pool_limit)
        return self._pool

    def receive(self, signal: Signal, receiver: Callable[..., None]) -> None:
        """Connect `receiver` to `signal` until this app is closed or collected."""
        signal.connect(receiver, weak=True)  # the app holds it: Celery's ref would keep the app
        self._receivers.append((signal, receiver))

    def on_close(self, closer: Callable[[], None]) -> None:
        """Call `closer` when this app is closed (once)."""
        self._closers.append(closer)

    def close(self) -> None:
        """Let go of what tickwork and Celery hold for this app (see the class); closing
        twice does nothing more."""
        for signal, receiver in self._receivers:
            signal.disconnect(receiver)
        self._receivers.clear()
        closers, self._closers = self._closers, []
        for closer in closers:
            closer()
        held = self.__dict__.pop("_tickwork_runtime", None)
        if held is not None and held[0] == os.getpid():  # a forked child's copy is not ours
            for background in held[1].background:  # started by a worker or by a tick
                background.stop()
            held[1].close()
            held[1].store.close()
        metrics.let_go(self)
        amqp = self.__dict__.get("amqp")  # made on first use only
        if amqp is not None and amqp._producer_pool is not None:
            amqp._producer_pool.force_close_all()
            amqp._producer_pool = None
        if self._pool is not None:
            self._pool.force_close_all()  # the producers' connections too
        super().close()


def make_app(settings: Settings | None = None, *, relay: bool = True) -> App:
    """A Celery app for tickwork with at-least-once delivery settings (docs/DESIGN.md
    section 3); close it (`App.close`) where it is dropped before the process ends."""
    settings = settings or load_settings()
    for name in TASK_MODULES:
        # now, from beside this package: Celery imports `include` with the working directory
        # first on sys.path, where a tasks.py would stand in for tickwork's `tasks`
        importlib.import_module(name)
    install_log_masking(masker_for(settings))
    broker, transport_options = settings.broker()
    app = App("tickwork", broker=broker, set_as_current=False, include=TASK_MODULES)
    events = settings.task_events and not settings.embedded_broker  # no fanout on files
    app.conf.update(
        broker_transport=TRANSPORT if settings.embedded_broker else None,
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=settings.queue,
        task_queues=_queues(settings),
        task_routes={
            TICK: {"queue": settings.queue},
            DEAD_LETTER: {"queue": settings.dead_letter_queue},
        },
        task_create_missing_queues=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=events,
        task_send_sent_event=events,
        worker_enable_remote_control=not settings.embedded_broker,
        worker_consumer=f"{__name__}:Consumer",
        # quorum queues have no global prefetch: Celery sets prefetch 1 per consumer
        worker_detect_quorum_queues=True,
    )
    app.tickwork_settings = settings  # type: ignore[attr-defined]
    _check_sandbox_with_worker(app, settings)
    _fit_transcripts_with_worker(app)
    _say_release_with_worker(app)
    signals.worker_ready.connect(_note_consumer_timeout, weak=False, dispatch_uid="tickwork-rmq")
    metrics.serve_with_worker()
    signals.worker_ready.connect(_wake_the_loop, weak=False, dispatch_uid="tickwork-wake")
    if relay:
        _start_relay_with_worker(app)
    return app


#: the pools that run many ticks in one process, each THINK reading its session's transcript
MANY_TICKS_IN_ONE_PROCESS = frozenset(
    pools.ALIASES[name] for name in ("threads", "gevent", "eventlet") if name in pools.ALIASES
)


def transcripts_to_keep(settings: Settings, *, pool: Any, concurrency: Any) -> int:
    """How many sessions' transcripts a worker process with this `pool` (its `--pool` name,
    path or class) and `concurrency` keeps: TICKWORK_TRANSCRIPT_CACHE when it is given;
    else, on a pool running many ticks in one process, one for each tick it runs at once
    and 64 at least (with 64, a 500-session burst on two threads workers of 250 read every
    history whole at each THINK: ops/bench/in_flight.py); else 64."""
    path = pools.ALIASES.get(pool, pool) if isinstance(pool, str) else pool
    if isinstance(path, type):
        path = f"{path.__module__}:{path.__qualname__}"
    explicit = "transcript_cache" in settings.model_fields_set
    if explicit or path not in MANY_TICKS_IN_ONE_PROCESS or not isinstance(concurrency, int):
        return settings.transcript_cache  # an `auto` concurrency is the CPUs: fewer than 64
    return max(settings.transcript_cache, concurrency)


def _fit_transcripts_with_worker(app: App) -> None:
    """At worker start (Celery's `worker_init`, sent by every worker, the test worker
    too), grow this process's transcripts to `transcripts_to_keep`."""

    def init(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        settings: Settings = app.tickwork_settings  # type: ignore[attr-defined]
        keep = transcripts_to_keep(settings, pool=sender.pool_cls, concurrency=sender.concurrency)
        if keep > settings.transcript_cache:  # a prefork parent builds no runtime to fork
            runtime(app).store.transcripts.grow_to(keep)

    app.receive(signals.worker_init, init)


def _say_release_with_worker(app: App) -> None:
    """At worker start, say in the log which release it is and which sessions it claims."""

    def ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            level = runtime(app).level
            log.info(
                "tickwork %s, runtime level %d: claims the sessions of level %d or below",
                release.version(),
                level,
                level,
            )

    app.receive(signals.worker_ready, ready)


def _check_sandbox_with_worker(app: App, settings: Settings) -> None:
    """At worker start, say in the log what commands run in, or why they will be refused."""

    def ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app:
            log_sandbox(settings)

    app.receive(signals.worker_ready, ready)


def log_sandbox(settings: Settings) -> None:
    sandbox = sandbox_of(settings)
    line = describe(sandbox)
    if sandbox.mode != "none":
        allowed = AllowList.of(settings.egress_allow)
        line += f"; egress allow-list: {allowed}" if allowed else "; no egress allow-list"
    if sandbox.mode == "none":
        log.warning(line)
    elif check(sandbox) is not None:
        log.error(line)
    else:
        log.info(line)


def queue_arguments(settings: Settings) -> dict[str, Any]:
    """What tickwork's queues are declared with on RabbitMQ: their type
    (`TICKWORK_RABBITMQ_QUEUE_TYPE`), a quorum queue's delivery limit, and the delivery
    timeout (`x-consumer-timeout`, honoured by RabbitMQ 3.12 and later; older servers apply
    their `consumer_timeout`)."""
    arguments: dict[str, Any] = {"x-consumer-timeout": int(settings.delivery_timeout_s * 1000)}
    if settings.rabbitmq_queue_type == "quorum":
        arguments["x-queue-type"] = "quorum"
        arguments["x-delivery-limit"] = RABBITMQ_DELIVERY_LIMIT
    return arguments


def _queues(settings: Settings) -> list[Queue] | None:
    """On RabbitMQ, tickwork's queues with their arguments (`queue_arguments`); durable,
    neither exclusive nor auto-deleted, as quorum queues must be."""
    if not settings.broker_url.startswith(("amqp", "pyamqp")):
        return None  # Celery declares them plainly from the routes
    arguments = queue_arguments(settings)
    return [
        Queue(name, Exchange(name), routing_key=name, queue_arguments=arguments)
        for name in (settings.queue, settings.dead_letter_queue)
    ]


def consumer_timeout_note(server: str, delivery_timeout_s: float) -> str | None:
    """What an operator must know of a RabbitMQ server's delivery timeout, or None: servers
    before 3.12 ignore `x-consumer-timeout` and apply their own `consumer_timeout`."""
    try:
        major, minor = (int(part) for part in server.split(".")[:2])
    except ValueError:
        return f"RabbitMQ reports version {server!r}; check that it honours x-consumer-timeout"
    if (major, minor) >= (3, 12):
        return None
    return (
        f"RabbitMQ {server} ignores x-consumer-timeout: its consumer_timeout applies (30 "
        f"minutes by default); keep it at least TICKWORK_DELIVERY_TIMEOUT_S="
        f"{delivery_timeout_s:g}s (rabbitmq.conf: consumer_timeout = "
        f"{int(delivery_timeout_s * 1000)})"
    )


def _note_consumer_timeout(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    settings = getattr(app, "tickwork_settings", None)
    if settings is None or _queues(settings) is None:
        return
    try:
        with app.connection_for_read() as conn:  # type: ignore[union-attr]
            conn.connect()
            server = str(conn.connection.server_properties.get("version", ""))
    except Exception as exc:
        log.warning("could not ask RabbitMQ its version: %s", exc)
        return
    note = consumer_timeout_note(server, settings.delivery_timeout_s)
    if note:
        log.warning(note)


def broker_away(app: Celery, *, timeout_s: float = 3.0) -> str | None:
    """Why `app`'s broker cannot be reached now (one try, `timeout_s` at most), or None: for
    /readyz and for `tickwork worker`'s warning at start."""
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, timeout=timeout_s
            )
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"
    return None


def _wake_the_loop(sender: Any = None, **_: Any) -> None:
    """A timer in the worker's event loop, so it sees a warm shutdown (SIGTERM) within a
    second: with nothing else scheduled it polls RabbitMQ's socket for up to 10 s."""
    hub = getattr(sender, "hub", None)
    if hub is not None and getattr(getattr(sender, "app", None), "tickwork_settings", None):
        hub.call_repeatedly(1.0, _nothing)


def _nothing() -> None:
    return None


def runtime(app: Celery) -> Runtime:
    """This process's runtime for `app`, built on first use (after any fork)."""
    held = getattr(app, "_tickwork_runtime", None)
    if held is not None and held[0] == os.getpid():
        return held[1]
    from tickwork.worker.jobs import Jobs

    settings: Settings = app.tickwork_settings  # type: ignore[attr-defined]

    # the arguments' repr given, as Celery would write it: its `saferepr` of them took a fifth
    # of a publish's CPU (ops/bench/RESULTS.md, the run of 2026-12-06, after)
    def publish_tick(session_id: str, version: int, countdown: float) -> None:
        args = (session_id, version)
        app.send_task(
            TICK,
            args=args,
            argsrepr=repr(args),
            kwargsrepr="{}",
            queue=settings.queue,
            countdown=countdown or None,
            **settings.publish_options,
        )

    def publish_dead_letter(session_id: str, code: str, message: str) -> None:
        app.send_task(
            DEAD_LETTER,
            args=(session_id, code, message),
            queue=settings.dead_letter_queue,
            **settings.publish_options,
        )

    def check_broker() -> None:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)

    rt = Runtime(
        settings=settings,
        store=worker_store(settings),
        jobs=Jobs(settings.imports, roles_file=settings.section(RoleSettings).roles_file),
        publish_tick=publish_tick,
        publish_dead_letter=publish_dead_letter,
        check_broker=check_broker,
    )
    observers.install(rt)  # metrics, webhooks, tracing: hooks on the tick's report
    rt.liveness.enabled = settings.liveness  # a sign of life from its first claim on
    app._tickwork_runtime = (os.getpid(), rt)  # type: ignore[attr-defined]
    return rt


def _start_relay_with_worker(app: App) -> None:
    threads: list[RelayThread | RetentionThread] = []
    #: orders a worker's start against its shutdown (each from a thread of its own): a
    #: thread is listed once started, and a shutdown takes the list whole
    starting = threading.Lock()

    def ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        with starting:
            if threads:
                return
            rt = runtime(app)
            relay = RelayThread(rt)
            relay.start()
            threads.append(relay)
            for background in rt.background:  # the webhook dispatcher
                background.start()
            try:  # issue 16: archive and prune in the background, when a retention age is set
                retention = read_settings(RetentionSettings)
                if retention.policy().enabled:
                    pruner = RetentionThread(rt, retention)
                    pruner.start()
                    threads.append(pruner)
            except TickworkError as exc:  # the relay runs regardless
                log.error("retention does not run in this worker: %s", exc)

    def stop_all() -> None:
        with starting:  # a worker started again on this app starts them anew
            stopping = list(threads)
            threads.clear()
        for thread in stopping:
            thread.stop()
        for thread in stopping:
            thread.join(5)

    def shutdown(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return  # another app's worker in this process: its relay is not ours to stop
        stop_all()
        held = getattr(app, "_tickwork_runtime", None)
        if held is not None and held[0] == os.getpid():
            for background in held[1].background:
                background.stop()
            held[1].close()  # its sign of life given up too

    app.receive(signals.worker_ready, ready)
    app.receive(signals.worker_shutdown, shutdown)
    app.on_close(stop_all)  # the app closed in the process that started its threads


def __getattr__(name: str) -> Celery:
    # `celery -A tickwork.worker.tick.app` looks up `app`; built from the environment on first use
    if name in ("app", "celery"):
        built = make_app()
        globals()["app"] = globals()["celery"] = built
        return built
    raise AttributeError(name)
