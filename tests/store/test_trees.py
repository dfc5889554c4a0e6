"""Session trees in the store (docs/DESIGN.md section 16): a spawn inserts its children and
its join with the parent's save; each child's end is counted on the join in its own save,
and the end that completes it wakes the parent exactly once, on every backend and when
two children end at the same instant."""

from __future__ import annotations

from functools import partial

from tickwork.fsm import machine, trees
from tickwork.fsm.joins import Join, JoinMode
from tickwork.fsm.values import Budgets, EventKind, Head, Status
from tickwork.store import Claimed, Store
from tickwork.store.schema import joins, outbox, sessions
from tickwork.store.trees import missed_wakes

from tests.conftest import Clock
from tests.store.conftest import (
    claim,
    new_session,
    reply,
    table_rows,
    think,
    think_change,
    together,
)


def spawn(
    store: Store, clock: Clock, parent_id: str, n: int, *, mode: JoinMode = JoinMode.ALL
) -> list[str]:
    """The parent thinks a `spawn_agents` call and its EXECUTE tick spawns `n` children."""
    store.create(
        new_session(parent_id, now=clock(), budgets=Budgets(max_cost_usd=1.0)), now=clock()
    )
    think(store, parent_id, reply((trees.SPAWN_AGENTS, {"children": []})), now=clock())
    claimed = claim(store, parent_id, now=clock())
    [call] = claimed.calls
    head = claimed.head
    children = [
        new_session(f"{parent_id}-c{i}", now=clock()).head.model_copy(
            update={
                "parent_id": parent_id,
                "root_id": parent_id,
                "spawn_call": call.call_id,
                "role": "explorer",
                "budgets": trees.child_budgets(head, 1 / n, now=clock(), base=head.budgets),
            }
        )
        for i in range(n)
    ]
    join = Join(parent_id=parent_id, call_id=call.call_id, mode=mode, expected=n)
    change = trees.spawned(head, call, join, children, now=clock())
    saved = store.save(change, version=head.version, owner=claimed.owner, now=clock())
    assert saved.status is Status.WAITING_CHILDREN
    return [c.id for c in children]


def finish(store: Store, clock: Clock, child_id: str, owner: str = "worker-1") -> Head:
    """The child's THINK tick whose answer has no calls: it completes."""
    return think(store, child_id, reply(content=f"{child_id} done"), now=clock(), owner=owner)


def joined_events(store: Store, session_id: str) -> list[dict[str, object]]:
    return [
        e.data
        for _, e in store.events_after(session_id)
        if e.kind is EventKind.CHILDREN_JOINED and e.data.get("woken")
    ]


def test_a_spawn_stores_its_children_their_ticks_and_the_join_with_the_parent(
    store: Store, clock: Clock
) -> None:
    ids = spawn(store, clock, "p", 3)

    children = store.children("p")
    assert [c.id for c in children] == ids
    assert {(c.parent_id, c.root_id, c.role, c.status) for c in children} == {
        ("p", "p", "explorer", Status.READY)
    }
    assert {r["session_id"] for r in table_rows(store.engine, outbox)} == set(ids)
    join = store.join("p", children[0].spawn_call or "")
    assert join is not None and (join.expected, join.ended) == (3, 0)
    assert [h.id for h in store.tree("p")] == ids
    assert store.forks("p") == [] or all(f["id"] in ids for f in store.forks("p"))


def test_the_last_child_to_end_wakes_the_parent_once_and_its_cost_is_charged(
    store: Store, clock: Clock
) -> None:
    ids = spawn(store, clock, "p", 3)
    waiting = store.get("p")

    for child_id in ids[:2]:
        finish(store, clock, child_id)
        assert store.get("p").status is Status.WAITING_CHILDREN
    finish(store, clock, ids[2])

    woken = store.get("p")
    assert (woken.status, woken.version) == (Status.EXECUTING, waiting.version + 1)
    assert [r["version"] for r in table_rows(store.engine, outbox, outbox.c.session_id == "p")] == [
        woken.version
    ]
    assert len(joined_events(store, "p")) == 1
    [row] = table_rows(store.engine, joins)
    assert row["ended"] == 3 and row["woken_at"] is not None
    assert abs(row["cost_usd"] - 3 * 0.01) < 1e-9  # each child's step cost 0.01
    assert row["tokens"] == 3 * 120


