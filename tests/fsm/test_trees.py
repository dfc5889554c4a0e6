"""The pure side of session trees: what a spawn may ask, each child's budgets, the join's
observation (docs/DESIGN.md section 16)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from tickwork.fsm import machine, trees
from tickwork.fsm.errors import InvalidToolArguments
from tickwork.fsm.joins import Join, JoinMode
from tickwork.fsm.values import RUNTIME_LEVEL, Budgets, CallState, Head, Status, ToolCall

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def head(**fields: object) -> Head:
    values: dict[str, object] = {
        "id": "root",
        "kind": "repair",
        "created_at": NOW,
        "updated_at": NOW,
        "model": "m",
        "budgets": Budgets(max_cost_usd=1.0, max_tokens=10_000, deadline_s=3600),
    }
    values.update(fields)
    return Head.model_validate(values)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({}, "children"),
        # an empty list read "give children", as if none were given
        ({"children": []}, 'children" is empty: nothing to start'),
        ({"children": [{"input": {}}]}, "role"),
        ({"children": [{"role": "x", "share": 0}]}, "share"),
        ({"children": [{"role": "x", "share": True}]}, "share"),
        ({"children": [{"role": "x", "share": 0.7}, {"role": "y", "share": 0.7}]}, "add up"),
        ({"children": [{"role": "x", "input": "go"}]}, "input"),
        ({"children": [{"role": "x", "budget": 3}]}, "unknown keys budget"),
        ({"children": [{"role": "x"}], "join": "some"}, "join"),
        ({"children": [{"role": "x"}] * (trees.MAX_CHILDREN + 1)}, "at most"),
    ],
)
def test_a_bad_spawn_is_refused_naming_what_is_wrong(
    arguments: dict[str, object], named: str
) -> None:
    with pytest.raises(InvalidToolArguments, match=named):
        trees.parse_spawn(arguments)


def test_children_without_a_share_split_what_the_given_shares_leave() -> None:
    spawn = trees.parse_spawn(
        {"children": [{"role": "a", "share": 0.5}, {"role": "b"}, {"role": "c"}], "join": "first"}
    )
    assert spawn.join is JoinMode.FIRST
    assert trees.shares(spawn.children) == [0.5, 0.25, 0.25]


def test_a_child_cannot_spend_past_the_root_s_remaining_cost() -> None:
    root = head(cost_usd=0.6, tokens=4_000)
    spent = Budgets(max_cost_usd=5.0, max_tokens=1_000_000)  # a role that asks for more

    child = trees.child_budgets(root, 1.0, now=NOW + timedelta(seconds=600), base=spent)

    assert child.max_cost_usd == pytest.approx(0.4)
    assert child.max_tokens == 6_000
    assert child.deadline_s == pytest.approx(3000)
    # and shares of it: the children together get at most what is left
    halves = [trees.child_budgets(root, 0.5, now=NOW, base=root.budgets) for _ in range(2)]
    assert sum(b.max_cost_usd for b in halves) == pytest.approx(0.4)


def test_a_child_of_a_spent_parent_gets_a_budget_its_first_check_stops() -> None:
    root = head(cost_usd=1.5)
    child = trees.child_budgets(root, 1.0, now=NOW, base=root.budgets)
    assert 0 < child.max_cost_usd < 1e-6


def test_what_an_each_joins_children_hold_is_not_given_again() -> None:
    """Running children hold their budgets, ended ones not yet delivered what they spent;
    delivered ones are in the parent's own spending, and closed joins hold nothing."""
    budgets = Budgets(max_cost_usd=0.2, max_tokens=2_000)

    def kid(name: str, call: str, **fields: object) -> Head:
        return head(id=name, parent_id="root", spawn_call=call, budgets=budgets, **fields)

    kids = [
        kid("taken", "s1c0", status=Status.COMPLETED, tokens=500, cost_usd=0.05),
        kid("ended", "s1c0", status=Status.COMPLETED, tokens=300, cost_usd=0.03),
        kid("running", "s1c0"),
        kid("of-all", "s2c0"),
    ]
    joins = [
        Join(parent_id="root", call_id="s1c0", mode=JoinMode.EACH, expected=3, ended=2,
             ends=("taken", "ended"), delivered=1),
        Join(parent_id="root", call_id="s2c0", mode=JoinMode.ALL, expected=1),
    ]  # fmt: skip
    held = trees.held_back(joins, kids)
    assert held.tokens == 2_300 and held.cost_usd == pytest.approx(0.23)
    root = head(cost_usd=0.1, tokens=1_000)
    child = trees.child_budgets(root, 1.0, now=NOW, base=root.budgets, held=held)
    assert child.max_tokens == 10_000 - 1_000 - 2_300
    assert child.max_cost_usd == pytest.approx(1.0 - 0.1 - 0.23)


def test_a_parent_without_a_cost_budget_gives_none() -> None:
    root = head(budgets=Budgets(max_cost_usd=0))
    assert not trees.child_budgets(root, 0.5, now=NOW, base=root.budgets).limits_cost


