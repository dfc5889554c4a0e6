"""Session trees through real workers (docs/DESIGN.md section 16): a session spawns
children with `spawn_agents`, waits in `waiting_children`, and is woken exactly once with
every child's outcome, when the publish of the wake-up is lost and when a worker is
killed in the middle of a child."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tickwork.fsm.values import EventKind, Head, Status

from tests.tasks.conftest import Deployment, kill, owner_pid, stop
from tickwork.testing import until, write_script

TREE_KIND = "tests.jobs:TREE"
#: USD per million prompt and completion tokens: every scripted reply below costs
#: 1000 * 1 + 100 * 10 = 2000 millionths
PRICE = (1.0, 10.0)
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
REPLY_COST = 0.002
#: a child's last model call, long enough to queue another session's tick during it
LAST_S = 4.0
#: a session that holds a solo worker while the test kills it
BLOCK_S = 60.0
#: a parent's model call after its wake-up, long enough for a second worker to start and
#: a child to end on it meanwhile
THINK_S = 20.0


def _child(deployment: Deployment, name: str, replies: list[dict[str, Any]]) -> dict[str, Any]:
    model = deployment.script([{**r, "usage": USAGE} for r in replies], name=name)
    return {
        "role": "explorer",
        "input": {"task": name, "sink": str(deployment.sink)},
        "model": model,
    }


def _submit_parent(deployment: Deployment, replies: list[dict[str, Any]], **kw: Any) -> str:
    """A parent session whose scripted `replies` each cost REPLY_COST; its id."""
    return deployment.client.submit(
        TREE_KIND,
        {"sink": str(deployment.sink)},
        model=deployment.script([{**r, "usage": USAGE} for r in replies], name="parent"),
        price=PRICE,
        **kw,
    ).id


def _parent(deployment: Deployment, children: list[dict[str, Any]], **kw: Any) -> str:
    replies = [
        {
            "content": "split",
            "tool_calls": [{"name": "spawn_agents", "arguments": {"children": children}}],
        },
        {"content": "all joined"},
    ]
    return _submit_parent(deployment, replies, **kw)


def _ended(deployment: Deployment, session_id: str, timeout: float) -> None:
    until(
        lambda: deployment.client.get(session_id).status.terminal,
        timeout=timeout,
        what=f"session {session_id} to end",
    )


def _woken(deployment: Deployment, session_id: str) -> int:
    return sum(
        1
        for _, e in deployment.client.store.events_after(session_id)
        if e.kind is EventKind.CHILDREN_JOINED and e.data.get("woken")
    )


def _three_children(
    deployment: Deployment, sleep_s: float = 0.0, last_s: float = 0.0
) -> list[dict[str, Any]]:
    """Three children: one answers, one (`works`) runs `idem_effect` for `sleep_s` and
    answers after `last_s` of its model's time, one fails."""
    return [
        _child(deployment, "answers", [{"content": "found it"}]),
        _child(
            deployment,
            "works",
            [
                {
                    "content": "try",
                    "tool_calls": [
                        {"name": "idem_effect", "arguments": {"value": "w", "sleep_s": sleep_s}}
                    ],
                },
                {"content": "fixed", "delay_s": last_s},
            ],
        ),
        _child(deployment, "fails", [{"error": {"transient": False, "message": "no luck"}}]),
    ]


def _check_tree(deployment: Deployment, root_id: str) -> None:
    client = deployment.client
    root = client.get(root_id)
    assert root.status is Status.COMPLETED, (root.status, root.error_message)
    children = client.store.children(root_id)
    assert [c.status for c in children] == [Status.COMPLETED, Status.COMPLETED, Status.FAILED]
    assert {c.root_id for c in children} == {root_id}
    assert _woken(deployment, root_id) == 1
    observed = client.load(root_id).observation("s1c0")
    assert observed is not None and not observed.is_error
    report = json.loads(observed.content)
    assert [c["id"] for c in report["children"]] == [c.id for c in children]
    assert report["children"][0]["answer"] == "found it"
    assert report["children"][2]["error"].startswith("MODEL_ERROR")
    # the tree's cost is the root's: its own two replies and its children's three
    spent = sum(c.cost_usd for c in children)
    assert spent == pytest.approx(3 * REPLY_COST)
    assert root.cost_usd == pytest.approx(2 * REPLY_COST + spent)
    assert root.cost_usd <= root.budgets.max_cost_usd


