"""A hostile model in a session tree (docs/DESIGN.md section 16, "Limits"): its children
start at once, past the tenant's `max_in_flight` and `max_queued`, so a tree is bounded by
a depth and a number of sessions; a spawn past either is an error observation saying so,
and nothing is started."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm import trees
from tickwork.fsm.values import Head, Status
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.runtime import Runtime

from tests.worker.ticking import Ticks


def _spawning(ticks: Ticks, children: int) -> str:
    """A scripted model, shared by a root and every child of it: each session spawns
    `children` children (as the same model), then answers."""
    child = {"role": "helper", "input": {"task": "split again"}}
    spawn = {"name": "spawn_agents", "arguments": {"children": [child] * children}}
    path = ticks.tmp / "spawner.json"
    path.write_text(json.dumps([{"content": "split", "tool_calls": [spawn]}, {"content": "ok"}]))
    return f"scripted:{path}"


def _spawn_output(ticks: Ticks, head: Head) -> tuple[bool, str]:
    session = ticks.client.load(head.id)
    call = next(c for step in session.steps for c in step.calls if c.name == "spawn_agents")
    seen = session.observation(call.call_id)
    assert seen is not None
    return seen.is_error, seen.content


def _spawned(ticks: Ticks, monkeypatch: pytest.MonkeyPatch, *, children: int, most: int) -> Head:
    """The root of a tree of at most `most` sessions, whose every session spawns `children`,
    run until it waits on its own."""
    monkeypatch.setattr(trees, "MAX_TREE_SESSIONS", most)
    root = ticks.client.submit("tests.jobs:TREE", {}, model=_spawning(ticks, children))
    assert ticks.run(root.id).status is Status.WAITING_CHILDREN
    return root


def test_a_spawn_below_the_deepest_level_is_refused(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trees, "MAX_DEPTH", 3)
    head = ticks.client.submit("tests.jobs:TREE", {}, model=_spawning(ticks, 1))
    chain = [head]
    for _ in range(trees.MAX_DEPTH):
        assert ticks.run(chain[-1].id).status is Status.WAITING_CHILDREN
        (child,) = ticks.store.children(chain[-1].id)
        chain.append(child)
    deepest = ticks.run(chain[-1].id)  # at depth MAX_DEPTH: its spawn is refused
    assert deepest.status is Status.COMPLETED
    assert ticks.store.children(deepest.id) == []
    is_error, output = _spawn_output(ticks, deepest)
    assert is_error
    assert "depth 3" in output and "at most 3" in output and "yourself" in output, output


def test_a_spawn_that_would_pass_the_trees_size_is_refused(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _spawned(ticks, monkeypatch, children=3, most=5)  # 4 sessions
    first = ticks.store.children(root.id)[0]
    done = ticks.run(first.id)  # 3 more would make 7
    assert done.status is Status.COMPLETED
    assert ticks.store.children(first.id) == []
    is_error, output = _spawn_output(ticks, done)
    assert is_error
    assert "4 sessions" in output and "at most 5" in output, output
    assert len(ticks.store.tree(root.id)) == 3


def test_a_spawn_that_fills_the_tree_to_its_size_starts_and_one_past_it_is_refused(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _spawned(ticks, monkeypatch, children=2, most=5)  # 3 sessions
    first, second = ticks.store.children(root.id)
    assert ticks.run(first.id).status is Status.WAITING_CHILDREN  # 2 more: 5, the limit
    assert len(ticks.store.children(first.id)) == 2
    done = ticks.run(second.id)  # 2 more would make 7
    assert done.status is Status.COMPLETED
    assert ticks.store.children(second.id) == []
    is_error, output = _spawn_output(ticks, done)
    assert is_error
    assert output == (  # counted by the tick (`Store.place`), not at the save
        "spawn_agents: the tree holds 5 sessions, and 2 more would pass its limit of at most "
        "5: spawn at most 0, or do the work yourself"
    ), output


class Meanwhile:
    """The real store, but a count of a tree (`place`) runs `meanwhile` once after it: a
    tick that counted its tree, then another spawn (or fan-out) in the tree saved before
    its own save."""

    def __init__(self, store: Any, meanwhile: Callable[[], object]) -> None:
        self._store, self._meanwhile = store, [meanwhile]

    def place(self, session_id: str) -> trees.Place:
        found = self._store.place(session_id)
        while self._meanwhile:
            self._meanwhile.pop()()
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_sibling_s_spawn_saved_meanwhile_is_counted_by_the_save(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _spawned(ticks, monkeypatch, children=2, most=5)  # 3 sessions
    first, second = ticks.store.children(root.id)
    # the first counts 3 (room for 2), then the second spawns its 2 before the first saves
    racing = Runtime(
        settings=ticks.settings,
        store=Meanwhile(ticks.store, lambda: ticks.run(second.id)),  # type: ignore[arg-type]
        jobs=Jobs(),
        publish_tick=lambda *_: None,
        clock=ticks.rt.clock,
    )
    done = ticks.run(first.id, racing)

    assert done.status is Status.COMPLETED, done.error_message  # told, it answered
    assert ticks.store.get(second.id).status is Status.WAITING_CHILDREN
    assert ticks.store.children(first.id) == []
    assert len(ticks.store.tree(root.id)) == 4
    is_error, output = _spawn_output(ticks, done)
    assert is_error
    assert output == (
        "the tree holds 5 sessions, and 2 more would pass its limit of at most 5: spawn at "
        "most 0, or do the work yourself"
    ), output
    racing.close()


def test_a_tree_within_the_limits_spawns(ticks: Ticks, tmp_path: Path) -> None:
    root = ticks.client.submit("tests.jobs:TREE", {}, model=_spawning(ticks, trees.MAX_CHILDREN))
    assert ticks.run(root.id).status is Status.WAITING_CHILDREN
    assert len(ticks.store.children(root.id)) == trees.MAX_CHILDREN


def test_a_spawn_while_children_run_shares_only_what_they_do_not_hold(ticks: Ticks) -> None:
    """With join `each` the parent goes on while its other children run, and may spawn
    again: the new children share what is left once the running ones' budgets are held
    back, so the tree still spends at most the root's budgets."""
    quick = ticks.tmp / "quick.json"
    quick.write_text(json.dumps([{"content": "done"}]))
    child = {"role": "helper", "input": {"task": "look"}, "model": f"scripted:{quick}"}
    first = {"children": [child, child], "join": "each"}
    again = {"children": [child]}
    parent = ticks.tmp / "parent.json"
    parent.write_text(
        json.dumps(
            [
                {"content": "two", "tool_calls": [{"name": "spawn_agents", "arguments": first}]},
                {
                    "content": "one more",
                    "tool_calls": [{"name": "spawn_agents", "arguments": again}],
                },
                {"content": "ok"},
            ]
        )
    )
    root = ticks.client.submit(
        "tests.jobs:TREE",
        {},
        model=f"scripted:{parent}",
        budgets={"max_tokens": 100_000, "max_cost_usd": 10.0},
    )
    assert ticks.run(root.id).status is Status.WAITING_CHILDREN
    a, b = ticks.store.children(root.id)
    assert b.budgets.max_tokens > 45_000 and b.budgets.max_cost_usd == 5.0
    assert ticks.run(a.id).status is Status.COMPLETED  # b stays ready: still running
    assert ticks.run(root.id).status is Status.WAITING_CHILDREN  # its second spawn
    (c,) = [k for k in ticks.store.children(root.id) if k.id not in (a.id, b.id)]
    woken = ticks.store.get(root.id)
    assert c.budgets.max_tokens <= 100_000 - woken.tokens - b.budgets.max_tokens
    assert c.budgets.max_cost_usd <= 10.0 - woken.cost_usd - b.budgets.max_cost_usd + 1e-9