def _spawn_call() -> ToolCall:
    return ToolCall(
        call_id="s1c0",
        step=1,
        index=0,
        name=trees.SPAWN_AGENTS,
        arguments={},
        raw_arguments="{}",
        fingerprint="f",
    )


def test_the_join_s_observation_reports_each_child_and_charges_their_cost() -> None:
    parent = head(status=Status.EXECUTING, step=1, cost_usd=0.1, tokens=100)
    call = _spawn_call()
    join = Join(parent_id="root", call_id="s1c0", expected=2, ended=2, cost_usd=0.3, tokens=900)
    children = [
        head(id="c0", status=Status.COMPLETED, final_answer="ok", result={"patch": "p"}),
        head(id="c1", status=Status.FAILED, error_code="LOOP", error_message="looped"),
    ]

    change = trees.joined(
        parent, [call], call, join, trees.child_ends(children), now=NOW, max_chars=20_000
    )

    assert change.head.status is Status.READY
    assert change.head.cost_usd == pytest.approx(0.4)
    assert change.head.tokens == 1000
    assert change.call_states == (("s1c0", CallState.DONE),)
    [seen] = change.observations
    report = json.loads(seen.content)
    assert [c["status"] for c in report["children"]] == ["completed", "failed"]
    assert report["children"][0]["patch"] == {"chars": 1, "files_changed": []}
    assert "result" not in report["children"][0]
    assert report["children"][1]["error"] == "LOOP: looped"
    assert not seen.is_error  # a failed child is the parent's to act on


def test_the_join_s_observation_is_capped_as_a_tool_s_output_and_names_no_patch() -> None:
    parent = head(status=Status.EXECUTING, step=1)
    call = _spawn_call()
    n = trees.MAX_CHILDREN
    join = Join(parent_id="root", call_id="s1c0", expected=n, ended=n)
    patch = "diff --git a/calc.py b/calc.py\n" + "+x = 1\n" * 285_000  # ~2,000,000 chars
    children = [
        head(
            id=f"c{i:02d}",
            status=Status.COMPLETED,
            final_answer="a" * 10_000,
            result={"patch": patch, "files_changed": ["calc.py"], "outcome": "repaired"},
        )
        for i in range(n)
    ]

    change = trees.joined(
        parent, [call], call, join, trees.child_ends(children), now=NOW, max_chars=20_000
    )

    [seen] = change.observations
    assert len(seen.content) <= 20_000 + 100  # the cap, and the tools' cut note
    assert "characters cut from the middle of" in seen.content
    assert "+x = 1" not in seen.content  # each patch's size only: adopt_patch reads it
    first = seen.content[: seen.content.index("[...")]
    assert f'"chars": {len(patch)}' in first and '"calc.py"' in first
    assert '"outcome": "repaired"' in first


def test_a_child_s_lineage_puts_it_in_its_parent_s_tree_and_tenant() -> None:
    parent = head(id="p", root_id="r", tenant="team-b", submitted_by="bob", runtime_level=3, step=1)
    fields = trees.lineage(parent, _spawn_call(), "explorer")
    child = head(id="c", **fields)
    assert (child.parent_id, child.root_id, child.spawn_call, child.role) == (
        "p",
        "r",
        "s1c0",
        "explorer",
    )
    assert (child.tenant, child.submitted_by, child.runtime_level) == ("team-b", "bob", 3)
    assert trees.lineage(head(id="p"), _spawn_call(), "x")["root_id"] == "p"


def test_a_child_of_a_session_from_before_trees_needs_the_level_trees_came_with() -> None:
    # a session stored by a level-1 release spawns after the upgrade: a level-1 worker
    # must not end its child, whose end it would not count on the join
    parent = head(id="p", runtime_level=1, step=1)
    assert trees.lineage(parent, _spawn_call(), "explorer")["runtime_level"] == RUNTIME_LEVEL
    assert RUNTIME_LEVEL >= 2


def test_a_waiting_parent_is_cancelled_at_once() -> None:
    parent = head(status=Status.WAITING_CHILDREN, step=1)
    change = machine.request_cancel(parent, [_spawn_call()], now=NOW, by="alice")
    assert change.head.status is Status.CANCELLED
    assert change.call_states == (("s1c0", CallState.DONE),)


def test_a_spawn_may_fill_its_tree_to_the_limit_from_above_the_deepest_level() -> None:
    most, deepest = trees.MAX_TREE_SESSIONS, trees.MAX_DEPTH
    assert trees.no_room(trees.Place(depth=deepest - 1, held=most - 2), 2) is None
    assert trees.no_room(trees.Place(depth=0, held=most - 2), 3) == (
        f"the tree holds {most - 2} sessions, and 3 more would pass its limit of at most "
        f"{most}: spawn at most 2, or do the work yourself"
    )
    assert trees.no_room(trees.Place(depth=deepest, held=1), 1, worded=trees.FAN_OUTS) == (
        f"this session is at depth {deepest} of its tree (its root at 0), and sessions fan "
        f"out at most {deepest} levels deep: do the branches' work in this node"
    )
