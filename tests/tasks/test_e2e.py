"""A scripted session through a real worker, on every deployment and broker."""

from __future__ import annotations

from tickwork.fsm.values import CallState, EventKind, Status

from tests.tasks.conftest import Deployment, on_every_broker


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


@on_every_broker
def test_ten_steps_complete_with_everything_stored(deployment: Deployment) -> None:
    replies = [
        {"content": f"step {i}", "tool_calls": [call("echo", text=f"hello {i}")]} for i in range(9)
    ]
    replies.append({"content": "all done"})
    session_id = deployment.submit(replies)
    with deployment.worker():
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED, head
    assert head.final_answer == "all done"
    session = deployment.client.load(session_id)
    assert [s.step for s in session.steps] == list(range(1, 11))
    calls = [c for s in session.steps for c in s.calls]
    assert len(calls) == 9
    assert all(c.state is CallState.DONE for c in calls)
    assert [session.observation(c.call_id).content for c in calls] == [
        f"hello {i}" for i in range(9)
    ]
    kinds = [e.kind for e in session.events]
    assert kinds.count(EventKind.MODEL_CALLED) == 10
    assert kinds.count(EventKind.TOOL_STARTED) == 9
    assert kinds.count(EventKind.TOOL_FINISHED) == 9
    assert kinds[0] is EventKind.CREATED and kinds[-1] is EventKind.COMPLETED
    assert head.version == 10 + 9  # one micro-phase per version
