"""Prometheus metrics of the fleet: what each worker counts, and what the store holds.

Workers count ticks, model usage and relay passes in process-local metrics; with
PROMETHEUS_MULTIPROC_DIR set (needed for prefork pools) every process writes them to
that folder and `registry()` adds them up. `tickwork worker --pool prefork` sets it to
`<state dir>/metrics/<node name>`, emptied at start, unless it is set already. The
store's state (sessions by status, approvals waiting, dead letters, the outbox) is read
on each scrape by `StoreCollector`,
which the HTTP API exposes, so Prometheus sees it once however many workers run.

A worker serves /metrics on TICKWORK_METRICS_PORT once it is ready (unset: no server).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from celery import signals
from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy import Connection, Engine, case, func, or_, select

from fsm.values import RUNNABLE, ErrorCode, EventKind, Status
from store.schema import dead_letters, events, outbox, sessions

if TYPE_CHECKING:
    from fsm.machine import Change
    from store.relay import RelayPass

    from .models.providers import Providers

log = logging.getLogger("tickwork.metrics")
F = TypeVar("F", bound=Callable[..., Any])

#: seconds; ticks range from a dropped duplicate (ms) to a long model or tool call (minutes)
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)

TICKS = Counter("tickwork_ticks", "Ticks run, by micro-phase and outcome", ["phase", "outcome"])
TICK_SECONDS = Histogram(
    "tickwork_tick_duration_seconds",
    "Wall time of one tick, claim to save",
    ["phase", "outcome"],
    buckets=TICK_BUCKETS,
)
MODEL_CALLS = Counter(
    "tickwork_model_calls", "Model calls by outcome (ok, retry, failed)", ["model", "outcome"]
)
MODEL_TOKENS = Counter(
    "tickwork_model_tokens", "Model tokens used, by type (prompt, completion)", ["model", "type"]
)
MODEL_COST = Counter("tickwork_model_cost_usd", "USD spent on the model", ["model"])
APPROVALS_REQUESTED = Counter(
    "tickwork_approvals_requested", "Times a session stopped to wait for a person"
)
RELAY_PASSES = Counter("tickwork_relay_passes", "Relay passes run")
RELAY_REPUBLISHED = Counter(
    "tickwork_relay_republished",
    "Ticks the relay published again because their message may be lost",
)
RELAY_DELAYED = Counter(
    "tickwork_relay_delayed_published",
    "Delayed ticks (model backoff, Retry-After) the relay published when they fell due",
)
RELAY_LEASE_EXPIRIES = Counter(
    "tickwork_relay_lease_expiries", "Sessions revived because their worker's lease expired"
)
DEAD_LETTERS_RECEIVED = Counter(
    "tickwork_dead_letters_received",
    "Dead-letter messages a worker consumed from the dead-letter queue, by error code",
    ["code"],
)
WEBHOOKS = Counter(
    "tickwork_webhook_deliveries",
    "Approval webhooks by outcome (delivered, failed, dropped)",
    ["outcome"],
)

_phase = threading.local()


class MetricsSettings(BaseSettings):
    """Where a worker serves /metrics; read when the worker is ready."""

    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore", allow_inf_nan=False)

    #: the port a worker serves /metrics on; unset: none
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_addr: str = "0.0.0.0"


def registry(multiproc_dir: str | None = None) -> CollectorRegistry:
    """This process's metrics, or with a multiprocess folder every process's, added up."""
    folder = multiproc_dir or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        return REGISTRY
    combined = CollectorRegistry(auto_describe=True)
    multiprocess.MultiProcessCollector(combined, path=folder)  # type: ignore[no-untyped-call]
    return combined


def model_label(spec: str, providers: Providers) -> str:
    """A bounded label for a model, its provider's (scripted models carry a file path)."""
    return providers.label(spec)


def timed_tick(advance: F) -> F:
    """Count and time every tick by its phase (set by `timed_phase`) and outcome."""

    @functools.wraps(advance)
    def counted(*args: Any, **kwargs: Any) -> Any:
        _phase.name = "none"
        started = time.perf_counter()
        outcome = "error"
        try:
            result = advance(*args, **kwargs)
            outcome = str(getattr(result, "value", result))
            return result
        finally:
            labels = (_phase.name, outcome)
            TICKS.labels(*labels).inc()
            TICK_SECONDS.labels(*labels).observe(time.perf_counter() - started)

    return counted  # type: ignore[return-value]


def note_phase(name: str) -> None:
    """Label the running tick's metrics with `name` (a graph's node tick: "node")."""
    _phase.name = name


