"""The observers a worker's runtime gets when the app is built: metrics, the webhook
dispatcher and, with the `otel` extra enabled, tracing. Each hangs on the tick's report
(`tickwork.worker.observers.report`); the tick knows none of them."""

from __future__ import annotations

import logging

from tickwork.worker.config.settings import WebhookSettings, read_settings
from tickwork.worker.config.tenants import TenantSettings
from tickwork.worker.observers.metrics import TenantLabels, TickMetrics
from tickwork.worker.observers.tracing import tracer_for
from tickwork.worker.tick.admission import Admitter
from tickwork.worker.tick.dispatcher import Dispatcher
from tickwork.worker.tick.runtime import Runtime

log = logging.getLogger("tickwork.observers")


def install(rt: Runtime) -> None:
    """Register the standard observers on `rt`, and its background threads; one that
    cannot be set up is logged, and the worker runs without it rather than not at all."""
    cap = rt.settings.section(TenantSettings).tenant_label_cap
    labels = TenantLabels(lambda: rt.tenants.table().names, cap=cap)
    rt.observers.add(TickMetrics(rt.providers, labels))
    rt.observers.add(Admitter(rt))  # a session that ends lets its tenant's next one in
    try:
        hooks = read_settings(WebhookSettings)
        if hooks.webhook_url:
            dispatcher = Dispatcher(rt, hooks)
            rt.observers.add(dispatcher)
            rt.background.append(dispatcher)
    except Exception as exc:
        log.error("no approval webhooks in this worker: %s", exc)
    try:
        tracer = tracer_for(rt.masker, rt.store.get)
        if tracer is not None:
            rt.observers.add(tracer)
            rt.background.append(tracer)
    except Exception as exc:
        log.error("no tracing in this worker: %s", exc)