def test_a_session_spawns_three_children_and_is_woken_once_with_their_outcomes(
    deployment: Deployment,
) -> None:
    root_id = _parent(deployment, _three_children(deployment))
    # no relay: the children's first ticks and the parent's wake-up are published by the
    # workers that saved them, not left for the relay to find
    with deployment.worker(concurrency=2, relay=False):
        _ended(deployment, root_id, 90)
    _check_tree(deployment, root_id)


def test_a_wake_up_whose_publish_is_lost_is_published_by_the_relay(
    deployment: Deployment,
) -> None:
    # every publish after a commit is dropped, as if each worker died right after its
    # save: the outbox rows written with the saves (the children's, the parent's wake-up)
    # are all the relay has to go on
    deployment.settings = deployment.settings.model_copy(update={"drop_publish_rate": 1.0})
    root_id = _parent(deployment, _three_children(deployment))
    with deployment.worker(concurrency=2):
        _ended(deployment, root_id, 120)
    _check_tree(deployment, root_id)


@pytest.mark.slow
def test_a_worker_killed_in_a_child_leaves_one_wake_up_and_every_result_once(
    deployment: Deployment,
) -> None:
    root_id = _parent(deployment, _three_children(deployment, sleep_s=8.0))
    first = deployment.spawn()
    try:
        until(lambda: deployment.sink_lines("idem.log"), timeout=90, what="the child's tool")
        kill(first)
    finally:
        stop(first)
    second = deployment.spawn()
    try:
        _ended(deployment, root_id, 150)
    finally:
        stop(second)
    _check_tree(deployment, root_id)
    assert len(deployment.sink_lines("idem.log")) == 2  # the killed run, and the one after


@pytest.mark.slow
def test_a_worker_killed_after_the_last_childs_end_leaves_one_wake_up(
    deployment: Deployment,
) -> None:
    """A worker dies after the last child's end is saved, before the parent's woken tick.

    The wake-up itself cannot be missed: the child's terminal save counts it on the join
    and moves the parent to `executing` with its outbox row in one transaction, so no
    state has the end saved and the parent not woken. What a death can lose is after the
    commit: the publish of the parent's tick (`ended_child`), or the tick's message once
    published. A death between the commit and the publish needs a hook in the worker to
    land deterministically; the lost publish is what it leaves, and the drop_publish test
    above loses every publish after a commit. This test kills the worker after both: the
    last child's end is visible in the database and the parent's tick is queued behind a
    blocking session that the same (solo) worker runs, so the parent's woken tick has not
    started, and it runs on a fresh worker: one wake-up, every result once."""
    client = deployment.client
    root_id = _parent(deployment, _three_children(deployment, sleep_s=0.5, last_s=LAST_S))
    first = deployment.spawn()
    second = None
    try:
        until(lambda: len(client.store.children(root_id)) == 3, timeout=90, what="the spawn")
        works = client.store.children(root_id)[1].id
        # the last child to end (three ticks to the others' one) is in its last model call
        until(
            lambda: (
                deployment.sink_lines("idem.log")
                and client.get(works).status is Status.READY
                and owner_pid(deployment, works) == first.pid
            ),
            timeout=90,
            what="the last child's last model call",
        )
        # queued now, before the child's end publishes its parent's tick: the solo worker
        # takes it next, and holds it while it is killed
        blocker = deployment.submit([{"content": "blocks", "delay_s": BLOCK_S}])
        assert not client.get(works).status.terminal, f"the child ended within {LAST_S}s"
        _ended(deployment, works, LAST_S + 60)
        until(
            lambda: owner_pid(deployment, blocker) == first.pid,
            timeout=30,
            what="the worker to take the blocking session after the child's end",
        )
        woken = client.get(root_id)
        assert woken.status is Status.EXECUTING and _woken(deployment, root_id) == 1
        kill(first)
        # the parent's woken tick never ran: the worker ran the blocking session's
        assert _saved(client.get(root_id)) == _saved(woken)
        client.cancel(blocker, by="the test")
        second = deployment.spawn()
        _ended(deployment, root_id, 150)
    finally:
        stop(first)
        if second is not None:
            stop(second)
    _check_tree(deployment, root_id)
    assert len(deployment.sink_lines("idem.log")) == 1


