"""A graph node that ran and raised did run: its call reads as failed with the exception
(in its record, its events, `tickwork show` and the API's view), not as not run, and the
session fails naming the node and the exception; on SQLite and on Postgres."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.fsm import transitions
from tickwork.fsm.values import ErrorCode, EventKind, Session, Status
from tickwork.store.error_signatures import error_signature

from tests.worker.ticking import Ticks
from tickwork import render, views


def _node_call(session: Session, name: str) -> tuple[str, str, bool]:
    """The call id, observation and its error flag of the one run of node `name`."""
    [call] = [c for s in session.steps for c in s.calls if c.name == name]
    seen = session.observation(call.call_id)
    assert seen is not None
    return call.call_id, seen.content, seen.is_error


@pytest.mark.parametrize("kind", ["tests.graphs:RAISING", "tests.graphs:RAISING_ONCE"])
def test_a_node_that_raised_reads_failed_with_the_exception_not_not_run(
    ticks: Ticks, tmp_path: Path, kind: str
) -> None:
    """Whether or not the node may run twice, it ran: its call was closed "not run: the
    session failed", as a node that never started reads."""
    head = ticks.client.submit(kind, {}, model=f"scripted:{tmp_path / 'none.json'}")

    done = ticks.run(head.id)

    assert (done.status, done.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    assert done.error_message == "node 'charge' raised LookupError: the ledger is closed"
    session = ticks.client.load(head.id)
    call_id, content, is_error = _node_call(session, "charge")
    assert content == f"failed: {done.error_message}" and is_error
    (finished,) = [e for e in session.events if e.kind is EventKind.TOOL_FINISHED]
    assert (finished.data["call_id"], finished.data["is_error"]) == (call_id, True)
    assert [e.kind for e in session.events][-2:] == [EventKind.FAILED, EventKind.DEAD_LETTERED]
    # what the API answers and `tickwork show` draws
    view = views.session(session)
    [shown] = [c for s in view["steps"] for c in s["calls"] if c["call_id"] == call_id]
    assert shown["observation"]["content"].startswith("failed: node 'charge' raised")
    console = render.console()
    with console.capture() as captured:
        console.print(render.timeline(view))
    drawn = " ".join(captured.get().split())
    assert "not run" not in drawn and "failed: node 'charge' raised LookupError" in drawn
    assert "NodeFailed" not in drawn


def test_the_error_of_a_node_that_raised_is_kept_to_a_bound(ticks: Ticks, tmp_path: Path) -> None:
    """A node's exception of any size: the session's message and the call's record keep its
    start (the node, the exception's type) and its end, within ERROR_CHARS."""
    said = "the ledger is closed; "
    head = ticks.client.submit(
        "tests.graphs:RAISING",
        {"message": said, "times": 10_000},
        model=f"scripted:{tmp_path / 'none.json'}",
    )

    done = ticks.run(head.id)

    assert done.status is Status.FAILED
    message = done.error_message
    assert len(message) < transitions.ERROR_CHARS + 100 < len(said) * 10_000
    assert message.startswith("node 'charge' raised LookupError: the ledger")
    assert message.endswith(said) and "characters cut from the middle" in message
    session = ticks.client.load(head.id)
    assert _node_call(session, "charge")[1] == f"failed: {message}"
    (failed,) = [e for e in session.events if e.kind is EventKind.FAILED]
    assert failed.data["message"] == message


def test_a_branch_that_raised_fails_its_root_and_the_node_that_fanned_out_reads_failed(
    ticks: Ticks, tmp_path: Path
) -> None:
    """The node that fanned out ran (its branches did): a branch that raised fails the
    session naming the branch, the node and the exception, and the node's call reads as
    failed with it, not as interrupted ("it may or may not have run")."""
    root = ticks.client.submit(
        "tests.graphs:RAISING_BRANCHES",
        {"items": [1, 2]},
        model=f"scripted:{tmp_path / 'none.json'}",
    ).id
    assert ticks.run(root).status is Status.WAITING_CHILDREN
    first, second = ticks.store.children(root)
    for branch in (first, second):
        assert ticks.run(branch.id).status is Status.FAILED
    assert _node_call(ticks.client.load(first.id), "charge")[1].startswith("failed: ")

    done = ticks.run(root)

    assert (done.status, done.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    assert done.error_message == (
        f"branch {first.id} of node 'split' failed: INTERNAL: node 'charge' raised "
        "LookupError: the ledger is closed"
    )
    assert _node_call(ticks.client.load(root), "split")[1:] == (
        f"failed: {done.error_message}",
        True,
    )


def test_a_refused_update_fails_the_session_naming_the_node_not_an_exception_class(
    ticks: Ticks, tmp_path: Path
) -> None:
    """What a node returned and the state refused reads as what was wrong with it, the node
    named; tickwork's own exception class is no part of what a user reads."""
    head = ticks.client.submit(
        "tests.graphs:SLOPPY", {}, model=f"scripted:{tmp_path / 'none.json'}"
    )

    done = ticks.run(head.id)

    assert (done.status, done.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    assert done.error_message.startswith(
        "node 'paint' of graph 'sloppy' gives colour, which the state Poll does not have"
    )
    session = ticks.client.load(head.id)
    assert _node_call(session, "paint")[1:] == (f"failed: {done.error_message}", True)


def test_a_node_whose_return_breaks_the_worker_fails_naming_the_node(
    ticks: Ticks, tmp_path: Path
) -> None:
    """What a node returned that no check refuses but that the worker fails on (branches
    built by hand from a generator, which has no length) fails the session INTERNAL naming
    the node and the error, and the node's call reads failed with it. Its dead letter
    groups with one stored in the older words, which named no node ("TypeError: ...")."""
    head = ticks.client.submit(
        "tests.graphs:LAZY_BRANCHES", {}, model=f"scripted:{tmp_path / 'none.json'}"
    )

    done = ticks.run(head.id)

    raised = "TypeError: object of type 'generator' has no len()"
    assert (done.status, done.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    assert done.error_message == f"node 'split' failed: {raised}"
    session = ticks.client.load(head.id)
    assert _node_call(session, "split")[1:] == (f"failed: {done.error_message}", True)
    assert ticks.store.children(head.id) == []
    letter = ticks.store.dead_letter(head.id)
    assert letter.error_signature == error_signature("INTERNAL", raised)


def test_an_update_check_that_raised_asks_a_person_naming_the_node(
    ticks: Ticks, tmp_path: Path
) -> None:
    """A node's `approve_update` that raises does not fail the session: a person decides on
    the update, told whose check raised and what it raised."""
    head = ticks.client.submit(
        "tests.graphs:CHECKING", {}, model=f"scripted:{tmp_path / 'none.json'}"
    )

    waiting = ticks.run(head.id)

    assert waiting.status is Status.WAITING_APPROVAL
    session = ticks.client.load(head.id)
    [proposal] = [c for s in session.steps for c in s.calls if c.name == "offer#update"]
    assert proposal.approval_reason == (
        "the `approve_update` of node 'offer' raised ValueError: the offer limit is not "
        "configured, so a person decides"
    )
