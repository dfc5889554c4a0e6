"""Store.fork: a new session from a chosen step with a patch; the parent never changes."""

from __future__ import annotations

import re

import pytest
from tickwork.fsm import machine
from tickwork.fsm.errors import DeadLetterClosed, ForkOutOfRange, InvalidInput, SessionNotFound
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import CallState, ErrorCode, EventKind, Status
from tickwork.store import Store
from tickwork.store.dead_letters import get_dead_letter, list_dead_letters
from tickwork.store.schema import outbox

from tests.conftest import Clock
from tests.store.conftest import (
    awaiting_calls,
    claim,
    count_rows,
    decision,
    execute,
    reply,
    run_step,
    table_rows,
    think,
    think_change,
)


@pytest.fixture
def parent(store: Store, clock: Clock, session_id: str) -> str:
    """Three steps; step 2 has two calls, the second approved by a person."""
    run_step(store, session_id, 1, now=clock.advance(1))
    think(
        store,
        session_id,
        reply(("read_file", {"path": "a"}), ("danger", {"rm": "b"})),
        now=clock.advance(1),
    )
    [call] = awaiting_calls(store, session_id)
    store.decide(session_id, decision(call, now=clock()), now=clock())
    execute(store, session_id, now=clock.advance(1), output="a says hi")
    execute(store, session_id, now=clock.advance(1), output="b removed")
    run_step(store, session_id, 3, now=clock.advance(1))
    return session_id


def test_fork_from_a_step_applies_the_patch(store: Store, clock: Clock, parent: str) -> None:
    before = store.load(parent)
    patch = ForkPatch(
        system_prompt="Be careful.",
        append_instruction="Try git first.",
        tool_outputs={"s2c1": "nothing was removed"},
        budgets={"max_steps": 200, "max_cost_usd": 50.0},
    )

    head = store.fork(
        parent, new_id="child", from_step=2, patch=patch, by="dave", now=clock.advance(60)
    )

    child = store.load("child")
    assert child.head == head
    assert (head.version, head.status, head.step) == (0, Status.READY, 2)
    assert (head.parent_id, head.fork_step) == (parent, 2)
    assert (head.created_at, head.cancel_requested) == (clock(), False)
    assert (head.budgets.max_steps, head.budgets.max_cost_usd) == (200, 50.0)
    assert head.config["system_prompt"] == "Be careful."
    assert head.config["instructions"] == [{"after_step": 2, "text": "Try git first."}]
    assert head.tokens == sum(s.usage.total for s in before.steps[:2])
    assert child.steps == before.steps[:2]
    assert {o.call_id: o.content for o in child.observations} == {
        "s1c0": "contents of f0001",
        "s2c0": "a says hi",
        "s2c1": "nothing was removed",
    }
    assert [d.call_id for d in child.decisions] == ["s2c1"]
    assert [e.kind for e in child.events] == [EventKind.CREATED, EventKind.FORKED]
    assert child.events[1].data["parent_id"] == parent
    assert child.events[1].data["by"] == "dave"
    assert child.events[1].data["from_step"] == 2
    assert ("child", 0) in [
        (r["session_id"], r["version"]) for r in table_rows(store.engine, outbox)
    ]
    assert store.load(parent) == before

    claimed = claim(store, "child", now=clock())
    assert len(claimed.steps) == 2
    assert claimed.observations["s2c1"].content == "nothing was removed"
    step = think_change(claimed, reply(("read_file", {"path": "c"})), now=clock())
    assert store.save(step, version=0, owner="worker-1", now=clock()).step == 3
    assert store.load(parent) == before


def test_fork_from_step_zero_starts_over(store: Store, clock: Clock, parent: str) -> None:
    head = store.fork(
        parent, new_id="fresh", from_step=0, patch=ForkPatch(), by="dave", now=clock()
    )

    child = store.load("fresh")
    assert (head.step, head.status, head.tokens) == (0, Status.READY, 0)
    assert (child.steps, child.observations, child.decisions) == ((), (), ())


def test_fork_of_a_waiting_session_waits_for_a_person_again(
    store: Store, clock: Clock, session_id: str
) -> None:
    think(
        store, session_id, reply(("read_file", {"path": "a"}), ("danger", {"rm": "b"})), now=clock()
    )
    rows_before = count_rows(store.engine)

    head = store.fork(
        session_id, new_id="child", from_step=1, patch=ForkPatch(), by="dave", now=clock()
    )

    assert (head.status, head.awaiting) == (Status.WAITING_APPROVAL, ("s1c1",))
    child = store.load("child")
    assert [c.state for c in child.steps[0].calls] == [
        CallState.PENDING,
        CallState.AWAITING_APPROVAL,
    ]
    assert count_rows(store.engine)["tickwork_outbox"] == rows_before["tickwork_outbox"]
    [call] = awaiting_calls(store, "child")
    assert store.decide("child", decision(call, now=clock()), now=clock()).status is (
        Status.EXECUTING
    )


def test_fork_with_an_unobserved_call_runs_it(store: Store, clock: Clock, session_id: str) -> None:
    think(
        store, session_id, reply(("read_file", {"path": "a"}), ("search", {"q": "b"})), now=clock()
    )
    execute(store, session_id, now=clock())

    head = store.fork(
        session_id, new_id="child", from_step=1, patch=ForkPatch(), by="dave", now=clock()
    )

    assert head.status is Status.EXECUTING
    assert execute(store, "child", now=clock(), output="found").status is Status.READY
    assert store.load("child").observation("s1c1").content == "found"  # type: ignore[union-attr]