def test_a_bad_spawn_is_an_error_observation_and_starts_nothing(deployment: Deployment) -> None:
    bad = {"children": [{"role": "explorer", "share": 0.8}, {"role": "critic", "share": 0.8}]}
    # the model names a script outside its parent's directory: the host must not read it
    folder = deployment.tmp.parent / f"{deployment.tmp.name}-elsewhere"
    elsewhere = write_script([{"content": "read"}], folder, name="other")
    outside = {"children": [{"role": "explorer", "model": elsewhere}]}
    said = {"shares add up to 1.6": bad, f"child 'explorer': model {elsewhere!r} is not": outside}
    ids = {}
    for error, arguments in said.items():
        replies = [
            {"content": "split", "tool_calls": [{"name": "spawn_agents", "arguments": arguments}]},
            {"content": "gave up"},
        ]
        ids[error] = deployment.client.submit(
            TREE_KIND, {"sink": str(deployment.sink)}, model=deployment.script(replies)
        ).id
    with deployment.worker():
        for session_id in ids.values():
            _ended(deployment, session_id, 60)
    for error, session_id in ids.items():
        assert deployment.client.get(session_id).status is Status.COMPLETED
        observed = deployment.client.load(session_id).observation("s1c0")
        assert observed is not None and observed.is_error
        assert error in observed.content
        assert deployment.client.store.children(session_id) == []


def _state(head: Head) -> tuple[Status, int]:
    return head.status, head.step


def _saved(head: Head) -> tuple[Status, int]:
    """What changes with every save of the session."""
    return head.status, head.version


def _asks(value: str, then: str) -> list[dict[str, Any]]:
    """A child that asks a person to approve a `danger` call (waiting, holding no worker),
    then answers `then`."""
    ask = {"content": "ask", "tool_calls": [{"name": "danger", "arguments": {"value": value}}]}
    return [ask, {"content": then}]


def test_an_each_spawn_delivers_results_one_at_a_time_and_stops_the_child_left(
    deployment: Deployment,
) -> None:
    client = deployment.client
    children = [
        _child(deployment, "answers", [{"content": "found it"}]),
        _child(deployment, "approved", _asks("b", "second")),
        _child(deployment, "left", _asks("c", "never")),
    ]
    spawn = {"children": children, "join": "each"}
    replies = [
        {"content": "split", "tool_calls": [{"name": "spawn_agents", "arguments": spawn}]},
        {"content": "next", "tool_calls": [{"name": "wait_children", "arguments": {}}]},
        {"content": "two are enough"},
    ]
    root_id = _submit_parent(deployment, replies)
    with deployment.worker(concurrency=2):
        until(
            lambda: client.load(root_id).observation("s1c0") is not None,
            timeout=90,
            what="the first child's result",
        )
        first = json.loads(client.load(root_id).observation("s1c0").content)  # type: ignore[union-attr]
        assert [c["answer"] for c in first["children"]] == ["found it"]
        assert (first["join"], first["remaining"]) == ("each", 2)
        ids = [c.id for c in client.store.children(root_id)]
        until(
            lambda: client.get(ids[1]).status is Status.WAITING_APPROVAL,
            timeout=60,
            what="the second child to ask",
        )
        # the parent's wait_children suspends it first: the second child's end wakes it
        until(
            lambda: _state(client.get(root_id)) == (Status.WAITING_CHILDREN, 2),
            timeout=60,
            what="the parent to wait for the next child",
        )
        client.approve(ids[1], "s1c0", approver="alice")
        _ended(deployment, root_id, 90)
        # the parent ended with the third still waiting: the relay stops it
        _ended(deployment, ids[2], 60)

    root = client.get(root_id)
    assert root.status is Status.COMPLETED, (root.status, root.error_message)
    children_now = client.store.children(root_id)
    assert [c.status for c in children_now] == [
        Status.COMPLETED,
        Status.COMPLETED,
        Status.CANCELLED,
    ]
    waited = client.load(root_id).observation("s2c0")
    assert waited is not None and not waited.is_error
    second = json.loads(waited.content)
    assert [(c["id"], c["answer"]) for c in second["children"]] == [(ids[1], "second")]
    assert second["remaining"] == 1
    assert _woken(deployment, root_id) == 2  # the first end, then the wait's
    # every session's model calls counted once in the root: its three, the children's four
    spent = sum(c.cost_usd for c in children_now)
    assert spent == pytest.approx(4 * REPLY_COST)
    assert root.cost_usd == pytest.approx(3 * REPLY_COST + spent)