def timed_phase(phase: F) -> F:
    """Note the micro-phase of the claimed session, and count the model usage it made."""

    @functools.wraps(phase)
    def noted(rt: Any, claimed: Any, *rest: Any) -> Any:
        _phase.name = "think" if claimed.head.status is Status.READY else "execute"
        change = phase(rt, claimed, *rest)
        try:
            count_change(change, rt.providers)
        except Exception:  # metrics never break a tick
            log.exception("could not count the metrics of a tick")
        return change

    return noted  # type: ignore[return-value]


def count_change(change: Change, providers: Providers) -> None:
    """Model calls, tokens and cost (spent even if the save loses), approval requests."""
    kinds = {e.kind for e in change.events}
    if change.step is not None:
        model = model_label(change.step.model or change.head.model, providers)
        MODEL_CALLS.labels(model, "ok").inc()
        MODEL_TOKENS.labels(model, "prompt").inc(change.step.usage.prompt_tokens)
        MODEL_TOKENS.labels(model, "completion").inc(change.step.usage.completion_tokens)
        MODEL_COST.labels(model).inc(change.step.cost_usd)
    elif EventKind.MODEL_RETRY in kinds:
        MODEL_CALLS.labels(model_label(change.head.model, providers), "retry").inc()
    elif change.head.error_code is ErrorCode.MODEL_ERROR:
        MODEL_CALLS.labels(model_label(change.head.model, providers), "failed").inc()
    if EventKind.APPROVAL_REQUESTED in kinds:
        APPROVALS_REQUESTED.inc()


def count_dead_letter(code: str) -> None:
    """One dead-letter message consumed; codes outside ErrorCode count as `other`."""
    known = {c.value for c in ErrorCode}
    DEAD_LETTERS_RECEIVED.labels(code if code in known else "other").inc()


def counted_relay(relay_once: F) -> F:
    """Count relay passes, republished ticks and revived leases."""

    @functools.wraps(relay_once)
    def counted(*args: Any, **kwargs: Any) -> RelayPass:
        done: RelayPass = relay_once(*args, **kwargs)
        RELAY_PASSES.inc()
        RELAY_REPUBLISHED.inc(done.republished)
        RELAY_LEASE_EXPIRIES.inc(done.lease_expiries)
        RELAY_DELAYED.inc(done.delayed)
        return done

    return counted  # type: ignore[return-value]