@pytest.mark.parametrize("from_step", [-1, 4, 100])
def test_fork_out_of_range_writes_nothing(
    store: Store, clock: Clock, parent: str, from_step: int
) -> None:
    before = count_rows(store.engine)

    with pytest.raises(ForkOutOfRange, match="between 0 and 3"):
        store.fork(
            parent, new_id="child", from_step=from_step, patch=ForkPatch(), by="dave", now=clock()
        )

    assert count_rows(store.engine) == before


def test_fork_patching_a_call_outside_the_kept_steps_is_refused(
    store: Store, clock: Clock, parent: str
) -> None:
    before = count_rows(store.engine)

    with pytest.raises(InvalidInput, match="s3c0"):
        store.fork(
            parent,
            new_id="child",
            from_step=2,
            patch=ForkPatch(tool_outputs={"s3c0": "x"}),
            by="dave",
            now=clock(),
        )

    assert count_rows(store.engine) == before


def test_fork_of_an_unknown_session_is_not_found(store: Store, clock: Clock) -> None:
    with pytest.raises(SessionNotFound):
        store.fork("nope", new_id="child", from_step=0, patch=ForkPatch(), by="d", now=clock())


def test_forks_record_their_lineage(store: Store, clock: Clock, parent: str) -> None:
    store.fork(parent, new_id="child", from_step=2, patch=ForkPatch(), by="d", now=clock())
    store.fork("child", new_id="grandchild", from_step=1, patch=ForkPatch(), by="e", now=clock())

    assert store.get("grandchild").parent_id == "child"
    assert store.get("child").parent_id == parent
    assert store.get(parent).parent_id is None
    assert store.load("grandchild").steps == store.load(parent).steps[:1]


def test_forking_with_resolve_marks_the_parents_dead_letter_resolved(
    store: Store, clock: Clock, parent: str
) -> None:
    claimed = claim(store, parent, now=clock())
    store.save(
        machine.fail(claimed.head, ErrorCode.LOOP, "looped", now=clock()),
        version=claimed.head.version,
        owner="worker-1",
        now=clock(),
    )
    store.fork(
        parent, new_id="try-1", from_step=3, patch=ForkPatch(), by="dave", now=clock.advance(10)
    )
    assert get_dead_letter(store.engine, parent).resolved_at is None

    store.fork(
        parent,
        new_id="try-2",
        from_step=2,
        patch=ForkPatch(),
        by="dave",
        now=clock.advance(10),
        resolve_dead_letter=True,
    )

    dead = get_dead_letter(store.engine, parent)
    assert dead.resolved_at == clock()
    at = clock().isoformat()
    assert dead.resolution == {
        "state": "forked",
        "by": "dave",
        "at": at,
        "fork": "try-2",
        "forks": [{"fork": "try-2", "by": "dave", "at": at}],
    }
    assert list_dead_letters(store.engine, unresolved=True) == []
    assert store.get(parent).status is Status.FAILED
    # the plain fork resolved nothing, but both are the parent's forks
    assert [f["id"] for f in store.forks(parent)] == ["try-1", "try-2"]


def test_a_second_fork_of_a_dead_letter_is_refused_unless_again(
    store: Store, clock: Clock, parent: str
) -> None:
    claimed = claim(store, parent, now=clock())
    failed = machine.fail(claimed.head, ErrorCode.LOOP, "looped", now=clock())
    store.save(failed, version=claimed.head.version, owner="worker-1", now=clock())
    first_at = clock.advance(10)
    store.fork(
        parent,
        new_id="try-1",
        from_step=2,
        patch=ForkPatch(),
        by="dave",
        now=first_at,
        resolve_dead_letter=True,
    )

    with pytest.raises(
        DeadLetterClosed, match=re.escape(f"forked as try-1 by dave at {first_at.isoformat()}")
    ):
        store.fork(
            parent,
            new_id="try-2",
            from_step=2,
            patch=ForkPatch(),
            by="erin",
            now=clock.advance(10),
            resolve_dead_letter=True,
        )
    assert [f["id"] for f in store.forks(parent)] == ["try-1"]  # nothing was written
    store.fork(
        parent,
        new_id="try-3",
        from_step=2,
        patch=ForkPatch(),
        by="erin",
        now=clock.advance(10),
        resolve_dead_letter=True,
        again=True,
    )

    dead = get_dead_letter(store.engine, parent)
    assert dead.resolution is not None
    assert [(f["fork"], f["by"]) for f in dead.resolution["forks"]] == [
        ("try-1", "dave"),
        ("try-3", "erin"),
    ]
    assert dead.resolution["fork"] == "try-1"


def test_fork_keeps_a_call_that_may_have_run_in_doubt(
    store: Store, clock: Clock, session_id: str
) -> None:
    think(store, session_id, reply(("write_file", {"path": "a"})), now=clock())
    claimed = claim(store, session_id, now=clock(), owner="dead")
    store.start_call(session_id, claimed.head.version, claimed.calls[0], owner="dead", now=clock())

    head = store.fork(
        session_id, new_id="child", from_step=1, patch=ForkPatch(), by="dave", now=clock()
    )

    assert (head.status, head.awaiting) == (Status.WAITING_APPROVAL, ("s1c0",))
    assert store.load("child").steps[0].calls[0].state is CallState.IN_DOUBT
    assert store.load(session_id).steps[0].calls[0].state is CallState.STARTED
