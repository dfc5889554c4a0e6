"""A relay that cannot publish takes no ticks from the relays that can.

Every worker runs a relay, and they take the outbox's rows in turn. A worker cut off from
the broker but not from the database still wins rows; before, each row it won was moved
out by the growing wait of a republication and its message vanished, so a fleet with one
such worker waited longer and longer for its lost ticks. Now the row goes back, due at
once for another relay, and the cut relay takes none until its broker answers again.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from tickwork.fsm.values import Status
from tickwork.store.schema import outbox
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.liveness import Liveness
from tickwork.worker.tick.relay import relay_once, takeover_of
from tickwork.worker.tick.runtime import Runtime, utc_now

from tests.conftest import Clock
from tests.worker.ticking import DANGER, Ticks
from tickwork.testing import until
from tickwork.testing.store_ticks import claim


class Broker:
    """A broker a worker reaches or not: what it was given, and how often it was tried."""

    def __init__(self, *, up: bool) -> None:
        self.up = up
        self.published: list[tuple[str, int]] = []
        self.tries = 0

    def publish(self, session_id: str, version: int, countdown: float) -> None:
        self.tries += 1
        if not self.up:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        self.published.append((session_id, version))

    def check(self) -> None:
        if not self.up:
            raise ConnectionRefusedError("[Errno 111] Connection refused")


@pytest.fixture
def clock() -> Clock:
    """The clock tests/worker/conftest.py's `ticks` ticks on: the wall clock's now, at
    which the client stores a submission's tick."""
    return Clock(utc_now())


def relay_of(ticks: Ticks, broker: Broker, clock: Clock) -> Runtime:
    return Runtime(
        settings=ticks.settings,
        store=ticks.store,
        jobs=Jobs(),
        publish_tick=broker.publish,
        check_broker=broker.check,
        clock=clock,
    )


def lost_ticks(ticks: Ticks, clock: Clock, n: int) -> list[str]:
    """`n` sessions whose first tick's message was lost, due for republication now."""
    ids = [ticks.submit(DANGER) for _ in range(n)]
    # the client stored each tick at the wall clock's now, which a loaded machine may have
    # moved past this clock's start by more than the second the advance below leaves over
    clock.now = max(clock.now, utc_now())
    clock.advance(ticks.settings.relay_after_s + 1)
    return ids


def test_a_relay_that_cannot_publish_gives_its_ticks_back_at_once(
    ticks: Ticks, clock: Clock
) -> None:
    [session_id] = lost_ticks(ticks, clock, 1)
    cut, healthy = Broker(up=False), Broker(up=True)
    cut_relay, healthy_relay = relay_of(ticks, cut, clock), relay_of(ticks, healthy, clock)

    relay_once(cut_relay)  # wins the row, cannot publish it
    assert cut.tries == 1 and cut_relay.cannot_publish
    for _ in range(3):  # the cut relay's next passes take nothing
        clock.advance(1)
        relay_once(cut_relay)
    assert cut.tries == 1

    # well inside the threshold: the row was given back due, not moved a turn out
    clock.advance(1)
    relay_once(healthy_relay)
    assert healthy.published == [(session_id, 0)]

    ticks.run(session_id)  # the healthy worker's tick
    assert ticks.store.get(session_id).status is Status.WAITING_APPROVAL


def test_a_relay_stops_at_the_first_tick_the_broker_refuses_and_gives_back_the_rest(
    ticks: Ticks, clock: Clock
) -> None:
    ids = lost_ticks(ticks, clock, 3)
    cut, healthy = Broker(up=False), Broker(up=True)

    relay_once(relay_of(ticks, cut, clock))

    assert cut.tries == 1  # each refusal can take the broker's timeouts: one is enough
    clock.advance(1)
    relay_once(relay_of(ticks, healthy, clock))
    assert sorted(healthy.published) == sorted((i, 0) for i in ids)


def test_a_relay_takes_ticks_again_once_its_broker_answers(ticks: Ticks, clock: Clock) -> None:
    [first] = lost_ticks(ticks, clock, 1)
    broker = Broker(up=False)
    relay = relay_of(ticks, broker, clock)
    relay_once(relay)
    assert relay.cannot_publish

    broker.up = True
    clock.advance(1)
    relay_once(relay)

    assert not relay.cannot_publish
    assert broker.published == [(first, 0)]


def test_a_publish_that_failed_in_a_tick_stops_the_relay_taking_ticks_too(
    ticks: Ticks, clock: Clock
) -> None:
    [session_id] = lost_ticks(ticks, clock, 1)
    broker = Broker(up=False)
    relay = relay_of(ticks, broker, clock)
    relay.publish("another", 3)  # a tick's publish of its next tick, refused
    assert relay.cannot_publish and broker.tries == 1
    before = outbox_row(ticks, session_id)

    relay_once(relay)

    assert broker.tries == 1, "a relay whose process cannot publish must not take ticks"
    assert outbox_row(ticks, session_id) == before  # not taken, not moved


def outbox_row(ticks: Ticks, session_id: str) -> object:
    with ticks.store.engine.connect() as conn:
        return conn.execute(select(outbox).where(outbox.c.session_id == session_id)).one()


def test_a_given_back_tick_counts_no_republication(ticks: Ticks, clock: Clock) -> None:
    """Given back again and again, a row's next turn never moves out: the healthy relay
    still has it one period after the threshold."""
    [session_id] = lost_ticks(ticks, clock, 1)
    cut, healthy = Broker(up=False), Broker(up=True)
    for _ in range(5):
        cut_relay = relay_of(ticks, cut, clock)  # e.g. `tickwork relay --once`, refused
        relay_once(cut_relay)
        clock.advance(1)
    assert cut.tries == 5

    relay_once(relay_of(ticks, healthy, clock))
    assert healthy.published == [(session_id, 0)]


def test_a_takeover_that_cannot_publish_gives_the_sessions_back_at_once(
    ticks: Ticks, clock: Clock
) -> None:
    """The first publish of a look that fails is its last (each can take the broker's
    timeouts), and the sessions it took over are due at once for the relays that can
    publish, not after TICKWORK_RELAY_AFTER_S."""
    liveness = Liveness(ticks.store, every_s=60, lose_all=lambda _: None)
    liveness.start()
    ids = [ticks.submit(DANGER) for _ in range(2)]
    for session_id in ids:
        claim(ticks.store, session_id, now=clock(), owner=liveness.owner("w"))
    liveness.stop()  # the worker holding them is gone
    until(ticks.store.absent_signs, timeout=30, what="the sign seen gone")
    cut, healthy = Broker(up=False), Broker(up=True)
    ticks.settings.liveness_grace_s = 0

    taken = takeover_of(relay_of(ticks, cut, clock))()

    assert sorted(t.session_id for t in taken) == sorted(ids)
    assert cut.tries == 1
    clock.advance(1)  # well inside the threshold
    relay_once(relay_of(ticks, healthy, clock))
    assert sorted(healthy.published) == sorted((i, 0) for i in ids)
