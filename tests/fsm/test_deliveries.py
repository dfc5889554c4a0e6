"""The pure side of the `each` join (docs/DESIGN.md section 16): which join a
`wait_children` call waits on, what a delivery reports and charges, a wait, and a model
waiting again and again is not in a loop."""

from __future__ import annotations

import json

import pytest
from tickwork.fsm import deliveries, machine, trees
from tickwork.fsm.errors import InvalidToolArguments
from tickwork.fsm.joins import Join, JoinMark, JoinMode
from tickwork.fsm.values import CallState, ModelReply, ProposedCall, Status, ToolCall, Usage

from tests.fsm.test_trees import NOW, head


def _call(call_id: str, name: str = deliveries.WAIT_CHILDREN) -> ToolCall:
    return ToolCall(
        call_id=call_id,
        step=int(call_id[1]),
        index=0,
        name=name,
        arguments={},
        raw_arguments="{}",
        fingerprint="f",
    )


def _join(call_id: str, **fields: object) -> Join:
    values: dict[str, object] = {
        "parent_id": "root",
        "call_id": call_id,
        "mode": JoinMode.EACH,
        "expected": 3,
    }
    values.update(fields)
    return Join.model_validate(values)


def test_a_wait_takes_the_latest_each_join_with_results_to_come_or_the_one_named() -> None:
    done = _join("s1c0", ended=3, delivered=3, ends=("a", "b", "c"))
    older = _join("s2c0")
    latest = _join("s3c0")
    everything = _join("s4c0", mode=JoinMode.ALL)
    joins = [done, older, latest, everything]

    assert deliveries.waited_join(joins, {}) == latest
    assert deliveries.waited_join(joins, {"spawn_call": "s2c0"}) == older


@pytest.mark.parametrize(
    ("joins", "arguments", "said"),
    [
        ([], {}, "no children left to wait for"),
        ([_join("s1c0", mode=JoinMode.ALL)], {}, "no children left to wait for"),
        ([_join("s1c0", delivered=3)], {}, "no children left to wait for"),
        ([_join("s1c0")], {"spawn_call": "s9c0"}, "no spawn_agents call 's9c0'"),
        ([_join("s1c0", mode=JoinMode.FIRST)], {"spawn_call": "s1c0"}, "joins 'first'"),
        ([_join("s1c0", delivered=3)], {"spawn_call": "s1c0"}, "every child"),
        ([_join("s1c0")], {"spawn_call": 3}, "must be the id"),
        ([_join("s1c0")], {"call": "s1c0"}, "unknown arguments call"),
    ],
)
def test_a_wait_with_nothing_to_wait_for_is_refused_saying_why(
    joins: list[Join], arguments: dict[str, object], said: str
) -> None:
    with pytest.raises(InvalidToolArguments, match=said):
        deliveries.waited_join(joins, arguments)


def test_a_delivery_reports_the_ends_charges_them_and_moves_the_join_on() -> None:
    parent = head(status=Status.EXECUTING, step=2, cost_usd=0.1, tokens=100)
    call = _call("s2c0")
    join = _join("s1c0", ended=3, delivered=1, ends=("c1", "c0", "c2"))
    children = [
        head(id="c0", status=Status.FAILED, error_code="LOOP", cost_usd=0.2, tokens=50),
        head(id="c2", status=Status.COMPLETED, final_answer="ok", cost_usd=0.3, tokens=70),
    ]

    change = deliveries.delivered(
        parent, [call], call, join, trees.child_ends(children), now=NOW, max_chars=20_000
    )

    assert change.head.status is Status.READY
    assert change.head.cost_usd == pytest.approx(0.6)
    assert change.head.tokens == 220
    assert change.call_states == (("s2c0", CallState.DONE),)
    assert change.mark == JoinMark(parent_id="root", call_id="s1c0", seen=1, delivered=3)
    [seen] = change.observations
    report = json.loads(seen.content)
    assert [c["id"] for c in report["children"]] == ["c0", "c2"]
    assert (report["join"], report["spawn_call"], report["remaining"]) == ("each", "s1c0", 0)
    assert not seen.is_error
    [joined] = [e for e in change.events if e.kind.value == "children_joined"]
    assert joined.data["cost_usd"] == pytest.approx(0.5)


def test_the_spawn_s_first_result_says_how_to_get_the_next() -> None:
    parent = head(status=Status.EXECUTING, step=1)
    call = _call("s1c0", trees.SPAWN_AGENTS)
    join = _join("s1c0", ended=1, ends=("c1",))
    children = [head(id="c1", status=Status.CANCELLED)]

    change = deliveries.delivered(
        parent, [call], call, join, trees.child_ends(children), now=NOW, max_chars=20_000
    )

    [seen] = change.observations
    report = json.loads(seen.content)
    assert report["remaining"] == 2
    assert deliveries.WAIT_CHILDREN in report["next"]
    assert seen.is_error  # none of what it carries completed


def test_a_wait_suspends_the_parent_and_marks_the_join_waited_on() -> None:
    parent = head(status=Status.EXECUTING, step=2)
    call = _call("s2c0")

    change = deliveries.waiting(parent, call, _join("s1c0", delivered=1), now=NOW)

    assert change.head.status is Status.WAITING_CHILDREN
    assert change.mark == JoinMark(
        parent_id="root", call_id="s1c0", seen=1, delivered=1, waiting="s2c0"
    )
    assert change.observations == ()


def test_an_each_spawn_waits_on_its_own_call() -> None:
    parent = head(status=Status.EXECUTING, step=1)
    call = _call("s1c0", trees.SPAWN_AGENTS)
    join = _join("s1c0", expected=1)

    change = trees.spawned(parent, call, join, [head(id="c0", parent_id="root")], now=NOW)

    assert change.join is not None and change.join.waiting == "s1c0"
    assert trees.parse_spawn({"children": [{"role": "x"}], "join": "each"}).join is JoinMode.EACH


def test_waiting_again_and_again_is_not_a_loop() -> None:
    parent = head(
        status=Status.READY,
        budgets=head().budgets.model_copy(update={"max_consecutive_repeats": 2}),
    )
    wait = ModelReply(
        content="next",
        calls=(ProposedCall(name=deliveries.WAIT_CHILDREN, arguments="{}"),),
        usage=Usage(prompt_tokens=1, completion_tokens=1),
    )
    recent: list[str] = []
    for n in range(4):
        change = machine.think(
            parent.model_copy(update={"step": n}),
            wait,
            now=NOW,
            cost_usd=0.0,
            trace_id="t",
            recent=recent,
            rules={},
        )
        assert change.head.status is Status.EXECUTING, n
        assert change.step is not None
        recent.append(change.step.fingerprint)
