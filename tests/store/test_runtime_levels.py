"""Runtime levels (docs/DESIGN.md section 12): a session records the level it needs, and a claim
by a worker of a lower level leaves it exactly as it was, for a worker of its level."""

from __future__ import annotations

from tickwork.fsm import snapshots
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import RUNTIME_LEVEL
from tickwork.store import Store
from tickwork.store.schema import outbox, sessions

from tests.conftest import Clock
from tests.store.conftest import LEASE_S, lease, new_session, run_step, table_rows


def _later(store: Store, session_id: str, clock: Clock) -> None:
    """Store a session of the release after this one: it needs RUNTIME_LEVEL + 1."""
    session = new_session(session_id, now=clock())
    head = session.head.model_copy(update={"runtime_level": RUNTIME_LEVEL + 1})
    store.create(session.model_copy(update={"head": head}), now=clock())


def test_a_new_session_needs_this_code_s_level(store: Store, clock: Clock) -> None:
    store.create(new_session("now", now=clock()), now=clock())

    assert store.get("now").runtime_level == RUNTIME_LEVEL
    assert store.load("now").head.runtime_level == RUNTIME_LEVEL


def test_an_older_worker_leaves_a_newer_session_untouched(store: Store, clock: Clock) -> None:
    _later(store, "later", clock)
    before = table_rows(store.engine, sessions), table_rows(store.engine, outbox)

    refused = store.claim("later", 0, owner="old", now=clock(), lease_s=LEASE_S)

    assert refused is None
    # no lease taken, the outbox row kept: the relay offers the tick again
    assert (table_rows(store.engine, sessions), table_rows(store.engine, outbox)) == before
    assert lease(store.engine, "later") == (None, None)
    taken = store.claim(
        "later", 0, owner="new", now=clock(), lease_s=LEASE_S, level=RUNTIME_LEVEL + 1
    )
    assert taken is not None
    assert taken.head.runtime_level == RUNTIME_LEVEL + 1


def test_a_worker_runs_the_sessions_of_lower_levels(store: Store, clock: Clock) -> None:
    store.create(new_session("now", now=clock()), now=clock())

    taken = store.claim(
        "now", 0, owner="new", now=clock(), lease_s=LEASE_S, level=RUNTIME_LEVEL + 1
    )

    assert taken is not None


def test_a_fork_keeps_a_higher_level_else_takes_this_code_s(store: Store, clock: Clock) -> None:
    _later(store, "later", clock)
    store.create(new_session("old", now=clock()), now=clock())
    with store.engine.begin() as conn:  # a session of a release that recorded level 1
        conn.execute(sessions.update().where(sessions.c.id == "old").values(runtime_level=1))
    run_step(store, "old", 1, now=clock())
    again = ForkPatch(append_instruction="again")

    store.fork("later", new_id="f1", from_step=0, patch=again, by="me", now=clock())
    store.fork("old", new_id="f2", from_step=1, patch=again, by="me", now=clock())

    assert store.get("f1").runtime_level == RUNTIME_LEVEL + 1
    assert store.get("f2").runtime_level == RUNTIME_LEVEL


def test_a_snapshot_of_an_earlier_schema_needed_level_one(store: Store, clock: Clock) -> None:
    store.create(new_session("s", now=clock()), now=clock())
    document = snapshots.dump(store.load("s"))
    head = dict(document["session"]["head"])
    del head["runtime_level"]
    old = {"schema_version": 2, "session": {**document["session"], "head": head}}

    assert snapshots.load(old).head.runtime_level == 1


def test_a_refused_tick_is_offered_again_at_the_relay_s_usual_pace(
    store: Store, clock: Clock
) -> None:
    _later(store, "later", clock)
    for _ in range(3):  # refused, and republished by the relay, again and again
        clock.advance(60)
        assert store.claim("later", 0, owner="old", now=clock(), lease_s=LEASE_S) is None
        assert [d.session_id for d in store.due_ticks(now=clock(), older_than_s=10)] == ["later"]
    (row,) = table_rows(store.engine, outbox)
    assert row["republished"] == 3

    store.offer_again("later", 0, now=clock())

    (row,) = table_rows(store.engine, outbox)
    assert (row["republished"], row["due_at"], row["published_at"]) == (0, clock(), clock())
    assert store.due_ticks(now=clock.advance(9), older_than_s=10) == []
    assert [d.session_id for d in store.due_ticks(now=clock.advance(2), older_than_s=10)] == [
        "later"
    ]