@pytest.mark.slow
def test_a_child_ending_while_its_woken_parent_runs_is_delivered_once_after_a_kill(
    deployment: Deployment,
) -> None:
    """An `each` join: the first child's end wakes the parent, whose woken tick takes its
    result; in the parent's next tick (a long model call, on the first worker) the second
    child ends on a second worker, and finds no call waiting on the join (the wake-up
    cleared it): its end is only appended. The first worker is killed in that tick; taken
    over, the parent's `wait_children` finds the second end there and takes it without
    waiting: each result delivered once, one wake-up, the tree's cost the sum of it."""
    client = deployment.client
    children = [
        _child(deployment, "answers", [{"content": "found it"}]),
        _child(deployment, "approved", _asks("b", "second")),
    ]
    spawn = {"children": children, "join": "each"}
    wait = {"name": "wait_children", "arguments": {}}
    replies = [
        {"content": "split", "tool_calls": [{"name": "spawn_agents", "arguments": spawn}]},
        {"content": "next", "tool_calls": [wait], "delay_s": THINK_S},
        {"content": "both had"},
    ]
    root_id = _submit_parent(deployment, replies)
    first = deployment.spawn()
    second = None
    try:
        until(
            lambda: client.load(root_id).observation("s1c0") is not None,
            timeout=90,
            what="the first child's result",
        )
        ids = [c.id for c in client.store.children(root_id)]
        until(
            lambda: client.get(ids[1]).status is Status.WAITING_APPROVAL,
            timeout=60,
            what="the second child to ask",
        )
        thinking = until(
            lambda: (
                (h := client.get(root_id)).status is Status.READY
                and owner_pid(deployment, root_id) == first.pid
                and h
            ),
            timeout=30,
            what="the parent's model call after its wake-up",
        )
        # the first worker is in the parent's model call (solo: it takes nothing else),
        # so the second child's next ticks wait for the second worker
        client.approve(ids[1], "s1c0", approver="alice")
        second = deployment.spawn()
        _ended(deployment, ids[1], THINK_S)
        # the second child ended during the parent's model call after its wake-up, unsaved
        assert _saved(client.get(root_id)) == _saved(thinking), "the parent's tick ended"
        assert owner_pid(deployment, root_id) == first.pid
        kill(first)
        _ended(deployment, root_id, 150)
    finally:
        stop(first)
        if second is not None:
            stop(second)

    root = client.get(root_id)
    assert root.status is Status.COMPLETED, (root.status, root.error_message)
    assert [c.status for c in client.store.children(root_id)] == [Status.COMPLETED] * 2
    delivered = {}
    for observed in client.load(root_id).observations:
        report = json.loads(observed.content)
        delivered[observed.call_id] = [c["id"] for c in report.get("children", [])]
    # each child's result once: the first with the spawn call, the second with the wait
    assert delivered == {"s1c0": [ids[0]], "s2c0": [ids[1]]}
    joined = [
        e.data for _, e in client.store.events_after(root_id) if e.kind is EventKind.CHILDREN_JOINED
    ]
    # one wake-up, the first end's: the second end found no call waiting, and the wait
    # found it there (a wake-up per delivery that suspended, none for the one that did not)
    assert _woken(deployment, root_id) == 1
    assert [d["call_id"] for d in joined if not d.get("woken")] == ["s1c0", "s2c0"]
    join = client.store.join(root_id, "s1c0")
    assert join is not None and (join.ended, join.delivered) == (2, 2)
    spent = sum(c.cost_usd for c in client.store.children(root_id))
    assert spent == pytest.approx(3 * REPLY_COST)
    assert root.cost_usd == pytest.approx(3 * REPLY_COST + spent)
