"""A graph's fan-out starts child sessions of its tree, as an agent's spawn does
(docs/DESIGN.md section 16, "Limits"): the branches start at once, past the tenant's
quotas, so the same depth and number of sessions bound them. A fan-out past either fails
the session that fanned out (INTERNAL, naming the limit and what to do), its state kept,
and nothing is started; counted by the tick, and again by the store as it inserts them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tickwork.fsm import trees
from tickwork.fsm.errors import StoreUnavailable
from tickwork.fsm.values import ErrorCode, Head, Status
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.runtime import Runtime

from tests.worker.test_tree_limits import Meanwhile
from tests.worker.ticking import Ticks


def _submit(ticks: Ticks, kind: str, given: dict[str, Any]) -> str:
    script = ticks.tmp / "script.json"
    script.write_text('[{"content": "-"}]')
    return ticks.client.submit(f"tests.graphs:{kind}", given, model=f"scripted:{script}").id


def _to_the_end(ticks: Ticks, root: str) -> Head:
    """Tick the root and every session of its tree until the root ends."""
    for _ in range(20):
        head = ticks.run(root)
        if head.status.terminal:
            return head
        for session in ticks.store.tree(root):
            ticks.run(session.id)
    raise AssertionError(f"the tree of {root} did not end")


def _observed(ticks: Ticks, session_id: str, node: str) -> str:
    """The observation of the last run of `node` in the session."""
    session = ticks.client.load(session_id)
    call = [c for step in session.steps for c in step.calls if c.name == node][-1]
    seen = session.observation(call.call_id)
    assert seen is not None and seen.is_error
    return seen.content


def test_a_graph_that_fans_out_again_stops_at_the_trees_size(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trees, "MAX_TREE_SESSIONS", 5)
    # 2 branches a round: 3 sessions, then 5 (the limit, allowed), then 7 (refused)
    root = _submit(ticks, "ROUNDS", {"rounds": 3, "width": 2})

    head = _to_the_end(ticks, root)

    assert (head.status, head.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    assert head.error_message == (
        "the branches of node 'split': the tree holds 5 sessions, and 2 more would pass its "
        "limit of at most 5: fan out to at most 0 branches, or give each branch more of the "
        "work"
    ), head.error_message
    assert len(ticks.store.tree(root)) == 4  # the third round started nothing
    assert head.result["state"]["done"] == 2  # the rounds that ran are kept
    assert head.result["state"]["parts"] == [0, 0, 1, 1]
    assert "at most 5" in _observed(ticks, root, "split")


def test_branches_that_fan_out_again_stop_at_the_deepest_level(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trees, "MAX_DEPTH", 2)
    root = _submit(ticks, "NESTED", {"depth": 3, "width": 1})

    head = _to_the_end(ticks, root)

    assert head.status is Status.FAILED
    # a branch at depth 1, its own at depth 2: no third level
    (branch,) = ticks.store.children(root)
    (deepest,) = ticks.store.children(branch.id)
    assert len(ticks.store.tree(root)) == 2
    assert (deepest.status, deepest.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    assert deepest.error_message == (
        "the branches of node 'deeper': this session is at depth 2 of its tree (its root at "
        "0), and sessions fan out at most 2 levels deep: do the branches' work in this node"
    ), deepest.error_message
    assert deepest.result["state"]["level"] == 2
    assert f"branch {branch.id}" in head.error_message  # the failure is named up the tree


def test_a_sibling_s_fan_out_saved_meanwhile_is_counted_by_the_save(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trees, "MAX_TREE_SESSIONS", 5)
    root = _submit(ticks, "NESTED", {"depth": 2, "width": 2})
    assert ticks.run(root).status is Status.WAITING_CHILDREN  # 3 sessions
    first, second = ticks.store.children(root)
    # the first counts 3 (room for 2), then the second fans out to 2 before the first saves
    racing = Runtime(
        settings=ticks.settings,
        store=Meanwhile(ticks.store, lambda: ticks.run(second.id)),  # type: ignore[arg-type]
        jobs=Jobs(),
        publish_tick=lambda *_: None,
        clock=ticks.rt.clock,
    )
    done = ticks.run(first.id, racing)
    racing.close()

    assert ticks.store.get(second.id).status is Status.WAITING_CHILDREN
    assert (done.status, done.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    assert done.error_message == (
        "the branches of node 'deeper': the tree holds 5 sessions, and 2 more would pass its "
        "limit of at most 5: fan out to at most 0 branches, or give each branch more of the "
        "work"
    ), done.error_message
    assert ticks.store.children(first.id) == []
    assert len(ticks.store.tree(root)) == 4
    assert done.result["state"]["level"] == 1
    assert "at most 5" in _observed(ticks, first.id, "deeper")


def test_a_fan_out_within_the_limits_runs(ticks: Ticks) -> None:
    root = _submit(ticks, "NESTED", {"depth": 2, "width": 3})

    head = _to_the_end(ticks, root)

    assert head.status is Status.COMPLETED, head.error_message
    assert head.result["state"]["leaves"] == [2] * 9
    assert len(ticks.store.tree(root)) == 3 + 9


def test_a_fan_out_the_store_refuses_keeps_the_node_s_model_calls(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node called the model, then fanned out; the tree was found full only as the
    session saved: the provider's charge for the call stays on the node's step and the bill."""
    from tickwork.fsm.values import EventKind

    script = ticks.tmp / "ask.json"
    reply = {"content": "yes", "usage": {"prompt_tokens": 300, "completion_tokens": 12}}
    script.write_text(json.dumps([reply]))
    root = ticks.client.submit(
        "tests.graphs:ASK_AROUND", {"size": 10}, model=f"scripted:{script}", price=(1.0, 2.0)
    ).id
    # the tick found room (a sibling's fan-out not saved yet), the store finds none
    monkeypatch.setattr(trees, "MAX_TREE_SESSIONS", 2)
    monkeypatch.setattr(trees, "no_room", lambda *_, **__: None)
    done = ticks.run(root)

    assert (done.status, done.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    assert done.error_message == (
        "the branches of node 'split': the tree holds 1 sessions, and 2 more would pass its "
        "limit of at most 2: fan out to at most 1 branches, or give each branch more of the "
        "work"
    ), done.error_message
    assert ticks.store.tree(root) == []
    session = ticks.client.load(root)
    (called,) = [e for e in session.events if e.kind is EventKind.MODEL_CALLED]
    assert called.data["cost_usd"] > 0
    assert (done.tokens, done.cost_usd) == (312, pytest.approx(called.data["cost_usd"]))
    (split,) = [s for s in session.steps if any(c.name == "split" for c in s.calls)]
    assert (split.usage.prompt_tokens, split.cost_usd) == (300, pytest.approx(done.cost_usd))
    assert "at most 2" in _observed(ticks, root, "split")


class _Blip:
    """The store, whose first count of a tree finds the database away."""

    def __init__(self, store: Any) -> None:
        self.store, self.blips = store, 1

    def place(self, session_id: str) -> trees.Place:
        if self.blips:
            self.blips -= 1
            raise StoreUnavailable("the database is not answering")
        return self.store.place(session_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_a_fan_out_that_cannot_count_its_tree_runs_again(ticks: Ticks) -> None:
    """A database blip as the fan-out counts its tree: the tick fails, to run again, and the
    session is kept as it was (it failed INTERNAL, the node's work lost, when the count
    was taken for the node's own failure)."""
    root = _submit(ticks, "NESTED", {"depth": 1, "width": 2})
    blipping = Runtime(
        settings=ticks.settings,
        store=_Blip(ticks.store),  # type: ignore[arg-type]
        jobs=Jobs(),
        publish_tick=lambda *_: None,
        clock=ticks.rt.clock,
    )
    try:
        with pytest.raises(StoreUnavailable):
            ticks.run(root, blipping)
    finally:
        blipping.close()
    assert ticks.store.get(root).status is Status.EXECUTING
    # the relay offers it again when the failed tick's lease has run out
    later = ticks.runtime(lambda: datetime.now(UTC) + timedelta(hours=1))
    try:
        assert ticks.run(root, later).status is Status.WAITING_CHILDREN
    finally:
        later.close()
    assert len(ticks.store.children(root)) == 2
