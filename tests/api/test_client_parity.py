"""The local client's methods that the remote client had alone (`timeline`, `events`,
`waiting`, `fork_dead_letter`, `resolve_dead_letter`, `dismiss_dead_letter`), on a real
store with the API in front: each gives what the remote one gives for the same session,
and takes a start of a session's id as the local client's other methods do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import InvalidInput, SessionArchived, SessionNotFound
from tickwork.fsm.values import Status
from tickwork.store import dead_letters as dl
from tickwork.store.retention import Policy, archive_pass

from tests.api.conftest import DANGER, TOKEN, Stack
from tests.api.test_archived import deployed
from tests.api.test_dead_letters import failed
from tests.api.test_sessions import ECHO
from tickwork.remote import Client, EventPage
from tickwork.testing.store_ticks import Clock, new_session, reply, think


def remote(stack: Stack) -> Client:
    return Client(stack.url, token=TOKEN["olga"])


def as_json(view: dict[str, Any]) -> Any:
    """The view as the API's JSON carries it."""
    return json.loads(json.dumps(view))


def start(session_id: str) -> str:
    """A start of the id that names it alone (ids are `parity-` and 10 hex digits)."""
    return session_id[:-2]


def test_timeline_events_and_waiting_are_the_remote_clients(stack: Stack) -> None:
    session_id = stack.waiting(DANGER, prefix="parity")
    local = stack.deployment.client
    with remote(stack) as tw:
        assert as_json(local.timeline(start(session_id))) == tw.timeline(session_id)
        card = local.waiting(start(session_id))
        assert as_json(card) == tw.waiting(session_id)
        assert [c["call_id"] for c in card["calls"]] == ["s1c0"]
        page = local.events(start(session_id))
        assert isinstance(page, EventPage) and page == tw.events(session_id)
        assert page.status is Status.WAITING_APPROVAL
        assert page.events[0].event is not None and page.events[-1].id == page.last_id
        # paged: a page after the first event, of two, then none after the last
        two = local.events(session_id, after=page.events[0].id, limit=2)
        assert two == tw.events(session_id, after=page.events[0].id, limit=2)
        assert [f.id for f in two.events] == [f.id for f in page.events[1:3]]
        assert local.events(session_id, after=page.last_id) == EventPage(
            Status.WAITING_APPROVAL, (), page.last_id
        )
        local.approve(session_id, "s1c0", approver="alice")
        assert stack.wait(session_id)["status"] == "completed"
        # once it waits for nobody: no calls, waiting since nobody knows when
        done = local.waiting(session_id)
        assert (done["calls"], done["waiting_since"]) == ([], None)
        assert as_json(done) == tw.waiting(session_id)


def test_events_refuses_a_page_it_cannot_read_in_words(stack: Stack) -> None:
    local = stack.deployment.client
    session_id = stack.waiting(DANGER, prefix="parity")
    with pytest.raises(InvalidInput, match=r"`limit` must be a whole number of 1 or more"):
        local.events(session_id, limit=0)
    with pytest.raises(InvalidInput, match=r"`after` must be a whole number of 0 or more"):
        local.events(session_id, after=-1)
    for read in (local.timeline, local.events, local.waiting):
        with pytest.raises(SessionNotFound, match="'parity-nosuch'"):
            read("parity-nosuch")


def test_an_archived_session_is_said_archived_with_how_it_is_read(tmp_path: Path) -> None:
    """As the API refuses it (404 with `archived`): these read live sessions only, and the
    refusal says which reads an archived one, not that there is no such session."""
    _, client = deployed(tmp_path)
    store, clock = client.store, Clock()
    store.create(new_session("parity-archived", now=clock()), now=clock())
    assert think(store, "parity-archived", reply(content="done"), now=clock()).status is (
        Status.COMPLETED
    )
    archive_pass(
        store.engine, store.load, client.archive, Policy(completed_s=60), now=clock.advance(61)
    )
    for read in (client.timeline, client.events, client.waiting):
        with pytest.raises(SessionArchived, match=r"is archived .*read it back with `archived\("):
            read("parity-arch")
    assert client.archived("parity-archived") is not None
    with pytest.raises(SessionNotFound) as none:
        client.timeline("parity-nosuch")
    assert not isinstance(none.value, SessionArchived)
    client.close()


def test_a_dead_letter_is_forked_resolved_and_dismissed_as_the_remote_client_does(
    stack: Stack,
) -> None:
    local = stack.deployment.client
    forked, resolved, dismissed = (failed(stack, ECHO, budgets={"max_steps": 1}) for _ in range(3))
    # by a start of its session's id, as `tickwork dlq fork` takes one
    child = local.fork_dead_letter(start(forked), from_step=1, by="alice", budgets={"max_steps": 5})
    assert (child.parent_id, child.fork_step, child.submitted_by) == (forked, 1, "alice")
    assert stack.wait(child.id, Status.COMPLETED)["final_answer"] == "said"
    letter = local.dead_letter(forked)
    assert letter.status == "forked" and letter.resolution is not None
    assert letter.resolution["fork"] == child.id
    with pytest.raises(dl.DeadLetterClosed, match="fork it once more on purpose with `again`"):
        local.fork_dead_letter(forked, from_step=1, by="alice", budgets={"max_steps": 5})
    again = local.fork_dead_letter(
        forked, from_step=1, by="alice", budgets={"max_steps": 5}, again=True
    )
    assert again.parent_id == forked

    number = local.dead_letter(resolved).id
    closed = local.resolve_dead_letter(f"#{number}", "fixed the script", by="alice")
    assert (closed.id, closed.status) == (number, "resolved")
    assert closed.resolution is not None
    assert (closed.resolution["by"], closed.resolution["reason"]) == ("alice", "fixed the script")
    closed = local.dismiss_dead_letter(start(dismissed), "a test run", by="alice")
    assert (closed.session_id, closed.status) == (dismissed, "dismissed")
    with remote(stack) as tw:
        # the same letters, read over HTTP
        assert tw.dead_letter(resolved)["status"] == "resolved"
        assert tw.dead_letter(dismissed)["resolution"]["reason"] == "a test run"
