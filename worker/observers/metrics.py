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
import weakref
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from celery import signals
from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector
from tickwork.fsm.outcomes import NONE_LABEL, outcome_of
from tickwork.fsm.tenants import DEFAULT_TENANT
from tickwork.fsm.values import ErrorCode, EventKind, Head, Status
from tickwork.worker.config.settings import MetricsSettings
from tickwork.worker.config.tenants import OTHER
from tickwork.worker.observers.report import Outcome as TickOutcome

if TYPE_CHECKING:
    from tickwork.fsm.machine import Change
    from tickwork.store.port import Health
    from tickwork.store.relay import RelayPass
    from tickwork.worker.models.providers import Providers
    from tickwork.worker.observers.report import ModelCall, TickReport

log = logging.getLogger("tickwork.metrics")
F = TypeVar("F", bound=Callable[..., Any])

#: seconds; ticks range from a dropped duplicate (ms) to a long model or tool call (minutes)
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)

#: the per-session families carry `tenant` (bounded: `TenantLabels`); a tick dropped before
#: its claim knows no session, and counts under tenant `none`
TICKS = Counter(
    "tickwork_ticks",
    "Ticks run, by micro-phase, outcome and tenant",
    ["phase", "outcome", "tenant"],
)
TICK_SECONDS = Histogram(
    "tickwork_tick_duration_seconds",
    "Wall time of one tick, claim to save",
    ["phase", "outcome", "tenant"],
    buckets=TICK_BUCKETS,
)
MODEL_CALLS = Counter(
    "tickwork_model_calls",
    "Model calls by outcome (ok, retry, failed) and tenant",
    ["model", "outcome", "tenant"],
)
MODEL_TOKENS = Counter(
    "tickwork_model_tokens",
    "Model tokens used, by type (prompt, completion; cached_prompt and cache_write are parts "
    "of prompt) and tenant",
    ["model", "type", "tenant"],
)
MODEL_COST = Counter("tickwork_model_cost_usd", "USD spent on the model", ["model", "tenant"])
APPROVALS_REQUESTED = Counter(
    "tickwork_approvals_requested", "Times a session stopped to wait for a person", ["tenant"]
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
RELAY_ADMITTED = Counter(
    "tickwork_relay_admitted",
    "Queued sessions the relay admitted (queued -> ready) in its passes",
)
RELAY_LEASE_EXPIRIES = Counter(
    "tickwork_relay_lease_expiries", "Sessions revived because their worker's lease expired"
)
RELAY_TAKEN_OVER = Counter(
    "tickwork_relay_taken_over",
    "Sessions taken over because their worker's sign of life was gone (a dead worker's, "
    "without waiting for its leases to expire)",
)
DEAD_LETTERS_RECEIVED = Counter(
    "tickwork_dead_letters_received",
    "Dead-letter messages a worker consumed from the dead-letter queue, by error code",
    ["code"],
)
SESSIONS_COMPLETED = Counter(
    "tickwork_sessions_completed",
    "Sessions that completed, by outcome (a repair's: repaired, tests_failing, tests_not_run, "
    "no_changes; none for other kinds)",
    ["outcome", "tenant"],
)
WEBHOOKS = Counter(
    "tickwork_webhook_deliveries",
    "Webhook cards (approval and finished) by outcome (delivered; failed: given up; dropped: "
    "the session moved on before its card went out)",
    ["outcome"],
)


def registry(multiproc_dir: str | None = None) -> CollectorRegistry:
    """This process's metrics, or with a multiprocess folder every process's, added up."""
    folder = multiproc_dir or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        return REGISTRY
    combined = CollectorRegistry(auto_describe=True)
    multiprocess.MultiProcessCollector(combined, path=folder)  # type: ignore[no-untyped-call]
    return combined


#: distinct model labels a worker process gives; the models past them count as `other`
MODEL_LABEL_CAP = 50


class ModelLabels:
    """This process's label for each session's model spec: its provider's bounded label
    (`Providers.label`: a scripted model's file path is not one) for the first
    MODEL_LABEL_CAP distinct labels, the rest `other`. By the spec the bill prices, never
    by the model name a server puts in its reply: a server chooses that, and one answering
    with a new name each time would make a new series of every reply."""

    def __init__(self, providers: Providers, *, cap: int = MODEL_LABEL_CAP) -> None:
        self.providers, self.cap = providers, cap
        self._given: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, spec: str) -> str:
        label = self.providers.label(spec)
        with self._lock:
            if label not in self._given and len(self._given) < self.cap:
                self._given.add(label)
            return label if label in self._given else OTHER


class TenantLabels:
    """This process's tenant label for each session's tenant, given once and kept (a
    counter's series must not change name): `tenant_labels` with what it gave before."""

    def __init__(self, listed: Callable[[], frozenset[str]] = frozenset, *, cap: int = 20) -> None:
        self.listed, self.cap = listed, cap
        self._given: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, tenant: str) -> str:
        with self._lock:
            if tenant not in self._given:
                label = tenant_labels(
                    [tenant], listed=self.listed(), cap=self.cap, given=self._given
                )[tenant]
                self._given[tenant] = label
            return self._given[tenant]


