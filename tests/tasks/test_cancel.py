"""Cancel: a suspended session at once, a running one at its next tick."""

from __future__ import annotations

from tickwork.fsm.values import Status

from tests.tasks.conftest import Deployment


def test_cancel_of_a_waiting_session_is_immediate(deployment: Deployment) -> None:
    replies = [{"content": "x", "tool_calls": [{"name": "danger", "arguments": {"value": "v"}}]}]
    with deployment.worker():
        session_id = deployment.submit(replies)
        assert deployment.client.wait(session_id, timeout=60).status is Status.WAITING_APPROVAL
        head = deployment.client.cancel(session_id, by="ops")
    assert head.status is Status.CANCELLED
    seen = deployment.client.load(session_id).observation("s1c0")
    assert seen is not None and seen.is_error and "cancelled" in seen.content
    assert deployment.sink_lines("danger.log") == []


def test_cancel_of_a_running_session_takes_effect_at_its_next_tick(deployment: Deployment) -> None:
    replies = [
        {
            "content": "slow",
            "tool_calls": [
                {"name": "idem_effect", "arguments": {"value": "a", "sleep_s": 2}},
                {"name": "idem_effect", "arguments": {"value": "b"}},
            ],
        },
        {"content": "done"},
    ]
    session_id = deployment.submit(replies)
    with deployment.worker():
        from tickwork.testing import until

        until(lambda: deployment.sink_lines("idem.log"), timeout=60, what="the first call")
        head = deployment.client.cancel(session_id, by="ops")
        assert head.status is Status.EXECUTING and head.cancel_requested
        done = deployment.client.wait(session_id, timeout=60)
    assert done.status is Status.CANCELLED
    assert len(deployment.sink_lines("idem.log")) == 1, "the second call must not run"
    session = deployment.client.load(session_id)
    assert session.observation("s1c0").content == "stored a"  # type: ignore[union-attr]
    assert "cancelled" in session.observation("s1c1").content  # type: ignore[union-attr]