class StoreCollector(Collector):
    """Gauges read from the database at each scrape; the API exposes them."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] | None = None) -> None:
        self.engine = engine
        self.clock = clock or (lambda: datetime.now(UTC))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("tickwork_store_up", "1 if the last scrape could read the store")
        try:
            found = list(self._gauges(self.clock()))
        except Exception as exc:
            log.warning("metrics: could not read the store: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from found

    def _gauges(self, now: datetime) -> Iterator[GaugeMetricFamily]:
        with self.engine.connect() as conn:
            by_status = {
                status: count
                for status, count in conn.execute(
                    select(sessions.c.status, func.count()).group_by(sessions.c.status)
                )
            }
            suspended = select(sessions.c.id).where(
                sessions.c.status == Status.WAITING_APPROVAL.value
            )
            requested = (
                select(events.c.session_id, func.max(events.c.at).label("at"))
                .where(
                    events.c.kind == EventKind.APPROVAL_REQUESTED.value,
                    events.c.session_id.in_(suspended),
                )
                .group_by(events.c.session_id)
                .subquery()
            )
            waiting = conn.execute(
                select(sessions.c.awaiting, requested.c.at)
                .outerjoin(requested, requested.c.session_id == sessions.c.id)
                .where(sessions.c.status == Status.WAITING_APPROVAL.value)
            ).all()
            resolved = dead_letters.c.resolved_at.is_not(None)
            letters = conn.execute(
                select(dead_letters.c.code, resolved, func.count()).group_by(
                    dead_letters.c.code, resolved
                )
            ).all()
            rows, oldest_due = conn.execute(select(func.count(), func.min(outbox.c.due_at))).one()
            stalest, delayed = _runnable(conn, now)

        family = GaugeMetricFamily("tickwork_sessions", "Sessions by status", labels=["status"])
        for status in Status:
            family.add_metric([status.value], by_status.get(status.value, 0))
        yield family

        calls = GaugeMetricFamily(
            "tickwork_approvals_waiting", "Tool calls waiting for a person's decision"
        )
        calls.add_metric([], sum(len(a or ()) for a, _ in waiting))
        yield calls
        ages = [_age(now, at) for _, at in waiting if at is not None]
        oldest = GaugeMetricFamily(
            "tickwork_approval_oldest_wait_seconds",
            "How long the longest-waiting session has waited for a person (0: none waits)",
        )
        oldest.add_metric([], max(ages, default=0.0))
        yield oldest
        hour = GaugeMetricFamily(
            "tickwork_approvals_waiting_over_hour", "Sessions waiting for a person over an hour"
        )
        hour.add_metric([], sum(1 for a in ages if a > 3600))
        yield hour

        family = GaugeMetricFamily(
            "tickwork_dead_letters", "Dead letters by error code", labels=["code", "resolved"]
        )
        for code, resolved, count in letters:
            family.add_metric([code, "true" if resolved else "false"], count)
        yield family

        backlog = GaugeMetricFamily("tickwork_outbox_rows", "Ticks written but not yet claimed")
        backlog.add_metric([], rows)
        yield backlog
        due = GaugeMetricFamily(
            "tickwork_outbox_oldest_due_seconds",
            "How long the oldest unclaimed tick has been due (0: none)",
        )
        due.add_metric([], max(0.0, _age(now, oldest_due)) if oldest_due else 0.0)
        yield due
        stale = GaugeMetricFamily(
            "tickwork_runnable_stalest_seconds",
            "Time since the least recently changed runnable session last changed or its "
            "delayed tick fell due; sessions whose next tick is not yet due are left out "
            "(0: none)",
        )
        stale.add_metric([], _age(now, stalest) if stalest else 0.0)
        yield stale
        waiting = GaugeMetricFamily(
            "tickwork_sessions_delayed",
            "Runnable sessions whose next tick is not yet due (model backoff, Retry-After)",
        )
        waiting.add_metric([], delayed)
        yield waiting


def _runnable(conn: Connection, now: datetime) -> tuple[datetime | None, int]:
    """When the stalest runnable session last moved (or, for a delayed tick the relay has
    not published yet, fell due), leaving out sessions whose delayed tick is not yet due;
    and how many those are."""
    runnable = sessions.c.status.in_([s.value for s in RUNNABLE])
    unpublished = outbox.c.published_at.is_(None)
    moving = sessions.outerjoin(
        outbox,
        (outbox.c.session_id == sessions.c.id) & (outbox.c.version == sessions.c.version),
    )
    delayed = conn.execute(
        select(func.count()).select_from(moving).where(runnable, unpublished, outbox.c.due_at > now)
    ).scalar_one()
    since = case(
        (unpublished & (outbox.c.due_at > sessions.c.updated_at), outbox.c.due_at),
        else_=sessions.c.updated_at,
    )
    stalest = conn.execute(
        select(func.min(since))
        .select_from(moving)
        .where(runnable, or_(outbox.c.due_at.is_(None), ~unpublished, outbox.c.due_at <= now))
    ).scalar()
    return stalest, int(delayed)


def _age(now: datetime, at: datetime) -> float:
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return max(0.0, (now - at).total_seconds())


class _Server:
    """The one /metrics server of this worker process."""

    lock = threading.Lock()
    running: Any = None


def serve(port: int, addr: str = "0.0.0.0") -> int:
    """Serve this process's metrics (every process's with a multiprocess folder); the port."""
    from prometheus_client import start_http_server

    with _Server.lock:
        if _Server.running is None:
            server, _ = start_http_server(port, addr, registry=registry())
            _Server.running = server
            log.info("metrics on http://%s:%d/metrics", addr, server.server_port)
        return int(_Server.running.server_port)


def stop_serving() -> None:
    with _Server.lock:
        if _Server.running is not None:
            _Server.running.shutdown()
            _Server.running.server_close()
            _Server.running = None


def _serve_with_worker(sender: Any = None, **_: Any) -> None:
    try:
        settings = MetricsSettings()
        if settings.metrics_port is None:
            return
        pool = getattr(getattr(sender, "controller", None), "pool", None)
        if type(pool).__module__ == "celery.concurrency.prefork" and not os.environ.get(
            "PROMETHEUS_MULTIPROC_DIR"
        ):
            log.warning(
                "prefork pool without PROMETHEUS_MULTIPROC_DIR: the ticks counted in child "
                "processes will not show on /metrics; start it with `tickwork worker` or set "
                "it to an empty folder"
            )
        serve(settings.metrics_port, settings.metrics_addr)
    except Exception as exc:  # a worker runs without its metrics rather than not at all
        log.warning("could not serve metrics: %s", exc)


def _stop_with_worker(sender: Any = None, **_: Any) -> None:
    stop_serving()


# started by the worker's own readiness: worker/app.py knows nothing of metrics
signals.worker_ready.connect(_serve_with_worker, weak=False)
signals.worker_shutdown.connect(_stop_with_worker, weak=False)
