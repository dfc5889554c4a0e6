"""A graph session woken while its branches run (by hand, or by a repair that raced) waits
for them again; its branches' updates merge only once the join is complete. A branch
running when its tree is cancelled keeps what its node did and ends cancelled. A node
that fanned out ran, so a failure at its join closes it as interrupted, not as not run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update
from tickwork.fsm import graph_machine
from tickwork.fsm.values import ErrorCode, EventKind, Status
from tickwork.store.schema import sessions
from tickwork.worker.tick.advance import advance

from tests.worker.ticking import Ticks


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def test_a_fanning_session_woken_before_its_join_is_complete_waits_again(
    ticks: Ticks, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "-"}]))
    root = ticks.client.submit(
        "tests.graphs:MAP_SUM", {"items": [1, 2, 3]}, model=f"scripted:{script}"
    ).id
    assert ticks.run(root).status is Status.WAITING_CHILDREN
    first, *others = ticks.store.children(root)
    assert ticks.run(first.id).status is Status.COMPLETED
    with ticks.store.engine.begin() as conn:  # woken by hand: one branch of three ended
        conn.execute(
            update(sessions)
            .where(sessions.c.id == root)
            .values(status=Status.EXECUTING.value, version=sessions.c.version + 1)
        )
    head = ticks.store.get(root)

    advance(ticks.rt, root, head.version)

    again = ticks.store.get(root)
    assert again.status is Status.WAITING_CHILDREN, (again.status, again.error_message)
    for branch in others:
        assert ticks.run(branch.id).status is Status.COMPLETED
    done = ticks.run(root)
    assert done.status is Status.COMPLETED, done.error_message
    assert done.result["state"]["total"] == 1 + 4 + 9


def test_a_branch_running_when_its_tree_is_cancelled_ends_cancelled(
    ticks: Ticks, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "-"}]))
    root = ticks.client.submit(
        "tests.graphs:MAP_SUM_CANCELLED", {"items": [1, 2, 3]}, model=f"scripted:{script}"
    ).id
    assert ticks.run(root).status is Status.WAITING_CHILDREN
    first, *others = ticks.store.children(root)

    # its node cancels the root while its tick runs, then returns its square
    branch = ticks.run(first.id)

    assert ticks.store.get(root).status is Status.CANCELLED
    assert branch.status is Status.CANCELLED, branch.status
    # the node ran once and what it did is saved; the branch did not complete
    assert branch.result["state"]["squares"] == [1]
    kinds = [e.kind for e in ticks.store.load(first.id).events]
    assert kinds[-1] is EventKind.CANCELLED and EventKind.COMPLETED not in kinds, kinds
    for other in others:  # flagged before their node ran: it never runs
        head = ticks.run(other.id)
        assert head.status is Status.CANCELLED and head.result["state"]["squares"] == []


def test_a_node_that_fanned_out_reads_interrupted_when_its_join_fails_the_session(
    ticks: Ticks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node found started after its fan-out ran (its branches did): an error at its join
    (INTERNAL) does not close it as not run, as a node started by a lost tick would be."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "-"}]))
    root = ticks.client.submit(
        "tests.graphs:MAP_SUM", {"items": [1]}, model=f"scripted:{script}"
    ).id
    assert ticks.run(root).status is Status.WAITING_CHILDREN
    (branch,) = ticks.store.children(root)
    assert ticks.run(branch.id).status is Status.COMPLETED

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(graph_machine, "branches_joined", broken)
    head = ticks.run(root)

    assert (head.status, head.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    session = ticks.store.load(root)
    [split] = [c for s in session.steps for c in s.calls if c.name == "split"]
    observed = session.observation(split.call_id)
    assert observed is not None
    assert observed.content == "interrupted; it may or may not have run: the session failed"
