"""A graph node fans out to 20 parallel branches, each a child session, and their updates
merge through the graph's reducers at the join (docs/DESIGN.md section 16): the same final
state with every tick delivered once, with ticks delivered again, and with a worker
killed while the branches run. Branches running when the root is cancelled end cancelled."""

from __future__ import annotations

import pytest
from tickwork.fsm.values import EventKind, Status

from tests.tasks.conftest import Deployment, kill, stop
from tickwork.testing import until

ITEMS = list(range(20))
FINAL = {
    "items": ITEMS,
    "item": 0,
    "squares": [i * i for i in ITEMS],
    "total": sum(i * i for i in ITEMS),
    "finished": True,
}


def _run_to_the_end(deployment: Deployment, session_id: str, timeout: float) -> None:
    until(
        lambda: deployment.client.get(session_id).status.terminal,
        timeout=timeout,
        what="the fan-out to finish",
    )


def _check(deployment: Deployment, session_id: str) -> None:
    head = deployment.client.get(session_id)
    assert head.status is Status.COMPLETED, (head.status, head.error_message)
    assert head.result["state"] == FINAL
    branches = deployment.client.store.children(session_id)
    assert len(branches) == len(ITEMS)
    assert {b.status for b in branches} == {Status.COMPLETED}
    assert [b.result["update"] for b in branches] == [
        {"squares": [i * i], "total": i * i} for i in ITEMS
    ]
    woken = [
        e
        for _, e in deployment.client.store.events_after(session_id)
        if e.kind is EventKind.CHILDREN_JOINED and e.data.get("woken")
    ]
    assert len(woken) == 1


def test_twenty_branches_merge_through_the_reducers(deployment: Deployment) -> None:
    head = deployment.client.submit(
        "tests.graphs:MAP_SUM", {"items": ITEMS}, model=deployment.script([{"content": "-"}])
    )
    # no relay: every branch's first tick and the wake-up are published by their savers
    with deployment.worker(concurrency=4, relay=False):
        _run_to_the_end(deployment, head.id, 120)
    _check(deployment, head.id)


def test_branches_running_when_the_root_is_cancelled_end_cancelled(
    deployment: Deployment,
) -> None:
    head = deployment.client.submit(
        "tests.graphs:MAP_SUM_CANCELLED",
        {"items": [1, 2, 3, 4]},
        model=deployment.script([{"content": "-"}]),
    )
    # each branch's node cancels the root while its tick runs (a later one finds it done)
    with deployment.worker(concurrency=4):
        # the root ends at its own tick after its last branch ended: wait for both
        until(
            lambda: (
                all(b.status.terminal for b in deployment.client.store.children(head.id))
                and len(deployment.client.store.children(head.id)) == 4
                and deployment.client.get(head.id).status.terminal
            ),
            timeout=60,
            what="every branch and the root to end",
        )
    assert deployment.client.get(head.id).status is Status.CANCELLED
    branches = deployment.client.store.children(head.id)
    assert {b.status for b in branches} == {Status.CANCELLED}, [b.status for b in branches]
    # a branch whose node ran (one did: it cancelled the root) keeps its square, once
    squares = [b.result["state"]["squares"] for b in branches]
    assert any(squares), squares
    assert all(s in ([], [i * i]) for i, s in zip([1, 2, 3, 4], squares, strict=True)), squares


def test_redelivered_ticks_leave_the_same_state(deployment: Deployment) -> None:
    head = deployment.client.submit(
        "tests.graphs:MAP_SUM", {"items": ITEMS}, model=deployment.script([{"content": "-"}])
    )
    with deployment.worker(concurrency=4) as app:
        seen: list[tuple[str, int]] = []

        def again() -> bool:
            # publish every tick a second time: each runs once (the claim), whatever arrives
            for session in [head.id, *(c.id for c in deployment.client.store.children(head.id))]:
                now = deployment.client.get(session)
                if (session, now.version) not in seen:
                    seen.append((session, now.version))
                    app.send_task(
                        "tickwork.tick",
                        args=(session, now.version),
                        queue=deployment.settings.queue,
                    )
            return deployment.client.get(head.id).status.terminal

        until(again, timeout=120, what="the fan-out to finish")
    _check(deployment, head.id)


@pytest.mark.slow
def test_a_worker_killed_while_branches_run_leaves_the_same_state(
    deployment: Deployment,
) -> None:
    head = deployment.client.submit(
        "tests.graphs:MAP_SUM", {"items": ITEMS}, model=deployment.script([{"content": "-"}])
    )
    first = deployment.spawn(env={"TICKWORK_TEST_SLOW": "1"})
    try:
        until(
            lambda: (
                sum(c.status is Status.COMPLETED for c in deployment.client.store.children(head.id))
                >= 3
            ),
            timeout=90,
            what="a few branches to end",
        )
        kill(first)
    finally:
        stop(first)
    second = deployment.spawn()
    try:
        _run_to_the_end(deployment, head.id, 150)
    finally:
        stop(second)
    _check(deployment, head.id)
