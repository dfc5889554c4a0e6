"""Session trees (docs/DESIGN.md section 16) as the `Store` port must keep them: a spawn
stores its children and its join with the parent's save; each child's end counts on the
join in its own save, and the end that completes it wakes the parent exactly once, also
when two children end at the same instant; cancelling a parent cancels its children."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tickwork.fsm import machine, trees
from tickwork.fsm.errors import SessionNotFound, TreeFull
from tickwork.fsm.joins import Join, JoinMode
from tickwork.fsm.transitions import Change
from tickwork.fsm.values import Budgets, ErrorCode, EventKind, Head, Status
from tickwork.store.port import Store
from tickwork.store.ticks import Claimed
from tickwork.testing.store_contract.base import Contract
from tickwork.testing.store_ticks import (
    Clock,
    claim,
    new_session,
    reply,
    think,
    think_change,
)


def spawn(
    store: Store, clock: Clock, parent_id: str, n: int, *, mode: JoinMode = JoinMode.ALL
) -> list[str]:
    """The parent thinks a `spawn_agents` call and its EXECUTE tick spawns `n` children
    (each of the same kind, role `explorer`, an equal share of the parent's budgets)."""
    store.create(
        new_session(parent_id, now=clock(), budgets=Budgets(max_cost_usd=1.0)), now=clock()
    )
    change, claimed = spawn_change(store, clock, parent_id, n, mode=mode)
    saved = store.save(change, version=claimed.head.version, owner=claimed.owner, now=clock())
    assert saved.status is Status.WAITING_CHILDREN
    return [c.id for c in change.children]


def spawn_change(
    store: Store,
    clock: Clock,
    session_id: str,
    n: int,
    *,
    mode: JoinMode = JoinMode.ALL,
    limit: int | None = None,
    owner: str = "worker-1",
) -> tuple[Change, Claimed]:
    """The session (stored, runnable) thinks a `spawn_agents` call, and its EXECUTE tick,
    claimed by `owner`, makes the change that spawns `n` children in its tree (with
    `limit`: the most sessions the tree may hold with them), not yet saved."""
    think(
        store, session_id, reply((trees.SPAWN_AGENTS, {"children": []})), now=clock(), owner=owner
    )
    claimed = claim(store, session_id, now=clock(), owner=owner)
    [call] = claimed.calls
    head = claimed.head
    children = [
        new_session(f"{session_id}-c{i}", now=clock()).head.model_copy(
            update={
                "parent_id": session_id,
                "root_id": head.root_id or session_id,
                "spawn_call": call.call_id,
                "role": "explorer",
                "budgets": trees.child_budgets(head, 1 / n, now=clock(), base=head.budgets),
            }
        )
        for i in range(n)
    ]
    join = Join(parent_id=session_id, call_id=call.call_id, mode=mode, expected=n)
    return trees.spawned(head, call, join, children, now=clock(), limit=limit), claimed


def finish(store: Store, clock: Clock, child_id: str, owner: str = "worker-1") -> Head:
    """The child's THINK tick whose answer has no calls: it completes (costing 0.01)."""
    return think(store, child_id, reply(content=f"{child_id} done"), now=clock(), owner=owner)


def take_join(store: Store, clock: Clock, parent_id: str) -> tuple[float, Head]:
    """The woken parent claims its tick and saves the observation of its complete join
    (the children's results, their cost charged to it); (its cost before, its head after)."""
    parent = claim(store, parent_id, now=clock())
    [call] = parent.calls
    join = store.join(parent_id, call.call_id)
    assert join is not None and join.complete
    ends = trees.child_ends(store.children(parent_id, call.call_id))
    change = trees.joined(
        parent.head, parent.calls, call, join, ends, now=clock(), max_chars=20_000
    )
    saved = store.save(change, version=parent.head.version, owner=parent.owner, now=clock())
    return parent.head.cost_usd, saved


def tree_cost(store: Store, parent_id: str) -> float:
    """The parent's own model calls and every child's cost."""
    own = sum(s.cost_usd for s in store.load(parent_id).steps)
    return own + sum(c.cost_usd for c in store.children(parent_id))


def wakes(store: Store, session_id: str) -> int:
    """How many times a join woke the session."""
    return sum(
        1
        for _, e in store.events_after(session_id)
        if e.kind is EventKind.CHILDREN_JOINED and e.data.get("woken")
    )


def at_once(tasks: list[Callable[[], Any]]) -> list[Any]:
    """Run `tasks` in threads released together; each result or its exception."""
    barrier = threading.Barrier(len(tasks))
    results: list[Any] = [RuntimeError("did not run")] * len(tasks)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = tasks[i]()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(tasks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a save hung"
    return results


class TreeContract(Contract):
    """Child sessions and their join (`Sessions.children`, `join`, `tree`; the save)."""

    def test_a_spawn_stores_its_children_and_their_join_with_the_parent(
        self, store: Store, clock: Clock
    ) -> None:
        ids = spawn(store, clock, "p", 3)

        children = store.children("p")
        assert [c.id for c in children] == ids
        assert {(c.parent_id, c.root_id, c.role, c.status) for c in children} == {
            ("p", "p", "explorer", Status.READY)
        }
        call_id = children[0].spawn_call or ""
        assert [c.id for c in store.children("p", call_id)] == ids
        join = store.join("p", call_id)
        assert join is not None and (join.expected, join.ended) == (3, 0)
        assert [h.id for h in store.tree("p")] == ids
        assert store.forks("p") == []  # a child is not a fork
        due = {d.session_id for d in store.due_ticks(now=clock.advance(120), older_than_s=60)}
        assert due == set(ids)  # each child's first tick; the parent has none

    def test_the_last_child_to_end_wakes_the_parent_once(self, store: Store, clock: Clock) -> None:
        ids = spawn(store, clock, "p", 3)
        waiting = store.get("p")

        for child_id in ids[:2]:
            finish(store, clock, child_id)
            assert store.get("p").status is Status.WAITING_CHILDREN
        finish(store, clock, ids[2])

        woken = store.get("p")
        assert (woken.status, woken.version) == (Status.EXECUTING, waiting.version + 1)
        due = store.due_ticks(now=clock.advance(120), older_than_s=60)
        assert [d.version for d in due if d.session_id == "p"] == [woken.version]
        assert wakes(store, "p") == 1
        join = store.join("p", store.children("p")[0].spawn_call or "")
        assert join is not None and join.ended == 3
        assert abs(join.cost_usd - 3 * 0.01) < 1e-9 and join.tokens == 3 * 120

    def test_the_woken_parent_records_every_child_and_takes_their_cost(
        self, store: Store, clock: Clock
    ) -> None:
        ids = spawn(store, clock, "p", 2)
        finish(store, clock, ids[0])
        # the other fails: reported to the parent, not a failure of it
        claimed = claim(store, ids[1], now=clock())
        failed = machine.fail(claimed.head, ErrorCode.INTERNAL, "boom", now=clock())
        store.save(failed, version=claimed.head.version, owner=claimed.owner, now=clock())
        before, head = take_join(store, clock, "p")

        assert head.status is Status.READY
        assert abs(head.cost_usd - (before + 0.01)) < 1e-9
        call_id = store.load("p").steps[-1].calls[0].call_id
        seen = store.observation("p", call_id)
        assert seen is not None and not seen.is_error
        assert f"{ids[0]} done" in seen.content and "INTERNAL: boom" in seen.content

    def test_two_children_ending_at_once_wake_the_parent_exactly_once(
        self, store: Store, clock: Clock
    ) -> None:
        for round_ in range(8):
            parent_id = f"p{round_}"
            ids = spawn(store, clock, parent_id, 2)
            claims = [claim(store, c, now=clock(), owner=f"w{i}") for i, c in enumerate(ids)]
            saves: list[Callable[[], Any]] = [
                lambda c=c: store.save(
                    think_change(c, reply(content="done"), now=clock()),
                    version=c.head.version,
                    owner=c.owner,
                    now=clock(),
                )
                for c in claims
            ]

            results = at_once(saves)

            assert not any(isinstance(r, BaseException) for r in results), results
            head = store.get(parent_id)
            assert head.status is Status.EXECUTING, f"round {round_}: {head.status}"
            assert wakes(store, parent_id) == 1, f"round {round_}"
            join = store.join(parent_id, claims[0].head.spawn_call or "")
            assert join is not None and join.ended == 2

    def test_a_spawn_past_its_tree_s_limit_stores_nothing(self, store: Store, clock: Clock) -> None:
        ids = spawn(store, clock, "root", 2)  # a tree of 3
        first, claimed = spawn_change(store, clock, ids[0], 2, limit=5)
        store.save(first, version=claimed.head.version, owner=claimed.owner, now=clock())
        second, claimed = spawn_change(store, clock, ids[1], 1, limit=5)

        with pytest.raises(TreeFull, match=r"holds 5 sessions.*at most 5: spawn at most 0") as full:
            store.save(second, version=claimed.head.version, owner=claimed.owner, now=clock())

        # the counts a graph's tick words its own failure from (`GraphRunner.tree_full`)
        assert (full.value.held, full.value.adding, full.value.limit) == (5, 1, 5)
        assert len(store.tree("root")) == 4 and store.children(ids[1]) == []
        # the lease is still the tick's: it saves the spawn's refusal instead
        [call] = claimed.calls
        refusal = machine.tool_finished(
            claimed.head, claimed.calls, call, output="full", is_error=True, now=clock()
        )
        saved = store.save(refusal, version=claimed.head.version, owner=claimed.owner, now=clock())
        assert saved.status is Status.READY and store.children(ids[1]) == []

    def test_a_session_s_place_counts_its_depth_and_its_tree_s_sessions(
        self, store: Store, clock: Clock
    ) -> None:
        ids = spawn(store, clock, "root", 2)  # a tree of 3
        below, claimed = spawn_change(store, clock, ids[0], 2, limit=5)
        # two more make 5, the tree's limit: allowed
        store.save(below, version=claimed.head.version, owner=claimed.owner, now=clock())
        store.create(new_session("alone", now=clock()), now=clock())  # a tree of its own
        grandchild = below.children[1].id

        assert len(store.tree("root")) == 4  # the root left out
        assert {s: store.place(s) for s in ("root", *ids, grandchild)} == {
            "root": trees.Place(depth=0, held=5),
            ids[0]: trees.Place(depth=1, held=5),
            ids[1]: trees.Place(depth=1, held=5),
            grandchild: trees.Place(depth=2, held=5),
        }
        assert store.place("alone") == trees.Place(depth=0, held=1)
        with pytest.raises(SessionNotFound):
            store.place("nobody")

    def test_two_siblings_spawning_at_once_never_pass_the_tree_s_limit(
        self, store: Store, clock: Clock
    ) -> None:
        # each sibling's tick counted the tree before the other saved (3 of 5: room for 2)
        for round_ in range(20):
            ids = spawn(store, clock, f"r{round_}", 2)
            made = [
                spawn_change(store, clock, child_id, 2, limit=5, owner=f"w{i}")
                for i, child_id in enumerate(ids)
            ]
            saves: list[Callable[[], Any]] = [
                lambda c=change, k=claimed: store.save(
                    c, version=k.head.version, owner=k.owner, now=clock()
                )
                for change, claimed in made
            ]

            results = at_once(saves)

            refused = [r for r in results if isinstance(r, TreeFull)]
            saved = [r for r in results if isinstance(r, Head)]
            assert (len(saved), len(refused)) == (1, 1), f"round {round_}: {results}"
            assert len(store.tree(f"r{round_}")) == 4, f"round {round_}"
            assert "holds 5 sessions, and 2 more" in str(refused[0])
            assert (refused[0].held, refused[0].adding, refused[0].limit) == (5, 2, 5)

    def test_cancelling_the_waiting_parent_cancels_every_child(
        self, store: Store, clock: Clock
    ) -> None:
        ids = spawn(store, clock, "p", 2)

        head = store.request_cancel("p", now=clock(), by="alice")

        assert head.status is Status.CANCELLED
        assert all(store.get(c).cancel_requested for c in ids)
        assert store.to_cancel() == []
        # each child stops at its next tick, and its end wakes nobody
        for child_id in ids:
            assert finish(store, clock, child_id).status is Status.CANCELLED
        assert store.get("p").status is Status.CANCELLED
        assert wakes(store, "p") == 0

    def test_a_parent_cancelled_while_its_children_run_is_charged_their_cost(
        self, store: Store, clock: Clock
    ) -> None:
        ids = spawn(store, clock, "p", 3)
        finish(store, clock, ids[0])  # ended before the cancel: the relay charges it
        own_tokens = store.get("p").tokens

        store.request_cancel("p", now=clock(), by="alice")
        assert store.settle_ended(now=clock()) == ["p"]
        assert store.settle_ended(now=clock()) == []
        for child_id in ids[1:]:  # each ends after its parent: its own save charges it
            assert finish(store, clock, child_id).status is Status.CANCELLED

        head = store.get("p")
        assert head.status is Status.CANCELLED
        assert abs(head.cost_usd - tree_cost(store, "p")) < 1e-9
        assert head.tokens == own_tokens + sum(c.tokens for c in store.children("p"))
        assert store.settle_ended(now=clock()) == []

    def test_a_parent_that_took_its_join_is_never_charged_again(
        self, store: Store, clock: Clock
    ) -> None:
        ids = spawn(store, clock, "p", 2)
        for child_id in ids:
            finish(store, clock, child_id)
        take_join(store, clock, "p")
        assert think(store, "p", reply(content="done"), now=clock()).status is Status.COMPLETED

        assert store.settle_ended(now=clock()) == []
        assert abs(store.get("p").cost_usd - tree_cost(store, "p")) < 1e-9

    def test_a_first_join_asks_the_others_to_stop_and_waits_for_them(
        self, store: Store, clock: Clock
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
