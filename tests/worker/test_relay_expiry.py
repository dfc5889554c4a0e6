"""A session whose deadline passes while it waits (queued, or for a decision) is failed
`DEADLINE` by the relay's full pass, and its dead letter announced on the dead-letter
queue as a tick that fails one announces it: once, however many relays pass at once.

It was failed and dead-lettered in the database with no notice, so whoever consumes the
dead-letter queue (the worker's log and `tickwork_dead_letters_received_total`, or an
operator's own consumer) never heard of it."""

from __future__ import annotations

import threading
from datetime import timedelta

from tickwork.fsm.admission import TenantLimit
from tickwork.fsm.values import Budgets, Session, Status
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.relay import relay_once
from tickwork.worker.tick.runtime import Runtime

from tests.conftest import Clock
from tests.worker.ticking import Ticks
from tickwork.testing.store_ticks import new_session, wait_for_approval

SHORT = Budgets(deadline_s=60.0)


class Notices:
    """The dead-letter queue as the relays' runtimes publish to it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()

    def publish(self, session_id: str, code: str, message: str) -> None:
        with self.lock:
            self.sent.append((session_id, str(code), message))


def relay(ticks: Ticks, notices: Notices, clock: Clock) -> Runtime:
    return Runtime(
        settings=ticks.settings,
        store=ticks.store,
        jobs=Jobs(),
        publish_tick=lambda *_: None,
        publish_dead_letter=notices.publish,
        clock=clock,
    )


def _waiting(ticks: Ticks, clock: Clock) -> None:
    store = ticks.store
    one = TenantLimit(max_in_flight=1)
    store.create(new_session("running", now=clock()), now=clock(), limit=one)
    queued = new_session("queued-late", now=clock(), budgets=SHORT)
    assert store.create(queued, now=clock(), limit=one).status is Status.QUEUED
    store.create(new_session("waiting-late", now=clock(), budgets=SHORT), now=clock())
    wait_for_approval(store, "waiting-late", clock, "danger")
    store.create(Session(head=new_session("patient", now=clock()).head), now=clock())
    wait_for_approval(store, "patient", clock, "danger")


def test_the_relay_announces_each_expired_session_once(ticks: Ticks, clock: Clock) -> None:
    _waiting(ticks, clock)
    notices = Notices()
    relays = [relay(ticks, notices, clock) for _ in range(3)]
    clock.advance(61)
    barrier = threading.Barrier(len(relays))

    def pass_of(rt: Runtime) -> None:
        barrier.wait()
        relay_once(rt)

    threads = [threading.Thread(target=pass_of, args=(rt,)) for rt in relays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)

    assert sorted(s for s, _, _ in notices.sent) == ["queued-late", "waiting-late"]
    for session_id, code, message in notices.sent:
        head = ticks.store.get(session_id)
        assert (head.status, code) == (Status.FAILED, "DEADLINE")
        assert message == head.error_message and "`deadline_s` is 60" in message
        assert ticks.store.dead_letter(session_id).code == "DEADLINE"
    assert ticks.store.get("patient").status is Status.WAITING_APPROVAL
    # which limit stayed full and what to do (it said "its tenant's max_in_flight or its
    # concurrency key's limit", a key it did not have)
    assert ticks.store.get("queued-late").error_message.endswith(
        "it waited queued and was never admitted (tenant default's `max_in_flight` stayed "
        "full): give a deadline that covers the wait, or ask the operator to raise the "
        "tenant's `max_in_flight`"
    )
    # the finished webhook card (TICKWORK_WEBHOOK_EVENTS=finished) goes from the outbox,
    # its `failed` event saved with the expiry, as a tick's
    since = clock() - timedelta(hours=1)
    cards = ticks.store.cards.take(
        now=clock(), hold_s=60, limit=10, approvals=False, finished_since=since
    )
    assert sorted((c.session_id, c.kind) for c in cards) == [
        ("queued-late", "failed"),
        ("waiting-late", "failed"),
    ]

    relay_once(relays[1])
    assert len(notices.sent) == 2  # a later pass announces nothing again


def test_a_pass_that_expires_more_than_its_scan_announces_every_one(
    ticks: Ticks, clock: Clock, monkeypatch
) -> None:
    """The expiry reads the oldest waiting sessions only (EXPIRY_SCAN): the admission of
    the same pass failed those after them again, with no notice. Each failed session is
    announced, in this pass or the next."""
    store = ticks.store
    for name in ("late-1", "late-2"):
        store.create(new_session(name, now=clock(), budgets=SHORT), now=clock())
        wait_for_approval(store, name, clock, "danger")
        clock.advance(1)
    scan = store.expire
    monkeypatch.setattr(store, "expire", lambda *, now: scan(now=now, limit=1))
    notices = Notices()
    rt = relay(ticks, notices, clock)
    clock.advance(61)
    relay_once(rt)
    relay_once(rt)
    failed = [n for n in ("late-1", "late-2") if store.get(n).status is Status.FAILED]
    assert failed == ["late-1", "late-2"]
    assert sorted(s for s, _, _ in notices.sent) == failed