class TickMetrics:
    """The tick observer: ticks by phase, outcome and tenant, their time, model usage,
    approvals."""

    def __init__(self, providers: Providers, tenants: TenantLabels | None = None) -> None:
        self.models = ModelLabels(providers)
        self.tenants = tenants or TenantLabels()

    def __call__(self, report: TickReport) -> None:
        head = report.claimed or report.head
        tenant = self.tenants(head.tenant) if head is not None else NONE_LABEL
        labels = (report.phase.value, report.outcome.value, tenant)
        TICKS.labels(*labels).inc()
        TICK_SECONDS.labels(*labels).observe(report.seconds)
        if report.model is not None:
            count_model(report.model, self.models(report.model.spec), tenant=tenant)
        if report.change is not None:
            count_change(report.change, tenant=tenant)
            if report.outcome is TickOutcome.SAVED:
                count_completed(report.change.head, tenant=tenant)


def count_completed(head: Head, *, tenant: str) -> None:
    """One session saved as completed, by its outcome (a bounded label: the four, or none)."""
    if head.status is Status.COMPLETED:
        found = outcome_of(head.result)
        SESSIONS_COMPLETED.labels(found.value if found else NONE_LABEL, tenant).inc()


def count_model(call: ModelCall, model: str, *, tenant: str) -> None:
    """A tick's model calls (an agent's one, a graph node's several), their tokens and cost:
    spent even if the save loses. Labelled `model` (`ModelLabels`) and by the session's
    tenant label."""
    MODEL_CALLS.labels(model, call.outcome, tenant).inc(call.calls)
    if call.outcome != "ok":
        return
    MODEL_TOKENS.labels(model, "prompt", tenant).inc(call.usage.prompt_tokens)
    MODEL_TOKENS.labels(model, "completion", tenant).inc(call.usage.completion_tokens)
    if call.usage.cached_prompt_tokens:
        MODEL_TOKENS.labels(model, "cached_prompt", tenant).inc(call.usage.cached_prompt_tokens)
    if call.usage.cache_creation_tokens:
        MODEL_TOKENS.labels(model, "cache_write", tenant).inc(call.usage.cache_creation_tokens)
    MODEL_COST.labels(model, tenant).inc(call.cost_usd)


def count_change(change: Change, *, tenant: str) -> None:
    """Approval requests in a tick's change."""
    if any(e.kind is EventKind.APPROVAL_REQUESTED for e in change.events):
        APPROVALS_REQUESTED.labels(tenant).inc()


def count_dead_letter(code: str) -> None:
    """One dead-letter message consumed; codes outside ErrorCode count as `other`."""
    known = {c.value for c in ErrorCode}
    DEAD_LETTERS_RECEIVED.labels(code if code in known else "other").inc()


def count_taken_over(sessions: int) -> None:
    """Sessions a relay's look took over from a worker whose sign of life was gone."""
    RELAY_TAKEN_OVER.inc(sessions)


def counted_relay(relay_once: F) -> F:
    """Count relay passes, republished ticks and revived leases."""

    @functools.wraps(relay_once)
    def counted(*args: Any, **kwargs: Any) -> RelayPass:
        done: RelayPass = relay_once(*args, **kwargs)
        RELAY_PASSES.inc()
        RELAY_REPUBLISHED.inc(done.republished)
        RELAY_LEASE_EXPIRIES.inc(done.lease_expiries)
        RELAY_DELAYED.inc(done.delayed)
        RELAY_ADMITTED.inc(done.admitted)
        return done

    return counted  # type: ignore[return-value]


