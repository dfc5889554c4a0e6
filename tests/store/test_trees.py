"""Session trees at the row level (docs/DESIGN.md section 16): the join's row, and the
relay's repairs of a tree. The behaviour every store must have (spawn, the join woken once,
two children ending at once, cancelling down the tree) is the conformance kit's
`TreeContract`, run on every backend by test_contract.py."""

from __future__ import annotations

import pytest
from sqlalchemy import null
from tickwork.fsm import transitions
from tickwork.fsm.errors import CancelledMeanwhile
from tickwork.fsm.joins import JoinMode
from tickwork.fsm.values import Status
from tickwork.store import Store, trees
from tickwork.store.schema import joins, outbox, sessions
from tickwork.store.trees import missed_wakes

from tests.conftest import Clock
from tests.store.conftest import table_rows
from tickwork.testing.store_contract.trees import finish, spawn, take_join, tree_cost, wakes
from tickwork.testing.store_ticks import claim, new_session, reply, think_change


def test_the_join_s_row_counts_the_ends_and_records_the_wake_up(store: Store, clock: Clock) -> None:
    ids = spawn(store, clock, "p", 2)
    finish(store, clock, ids[0])
    [row] = table_rows(store.engine, joins)
    assert (row["ended"], row["first"], row["woken_at"]) == (1, ids[0], None)

    finish(store, clock, ids[1])

    [row] = table_rows(store.engine, joins)
    assert row["ended"] == 2 and row["woken_at"] is not None
    [tick] = table_rows(store.engine, outbox, outbox.c.session_id == "p")
    assert tick["version"] == store.get("p").version


def test_the_relay_wakes_a_parent_whose_join_is_complete_once(store: Store, clock: Clock) -> None:
    ids = spawn(store, clock, "p", 2)
    for child_id in ids:
        finish(store, clock, child_id)
    # as if the wake-up had been lost: the parent waits again on a complete join
    with store.engine.begin() as conn:
        conn.execute(
            sessions.update()
            .where(sessions.c.id == "p")
            .values(status=Status.WAITING_CHILDREN.value)
        )
        conn.execute(joins.update().values(woken_at=None))
        conn.execute(outbox.delete())
    version = store.get("p").version

    assert missed_wakes(store.engine, now=clock()) == [("p", version + 1)]
    assert missed_wakes(store.engine, now=clock()) == []
    assert store.get("p").status is Status.EXECUTING
    assert wakes(store, "p") == 2  # the lost one as recorded, and the relay's


def test_the_relay_never_wakes_a_parent_whose_join_is_not_complete(
    store: Store, clock: Clock
) -> None:
    ids = spawn(store, clock, "p", 2)
    finish(store, clock, ids[0])

    assert missed_wakes(store.engine, now=clock()) == []
    assert store.get("p").status is Status.WAITING_CHILDREN


def test_the_relay_cancels_children_left_going_in_a_cancelled_tree(
    store: Store, clock: Clock
) -> None:
    ids = spawn(store, clock, "p", 2)
    # as if the canceller died after the parent's cancel, before its children's
    with store.engine.begin() as conn:
        conn.execute(
            sessions.update().where(sessions.c.id == "p").values(status=Status.CANCELLED.value)
        )

    assert sorted(store.to_cancel()) == ids


def test_a_child_s_completion_after_its_tree_was_cancelled_is_refused_before_its_own_cancel(
    store: Store, clock: Clock
) -> None:
    ids = spawn(store, clock, "p", 2)
    claimed = claim(store, ids[0], now=clock())
    change = think_change(claimed, reply(content="done"), now=clock())
    # the parent cancelled, the cancel not down to this child yet (its own transaction)
    with store.engine.begin() as conn:
        conn.execute(
            sessions.update().where(sessions.c.id == "p").values(status=Status.CANCELLED.value)
        )
    assert not store.get(ids[0]).cancel_requested

    with pytest.raises(CancelledMeanwhile, match="its tree's \\(session p\\) cancel"):
        store.save(change, version=claimed.head.version, owner=claimed.owner, now=clock())

    cancelled = transitions.cancelled_meanwhile(change, clock())
    head = store.save(cancelled, version=claimed.head.version, owner=claimed.owner, now=clock())
    assert head.status is Status.CANCELLED and head.final_answer == "done"
    # a session that is no child completes whatever its fork parent's status
    store.create(new_session("lone", now=clock()), now=clock())
    lone = claim(store, "lone", now=clock())
    done = think_change(lone, reply(content="done"), now=clock())
    done = done.model_copy(update={"head": done.head.model_copy(update={"parent_id": "p"})})
    saved = store.save(done, version=lone.head.version, owner=lone.owner, now=clock())
    assert saved.status is Status.COMPLETED