def test_the_woken_parent_records_every_child_and_takes_their_cost(
    store: Store, clock: Clock
) -> None:
    ids = spawn(store, clock, "p", 2)
    finish(store, clock, ids[0])
    # the other fails: reported to the parent, not a failure of it
    claimed = claim(store, ids[1], now=clock())
    failed = machine.fail(claimed.head, machine.ErrorCode.INTERNAL, "boom", now=clock())
    store.save(failed, version=claimed.head.version, owner=claimed.owner, now=clock())
    parent: Claimed = claim(store, "p", now=clock())
    before = parent.head.cost_usd
    [call] = parent.calls
    join = store.join("p", call.call_id)
    assert join is not None and join.complete
    ends = trees.child_ends(store.children("p", call.call_id))
    change = trees.joined(parent.head, parent.calls, call, join, ends, now=clock())
    head = store.save(change, version=parent.head.version, owner=parent.owner, now=clock())

    assert head.status is Status.READY
    assert abs(head.cost_usd - (before + 0.01)) < 1e-9
    seen = store.observation("p", call.call_id)
    assert seen is not None and not seen.is_error
    assert f"{ids[0]} done" in seen.content and "INTERNAL: boom" in seen.content


def test_two_children_ending_at_once_wake_the_parent_exactly_once(
    store: Store, clock: Clock
) -> None:
    for round_ in range(8):
        parent_id = f"p{round_}"
        ids = spawn(store, clock, parent_id, 2)
        claims = [claim(store, c, now=clock(), owner=f"w{i}") for i, c in enumerate(ids)]
        changes = [think_change(c, reply(content="done"), now=clock()) for c in claims]

        results = together(
            partial(store.save, change, version=c.head.version, owner=c.owner, now=clock())
            for change, c in zip(changes, claims, strict=True)
        )

        assert not any(isinstance(r, BaseException) for r in results), results
        head = store.get(parent_id)
        assert head.status is Status.EXECUTING, f"round {round_}: {head.status}"
        assert len(joined_events(store, parent_id)) == 1, f"round {round_}"
        rows = table_rows(store.engine, outbox, outbox.c.session_id == parent_id)
        assert [r["version"] for r in rows] == [head.version]
        [join] = table_rows(store.engine, joins, joins.c.parent_id == parent_id)
        assert join["ended"] == 2


def test_the_relay_wakes_a_parent_whose_join_is_complete_once(store: Store, clock: Clock) -> None:
    ids = spawn(store, clock, "p", 2)
    for child_id in ids:
        finish(store, clock, child_id)
    # as if the wake had been lost: the parent waits again on a complete join
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


def test_cancelling_the_waiting_parent_cancels_every_descendant(store: Store, clock: Clock) -> None:
    ids = spawn(store, clock, "p", 2)

    head = store.request_cancel("p", now=clock(), by="alice")

    assert head.status is Status.CANCELLED
    assert all(store.get(c).cancel_requested for c in ids)
    assert store.to_cancel() == []
    # each child stops at its next tick, and its end wakes nobody
    for child_id in ids:
        assert finish(store, clock, child_id).status is Status.CANCELLED
    assert store.get("p").status is Status.CANCELLED
    assert joined_events(store, "p") == []


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


def test_a_first_join_asks_the_others_to_stop_and_waits_for_them(
    store: Store, clock: Clock
) -> None:
    ids = spawn(store, clock, "p", 3, mode=JoinMode.FIRST)
    finish(store, clock, ids[1])

    assert store.get("p").status is Status.WAITING_CHILDREN
    assert sorted(store.to_cancel()) == [ids[0], ids[2]]
    for child_id in (ids[0], ids[2]):
        store.request_cancel(child_id, now=clock())
        finish(store, clock, child_id)
    assert store.get("p").status is Status.EXECUTING
    join = store.join("p", store.get(ids[0]).spawn_call or "")
    assert join is not None and join.first == ids[1]
