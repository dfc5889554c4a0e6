"""A session's events as Server-Sent Events, resumed from Last-Event-ID."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
from tickwork.fsm.values import Status

from tests.api.conftest import Stack
from tests.api.test_sessions import ECHO


def frames(answer: httpx.Response) -> list[dict[str, Any]]:
    """Read SSE frames until the `end` frame."""
    found, frame = [], {}
    for line in answer.iter_lines():
        if not line:
            if frame:
                found.append(frame)
                if frame.get("event") == "end":
                    return found
            frame = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            frame[key] = value.removeprefix(" ")
    return found


def stream(stack: Stack, session_id: str, **headers: str) -> list[dict[str, Any]]:
    with stack.http("alice").stream(
        "GET", f"/api/v1/sessions/{session_id}/stream", headers=headers
    ) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        return frames(answer)


def test_a_finished_session_streams_all_its_events_then_end(stack: Stack) -> None:
    session_id = stack.submit(ECHO)
    stack.wait(session_id, Status.COMPLETED)
    got = stream(stack, session_id)
    assert got[0] == {"retry": "2000"}
    events = got[1:-1]
    stored = stack.deployment.client.store.events_after(session_id)
    assert [int(f["id"]) for f in events] == [i for i, _ in stored]
    assert [f["event"] for f in events] == [e.kind.value for _, e in stored]
    assert json.loads(events[0]["data"])["kind"] == "created"
    assert got[-1]["event"] == "end"
    assert json.loads(got[-1]["data"]) == {"status": "completed", "last_id": stored[-1][0]}


def test_last_event_id_resumes_after_that_event(stack: Stack) -> None:
    session_id = stack.submit(ECHO)
    stack.wait(session_id, Status.COMPLETED)
    ids = [i for i, _ in stack.deployment.client.store.events_after(session_id)]
    resumed = stream(stack, session_id, **{"Last-Event-ID": str(ids[2])})
    assert [int(f["id"]) for f in resumed[1:-1]] == ids[3:]
    by_query = stack.http("alice").get(
        f"/api/v1/sessions/{session_id}/stream", params={"after": ids[-1]}
    )
    assert "event: created" not in by_query.text and "event: end" in by_query.text
    bad = stack.http("alice").get(
        f"/api/v1/sessions/{session_id}/stream", headers={"Last-Event-ID": "yesterday"}
    )
    assert bad.status_code == 422 and "Last-Event-ID" in bad.json()["message"]


def test_a_live_stream_follows_a_session_through_its_approval(stack: Stack) -> None:
    session_id = stack.waiting()
    got: list[dict[str, Any]] = []
    seen_waiting = threading.Event()

    def follow() -> None:
        with stack.http("alice").stream("GET", f"/api/v1/sessions/{session_id}/stream") as answer:
            frame: dict[str, str] = {}
            for line in answer.iter_lines():
                if line:
                    key, _, value = line.partition(":")
                    frame[key] = value.removeprefix(" ")
                    continue
                got.append(frame)
                if frame.get("event") == "approval_requested":
                    seen_waiting.set()
                if frame.get("event") == "end":
                    return
                frame = {}

    reader = threading.Thread(target=follow)
    reader.start()
    assert seen_waiting.wait(20)
    answer = stack.http("alice").post(
        f"/api/v1/sessions/{session_id}/calls/s1c0/decision",
        json={"kind": "approve", "fingerprint": stack.fingerprint(session_id)},
    )
    assert answer.status_code == 200
    reader.join(60)
    assert not reader.is_alive()
    kinds = [f.get("event") for f in got if "event" in f]
    assert kinds.index("approval_requested") < kinds.index("approval_decided")
    assert kinds[-3:] == ["tool_finished", "completed", "end"] or kinds[-1] == "end"
    assert "completed" in kinds and kinds.count("created") == 1
    ids = [int(f["id"]) for f in got if f.get("event") not in (None, "end")]
    assert ids == sorted(set(ids))
