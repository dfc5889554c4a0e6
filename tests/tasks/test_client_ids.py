"""The Python client names a session as the CLI and the remote client do: its whole id or a
unique start of it, refusing an unknown, ambiguous or too short one in the CLI's words."""

from __future__ import annotations

import pytest
from tickwork.fsm.errors import InvalidInput, SessionNotFound
from tickwork.fsm.values import Status
from tickwork.store.dead_letters import DeadLetterNotFound

from tests.tasks.conftest import Deployment

IDS = ["c0ffee1a" + "0" * 24, "c0ffee1b" + "1" * 24, "c0ffee2c" + "2" * 24, "c0ffee"]
DANGER = [
    {"content": "", "tool_calls": [{"name": "danger", "arguments": {"value": "prod-db"}}]},
    {"content": "done"},
]


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_unique_start_of_an_id_names_its_session_in_every_method(
    deployment: Deployment,
) -> None:
    client = deployment.client
    with deployment.worker():
        for session_id in IDS[:3]:
            deployment.submit(DANGER, session_id=session_id)
        deployment.submit([{"content": "done"}], session_id=IDS[3])
        assert client.wait("c0ffee2").status is Status.WAITING_APPROVAL
        assert client.get("c0ffee2").id == IDS[2]
        assert client.load("c0ffee2").head.id == IDS[2]
        # an id that is also the start of others names its own session
        assert client.wait("c0ffee").id == "c0ffee"
        client.approve("c0ffee2", "s1c0", approver="alice")
        # `until`, as the remote client's `wait` takes it (a TypeError before)
        assert client.wait(IDS[2], until=["completed"]).status is Status.COMPLETED
        with pytest.raises(InvalidInput, match="'done' is not a session status"):
            client.wait(IDS[2], until="done")
        # without feedback, as the CLI and the remote client reject (a TypeError before)
        client.reject("c0ffee1a", "s1c0", approver="alice")
        assert client.wait(IDS[0]).status is Status.COMPLETED
        fork = client.fork("c0ffee2", from_step=0, by="alice", new_id="f0cacc1a" + "0" * 24)
        assert [f["id"] for f in client.forks("c0ffee2")] == [fork.id]
        assert client.get("f0cacc").id == fork.id
        assert client.cancel("c0ffee1b", by="alice").id == IDS[1]
    with pytest.raises(InvalidInput, match=r"'c0ffee1' is the start of 2 session ids") as said:
        client.get("c0ffee1")
    assert IDS[0] in str(said.value) and IDS[2] not in str(said.value)
    with pytest.raises(SessionNotFound, match="no session id starts with it"):
        client.approve("c0ffee9", "s1c0", approver="alice")
    with pytest.raises(SessionNotFound, match="give at least 6 characters"):
        client.cancel("c0ff", by="alice")


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_forks_of_no_session_is_refused_as_the_other_methods_refuse_it(
    deployment: Deployment,
) -> None:
    with pytest.raises(SessionNotFound, match="'nosuch'"):
        deployment.client.forks("nosuch")
    with pytest.raises(SessionNotFound, match="'nosuch'"):
        deployment.client.get("nosuch")


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)
def test_a_dead_letter_is_named_as_tickwork_dlq_names_one(deployment: Deployment) -> None:
    client = deployment.client
    boom = [{"content": "", "tool_calls": [{"name": "nosuchtool", "arguments": {}}]}] * 30
    session_id = deployment.submit(boom, session_id="dead0001" + "0" * 24, budgets={"max_steps": 2})
    with deployment.worker():
        assert client.wait(session_id).status is Status.FAILED
    letter = client.dead_letter(session_id)
    assert client.dead_letter("dead0001").id == letter.id
    assert client.dead_letter(f"#{letter.id}").session_id == session_id
    with pytest.raises(DeadLetterNotFound, match="no dead letter has number 999"):
        client.dead_letter("#999")
    with pytest.raises(InvalidInput, match="'resolved' or 'dismissed', not 'closed'"):
        client.close_dead_letter("dead00", state="closed", by="alice", reason="seen")
    # a plain string, as the remote client's verbs and the CLI's say it (AttributeError before)
    closed = client.close_dead_letter("dead00", state="dismissed", by="alice", reason="seen")
    assert closed.id == letter.id and closed.resolution
