"""The store's gauges tell a session in a long, healthy backoff from a stuck one."""

from __future__ import annotations

from tickwork.fsm import machine
from tickwork.store import Store
from tickwork.worker.observers.metrics import StoreCollector

from tests.conftest import Clock
from tests.store.conftest import claim, new_session


def gauges(store: Store, clock: Clock) -> dict[str, float]:
    collector = StoreCollector(store, clock=clock)
    return {f.name: f.samples[0].value for f in collector.collect() if len(f.samples) == 1}


def test_a_session_waiting_for_its_retry_is_not_stale_until_its_tick_falls_due(
    store: Store, clock: Clock
) -> None:
    store.create(new_session("backoff", now=clock()), now=clock())
    claimed = claim(store, "backoff", now=clock())
    retry = machine.model_failed(
        claimed.head, error="429", transient=True, now=clock(), retry_after_s=600
    )
    store.save(retry, version=0, owner="worker-1", now=clock())

    clock.advance(590)
    waiting = gauges(store, clock)
    clock.advance(10 + 120)
    overdue = gauges(store, clock)

    assert waiting["tickwork_sessions_delayed"] == 1
    assert waiting["tickwork_runnable_stalest_seconds"] == 0
    # due for two minutes and nobody published or claimed it: stale since it fell due
    assert overdue["tickwork_sessions_delayed"] == 0
    assert overdue["tickwork_runnable_stalest_seconds"] == 120


def test_a_runnable_session_nobody_claims_is_stale_since_it_last_moved(
    store: Store, clock: Clock
) -> None:
    store.create(new_session("stuck", now=clock()), now=clock())

    clock.advance(1000)

    assert gauges(store, clock)["tickwork_runnable_stalest_seconds"] == 1000
    assert gauges(store, clock)["tickwork_sessions_delayed"] == 0