def test_the_relay_wakes_a_parent_left_waiting_on_an_each_join_with_an_end(
    store: Store, clock: Clock
) -> None:
    ids = spawn(store, clock, "p", 2, mode=JoinMode.EACH)
    finish(store, clock, ids[0])
    [row] = table_rows(store.engine, joins)
    assert (row["ends"], row["delivered"], row["waiting_call"]) == ([ids[0]], 0, None)
    # as if the wake-up had been lost: the parent waits on the join, its end not delivered
    with store.engine.begin() as conn:
        conn.execute(
            sessions.update()
            .where(sessions.c.id == "p")
            .values(status=Status.WAITING_CHILDREN.value)
        )
        conn.execute(joins.update().values(waiting_call=row["call_id"]))
        conn.execute(outbox.delete())
    version = store.get("p").version

    assert missed_wakes(store.engine, now=clock()) == [("p", version + 1)]
    assert missed_wakes(store.engine, now=clock()) == []
    assert store.get("p").status is Status.EXECUTING
    [row] = table_rows(store.engine, joins)
    assert row["waiting_call"] is None and row["woken_at"] is None


def test_the_relay_never_wakes_a_parent_waiting_on_an_each_join_with_nothing_ended(
    store: Store, clock: Clock
) -> None:
    spawn(store, clock, "p", 2, mode=JoinMode.EACH)

    assert missed_wakes(store.engine, now=clock()) == []
    assert store.get("p").status is Status.WAITING_CHILDREN


def test_a_join_stored_before_the_order_of_ends_records_them_from_then_on(
    store: Store, clock: Clock
) -> None:
    ids = spawn(store, clock, "p", 2)
    with store.engine.begin() as conn:  # as 0022_each leaves a row from before it
        conn.execute(joins.update().values(ends=null()))

    finish(store, clock, ids[1])
    finish(store, clock, ids[0])

    [row] = table_rows(store.engine, joins)
    assert (row["ends"], row["ended"], row["first"]) == ([ids[1], ids[0]], 2, ids[1])


def test_a_parent_cancelled_after_its_join_woke_it_is_still_charged_its_children(
    store: Store, clock: Clock
) -> None:
    """The join woke the parent, and its cancel came before the tick that would take the
    join: that tick ends it cancelled (machine.start_execute), never recording the
    children, so the relay's `settle_ended` charges them; a join the parent took is not
    charged again."""
    from tickwork.fsm import machine

    ids = spawn(store, clock, "p", 2)
    for child_id in ids:
        finish(store, clock, child_id)
    assert store.get("p").status is Status.EXECUTING  # woken
    store.request_cancel("p", now=clock(), by="alice")
    claimed = claim(store, "p", now=clock())
    change = machine.start_execute(
        claimed.head, claimed.calls, claimed.decisions, idempotent=False, now=clock()
    )
    store.save(change, version=claimed.head.version, owner=claimed.owner, now=clock())
    assert store.get("p").status is Status.CANCELLED

    assert store.settle_ended(now=clock()) == ["p"]
    assert abs(store.get("p").cost_usd - tree_cost(store, "p")) < 1e-9
    assert store.settle_ended(now=clock()) == []

    # a parent that took its join and then ended: marked accounted, never charged twice
    ids = spawn(store, clock, "q", 2)
    for child_id in ids:
        finish(store, clock, child_id)
    take_join(store, clock, "q")
    finish(store, clock, "q")
    assert store.get("q").status is Status.COMPLETED
    assert store.settle_ended(now=clock()) == []
    assert abs(store.get("q").cost_usd - tree_cost(store, "q")) < 1e-9
    [row] = table_rows(store.engine, joins, joins.c.parent_id == "q")
    assert row["delivered"] == row["ended"] == 2


def test_a_last_end_racing_its_parent_s_cancel_is_still_charged_to_it(
    store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last child's save read its parent still waiting, and the parent's cancel
    committed before that save's wake: the wake moves nothing, and must leave the join
    unwoken for the relay's `settle_ended` (a join marked woken is charged by the parent's
    own save, which a cancelled parent never makes)."""
    ids = spawn(store, clock, "p", 2)
    finish(store, clock, ids[0])
    store.request_cancel("p", now=clock(), by="alice")
    with monkeypatch.context() as race:
        race.setattr(trees, "_ended", lambda conn, session_id: False)  # read before the cancel
        finish(store, clock, ids[1])

    assert store.settle_ended(now=clock()) == ["p"]
    head = store.get("p")
    assert head.status is Status.CANCELLED
    assert abs(head.cost_usd - tree_cost(store, "p")) < 1e-9
    assert store.settle_ended(now=clock()) == []
