"""The tick and its runtime: claim, advance one micro-phase, save; the Celery app, leases,
the relay, the pruner and the webhook dispatcher every worker runs."""
