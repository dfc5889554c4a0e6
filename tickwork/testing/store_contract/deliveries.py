"""The `each` join (docs/DESIGN.md section 16) as the `Store` port must keep it: every
child's result reaches the parent once, in one observation, whatever the interleaving of
the children's ends and the parent's waits: a child that ends while the parent suspends
wakes it (whichever of the two saves commits second sees the other), two children ending
at once are delivered together, a wait with results there returns them at once, and a
parent that ended is charged the ends it never had."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tickwork.fsm import deliveries, machine
from tickwork.fsm.errors import InvalidToolArguments
from tickwork.fsm.joins import Join, JoinMode
from tickwork.fsm.transitions import Change
from tickwork.fsm.values import Head, Status
from tickwork.store.port import Store
from tickwork.store.ticks import Claimed
from tickwork.testing.store_contract.base import Contract
from tickwork.testing.store_contract.trees import at_once, finish, spawn, tree_cost, wakes
from tickwork.testing.store_ticks import Clock, claim, execute, reply, think, think_change


def the_join(store: Store, parent_id: str) -> Join:
    [join] = store.joins(parent_id)
    return join


def take_change(store: Store, claimed: Claimed, *, now: datetime) -> Change:
    """What the parent's EXECUTE tick of its `spawn_agents` or `wait_children` call saves,
    as the worker makes it (`deliveries.take`): the results of its `each` join not
    delivered yet, or a wait."""
    head = claimed.head
    call = machine.next_call(claimed.calls)
    assert call is not None, f"{head.id} has no call to run"
    if call.name == deliveries.WAIT_CHILDREN:
        join = deliveries.waited_join(store.joins(head.id), call.arguments or {})
    else:
        found = store.join(head.id, call.call_id)
        assert found is not None
        join = found
    children = store.children(head.id, join.call_id)
    return deliveries.take(head, claimed.calls, call, join, children, now=now, max_chars=20_000)


def take(store: Store, clock: Clock, parent_id: str) -> Head:
    """The parent's EXECUTE tick of its open `spawn_agents` or `wait_children` call."""
    claimed = claim(store, parent_id, now=clock())
    change = take_change(store, claimed, now=clock())
    return store.save(change, version=claimed.head.version, owner=claimed.owner, now=clock())


def wait(store: Store, clock: Clock, parent_id: str) -> Head:
    """The parent thinks a `wait_children` call and runs it."""
    think(store, parent_id, reply((deliveries.WAIT_CHILDREN, {})), now=clock())
    return take(store, clock, parent_id)


def delivered_ids(store: Store, parent_id: str, call_id: str) -> list[str]:
    """The children whose results the call's observation carries, in its order."""
    seen = store.observation(parent_id, call_id)
    assert seen is not None, f"{parent_id} has no observation of {call_id}"
    return [c["id"] for c in json.loads(seen.content)["children"]]


def last_call(store: Store, parent_id: str) -> str:
    return store.load(parent_id).steps[-1].calls[0].call_id