def tenant_labels(
    seen: Iterable[str],
    *,
    listed: frozenset[str],
    cap: int = 20,
    given: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Each tenant's metric label: its name if the tenants file lists it (or it is the
    default), and for the first `cap` others by name too; the rest `other`, so a fleet of
    many small tenants keeps the labels bounded. `given`: labels handed out before, which
    stay and take their share of the cap (a counter's tenants arrive one at a time)."""
    given = given or {}
    named = {t: t for t in seen if t in listed or t == DEFAULT_TENANT}
    named.update({t: given[t] for t in seen if t not in named and t in given})
    taken = sum(
        1 for t, label in given.items() if label == t and t not in listed and t != DEFAULT_TENANT
    )
    room = max(0, cap - taken)
    others = sorted({t for t in seen if t not in named})
    named.update({t: t for t in others[:room]})
    named.update({t: OTHER for t in others[room:]})
    return named


class StoreCollector(Collector):
    """Gauges read from the database at each scrape; the API exposes them."""

    def __init__(
        self,
        store: Health,
        *,
        clock: Callable[[], datetime] | None = None,
        tenants: Callable[[Iterable[str]], dict[str, str]] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock or (lambda: datetime.now(UTC))
        #: the tenant label of each tenant seen (bounded: `tenant_labels`)
        self.tenants = tenants or (lambda seen: tenant_labels(seen, listed=frozenset()))

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
        read = self.store.gauges(now=now)
        by_status, waiting = read.by_status, read.waiting
        letters, rows, oldest_due = read.dead_letters, read.outbox_rows, read.oldest_due
        stalest, delayed = read.stalest, read.delayed

        family = GaugeMetricFamily("tickwork_sessions", "Sessions by status", labels=["status"])
        for status in Status:
            family.add_metric([status.value], by_status.get(status.value, 0))
        yield family
        seen = {t for t, _ in read.by_tenant} | {t for t, *_ in read.tenant_dead_letters}
        label = self.tenants(seen)
        per_tenant: Tally[tuple[str, str]] = Tally()
        for (tenant, status), count in read.by_tenant.items():
            per_tenant[(label[tenant], status)] += count
        family = GaugeMetricFamily(
            "tickwork_tenant_sessions",
            "Sessions by tenant and status (tenants past the label cap: other)",
            labels=["tenant", "status"],
        )
        for tenant in sorted({t for t, _ in per_tenant}):
            for status in Status:
                family.add_metric([tenant, status.value], per_tenant[(tenant, status.value)])
        yield family
        letters_of: Tally[tuple[str, str, bool]] = Tally()
        for tenant, code, resolved, count in read.tenant_dead_letters:
            letters_of[(label[tenant], code, resolved)] += count
        family = GaugeMetricFamily(
            "tickwork_tenant_dead_letters",
            "Dead letters by tenant and error code",
            labels=["tenant", "code", "resolved"],
        )
        for (tenant, code, resolved), count in sorted(letters_of.items()):
            family.add_metric([tenant, code, "true" if resolved else "false"], count)
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


def _age(now: datetime, at: datetime) -> float:
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return max(0.0, (now - at).total_seconds())


class _Server:
    """The one /metrics server of this worker process. It serves the process's registry,
    so it is shared by the apps whose workers run in the process: started by the first
    worker's start, stopped with the last of those apps' workers (or the app closed,
    `App.close`), not with the first."""

    lock = threading.Lock()
    running: Any = None
    thread: threading.Thread | None = None
    #: the apps whose worker started it or found it running, until its shutdown or their
    #: close (an app dropped unclosed leaves it to the others')
    apps: weakref.WeakSet[Any] = weakref.WeakSet()


def serve(port: int, addr: str = "0.0.0.0") -> int:
    """Serve this process's metrics (every process's with a multiprocess folder); the port."""
    from prometheus_client import start_http_server

    with _Server.lock:
        if _Server.running is None:
            server, thread = start_http_server(port, addr, registry=registry())
            _Server.running, _Server.thread = server, thread
            log.info("metrics on http://%s:%d/metrics", addr, server.server_port)
        return int(_Server.running.server_port)


def stop_serving() -> None:
    with _Server.lock:
        _stop()


def _stop() -> None:
    """Stop the server (under `_Server.lock`) and wait for its thread."""
    _Server.apps.clear()
    if _Server.running is not None:
        _Server.running.shutdown()
        _Server.running.server_close()
        if _Server.thread is not None:
            _Server.thread.join(5)
        _Server.running = _Server.thread = None


def let_go(app: object) -> None:
    """`app` is closed: the server stops if its worker was the last one served."""
    with _Server.lock:
        if app in _Server.apps:
            _Server.apps.discard(app)
            if not _Server.apps:
                _stop()


def _serve_with_worker(sender: Any = None, **_: Any) -> None:
    try:
        settings = MetricsSettings()
    except Exception as exc:
        log.error("this worker serves no metrics: %s", exc)
        return
    if settings.metrics_port is None:
        return
    try:
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
        app = getattr(sender, "app", None)
        if app is not None:
            with _Server.lock:
                _Server.apps.add(app)
    except Exception as exc:  # a worker runs without its metrics rather than not at all
        log.error(
            "this worker serves no metrics: cannot listen on %s:%s (TICKWORK_METRICS_ADDR, "
            "TICKWORK_METRICS_PORT): %s; another process may hold the port: give each worker "
            "on a host a port of its own",
            settings.metrics_addr,
            settings.metrics_port,
            exc,
        )


def _stop_with_worker(sender: Any = None, **_: Any) -> None:
    with _Server.lock:
        _Server.apps.discard(getattr(sender, "app", None))
        if not _Server.apps:  # no other app's worker served
            _stop()


def serve_with_worker() -> None:
    """Serve /metrics once a worker of this process is ready (TICKWORK_METRICS_PORT), and
    stop with it; connected once, however many apps `make_app` builds. The server is the
    process's, shared by its apps' workers (`_Server`): it stops with the last of them to
    shut down, or with its app's close (`let_go`)."""
    signals.worker_ready.connect(_serve_with_worker, weak=False, dispatch_uid="tickwork-metrics")
    signals.worker_shutdown.connect(
        _stop_with_worker, weak=False, dispatch_uid="tickwork-metrics-stop"
    )