class EachJoinContract(Contract):
    """A spawn's `each` join: deliveries (`Sessions.joins`, the save's `mark`) and the
    relay's charge of an ended parent (`Relay.settle_ended`)."""

    def test_each_result_is_delivered_once_in_the_order_the_children_ended(
        self, store: Store, clock: Clock
    ) -> None:
        ids = spawn(store, clock, "p", 3, mode=JoinMode.EACH)
        spawn_call = the_join(store, "p").call_id
        finish(store, clock, ids[1])
        assert store.get("p").status is Status.EXECUTING  # the first end woke it

        assert take(store, clock, "p").status is Status.READY
        assert delivered_ids(store, "p", spawn_call) == [ids[1]]
        seen = store.observation("p", spawn_call)
        assert seen is not None and json.loads(seen.content)["remaining"] == 2
        for child_id in (ids[2], ids[0]):
            assert wait(store, clock, "p").status is Status.WAITING_CHILDREN
            assert the_join(store, "p").waiting == last_call(store, "p")
            finish(store, clock, child_id)
            assert store.get("p").status is Status.EXECUTING
            assert take(store, clock, "p").status is Status.READY
            assert delivered_ids(store, "p", last_call(store, "p")) == [child_id]

        join = the_join(store, "p")
        assert (join.ends, join.delivered, join.waiting) == ((ids[1], ids[2], ids[0]), 3, None)
        assert wakes(store, "p") == 3
        head = store.get("p")
        assert abs(head.cost_usd - tree_cost(store, "p")) < 1e-9
        # nothing is left to wait for: the model is told so
        think(store, "p", reply((deliveries.WAIT_CHILDREN, {})), now=clock())
        claimed = claim(store, "p", now=clock())
        try:
            take_change(store, claimed, now=clock())
        except InvalidToolArguments as exc:
            assert "no children left" in str(exc)
        else:
            raise AssertionError("a wait with every result delivered must be refused")

    def test_a_wait_with_results_there_returns_them_at_once(
        self, store: Store, clock: Clock
    ) -> None:
        ids = spawn(store, clock, "p", 3, mode=JoinMode.EACH)
        finish(store, clock, ids[0])
        take(store, clock, "p")
        finish(store, clock, ids[1])
        finish(store, clock, ids[2])
        assert store.get("p").status is Status.READY  # nobody waits: nobody is woken

        assert wait(store, clock, "p").status is Status.READY  # not suspended

        assert delivered_ids(store, "p", last_call(store, "p")) == [ids[1], ids[2]]
        assert wakes(store, "p") == 1
        assert the_join(store, "p").delivered == 3

    def test_two_children_ending_at_once_are_each_delivered_once(
        self, store: Store, clock: Clock
    ) -> None:
        for round_ in range(8):
            parent_id = f"p{round_}"
            ids = spawn(store, clock, parent_id, 3, mode=JoinMode.EACH)
            finish(store, clock, ids[0])
            take(store, clock, parent_id)
            assert wait(store, clock, parent_id).status is Status.WAITING_CHILDREN
            claims = [claim(store, c, now=clock(), owner=f"w{i}") for i, c in enumerate(ids[1:])]

            results = at_once(
                [
                    lambda c=c: store.save(
                        think_change(c, reply(content="done"), now=clock()),
                        version=c.head.version,
                        owner=c.owner,
                        now=clock(),
                    )
                    for c in claims
                ]
            )

            assert not any(isinstance(r, BaseException) for r in results), results
            assert store.get(parent_id).status is Status.EXECUTING, f"round {round_}"
            assert wakes(store, parent_id) == 2, f"round {round_}"  # the spawn's, the wait's
            take(store, clock, parent_id)
            got = delivered_ids(store, parent_id, last_call(store, parent_id))
            assert sorted(got) == ids[1:], f"round {round_}: {got}"
            assert the_join(store, parent_id).delivered == 3

    def test_a_child_ending_while_the_parent_suspends_always_wakes_it(
        self, store: Store, clock: Clock
    ) -> None:
        for round_ in range(20):
            parent_id = f"p{round_}"
            ids = spawn(store, clock, parent_id, 2, mode=JoinMode.EACH)
            finish(store, clock, ids[0])
            take(store, clock, parent_id)
            think(store, parent_id, reply((deliveries.WAIT_CHILDREN, {})), now=clock())
            parent = claim(store, parent_id, now=clock(), owner="parent")
            # the parent read the join before the child's end: it has nothing to take
            suspend = take_change(store, parent, now=clock())
            assert suspend.head.status is Status.WAITING_CHILDREN
            child = claim(store, ids[1], now=clock(), owner="child")
            ending = think_change(child, reply(content="done"), now=clock())

            saves: list[Callable[[], Any]] = [
                lambda change=change, claimed=claimed: store.save(
                    change, version=claimed.head.version, owner=claimed.owner, now=clock()
                )
                for change, claimed in ((suspend, parent), (ending, child))
            ]
            results = at_once(saves)

            assert not any(isinstance(r, BaseException) for r in results), results
            join = the_join(store, parent_id)
            head = store.get(parent_id)
            # whichever save committed second woke the parent: never waiting with an end
            assert (head.status, join.pending, join.waiting) == (
                Status.EXECUTING,
                (ids[1],),
                None,
            ), f"round {round_}"
            assert take(store, clock, parent_id).status is Status.READY
            assert delivered_ids(store, parent_id, last_call(store, parent_id)) == [ids[1]]

    def test_a_parent_that_ended_is_charged_the_ends_it_never_had(
        self, store: Store, clock: Clock
    ) -> None:
        ids = spawn(store, clock, "p", 3, mode=JoinMode.EACH)
        finish(store, clock, ids[0])
        take(store, clock, "p")
        finish(store, clock, ids[1])  # ended; the parent never asks for it
        think(store, ids[2], reply(("read_file", {"path": "a"})), now=clock())

        assert think(store, "p", reply(content="enough"), now=clock()).status is Status.COMPLETED
        assert store.to_cancel() == [ids[2]]  # still going in an ended tree
        assert store.settle_ended(now=clock()) == ["p"]
        assert store.settle_ended(now=clock()) == []
        store.request_cancel(ids[2], now=clock())
        assert execute(store, ids[2], now=clock()).status is Status.CANCELLED

        join = the_join(store, "p")
        assert (join.delivered, join.pending) == (3, ())
        head = store.get("p")
        assert abs(head.cost_usd - tree_cost(store, "p")) < 1e-9
        assert store.get(ids[2]).cost_usd > 0  # its own model call, charged up by its end
