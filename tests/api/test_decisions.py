"""Decisions through the API: the approver is the token's holder, the decision is bound to
the fingerprint the approver saw, and each call is decided once."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tickwork.fsm.errors import StaleDecision
from tickwork.fsm.values import Status

from tests.api.conftest import Stack


def decide(
    stack: Stack, who: str, session_id: str, body: dict[str, object], call_id: str = "s1c0"
) -> tuple[int, dict[str, object]]:
    answer = stack.http(who).post(
        f"/api/v1/sessions/{session_id}/calls/{call_id}/decision", json=body
    )
    return answer.status_code, answer.json()


def test_approve_runs_the_call_and_records_the_token_holder(stack: Stack) -> None:
    session_id = stack.waiting()
    waiting = stack.http("alice").get("/api/v1/approvals").json()
    mine = next(w for w in waiting if w["session"]["id"] == session_id)
    call = mine["calls"][0]
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "s1c0",
        "danger",
        {"value": "prod-db"},
    )
    assert mine["thought"] == "delete it" and mine["waiting_since"]
    status, head = decide(
        stack,
        "alice",
        session_id,
        {"kind": "approve", "fingerprint": call["fingerprint"], "comment": "looks right"},
    )
    assert status == 200, head
    assert head["status"] == "executing"
    assert stack.wait(session_id, Status.COMPLETED)["final_answer"] == "done"
    assert stack.deployment.sink_lines("danger.log").count(f"{session_id}:1:s1c0 prod-db") == 1
    decision = stack.deployment.client.load(session_id).decision("s1c0")
    assert decision is not None
    assert (decision.approver, decision.comment) == ("alice", "looks right")


def test_the_approver_comes_from_the_token_never_from_the_body(stack: Stack) -> None:
    session_id = stack.waiting()
    status, error = decide(
        stack,
        "alice",
        session_id,
        {"kind": "approve", "fingerprint": stack.fingerprint(session_id), "approver": "mallory"},
    )
    assert status == 422 and "body.approver" in str(error["message"])
    assert stack.deployment.client.load(session_id).decisions == ()


def test_a_body_sent_without_its_json_content_type_is_told_so(stack: Stack) -> None:
    session_id = stack.waiting()
    body = json.dumps({"kind": "approve", "fingerprint": stack.fingerprint(session_id)})
    url = f"/api/v1/sessions/{session_id}/calls/s1c0/decision"
    # (without any Content-Type, FastAPI before 0.165 reads the body as JSON and takes it)
    for headers, says in (
        ({"Content-Type": "text/plain"}, "Content-Type is 'text/plain'"),
        ({"Content-Type": "text/json"}, "Content-Type is 'text/json'"),
    ):
        answer = stack.http("alice").post(url, content=body, headers=headers)
        assert answer.status_code == 422, answer.text
        message = answer.json()["message"]
        assert says in message and "Content-Type: application/json" in message, message
    assert stack.deployment.client.load(session_id).decisions == ()


def test_a_body_that_is_not_json_is_told_so_and_where(stack: Stack) -> None:
    session_id = stack.waiting()
    answer = stack.http("alice").post(
        f"/api/v1/sessions/{session_id}/calls/s1c0/decision",
        content='{"kind": "approve"',
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["code"] == "invalid_input"
    assert error["message"].startswith("invalid request: the body is not valid JSON ("), error
    assert "at character 18" in error["message"] and "body.18" not in error["message"]
    assert error["errors"][0]["type"] == "json_invalid"
    assert stack.deployment.client.load(session_id).decisions == ()


def test_a_decision_for_other_arguments_is_409(stack: Stack) -> None:
    session_id = stack.waiting()
    status, error = decide(stack, "alice", session_id, {"kind": "approve", "fingerprint": "0" * 64})
    assert status == 409 and error["code"] == "stale_decision"
    assert "look at the call again" in str(error["message"])
    short, error = decide(stack, "alice", session_id, {"kind": "approve", "fingerprint": "abc"})
    assert short == 422 and "body.fingerprint" in str(error["message"])
    assert stack.deployment.client.get(session_id).status is Status.WAITING_APPROVAL


@pytest.mark.parametrize(
    ("given", "wrong"),
    [
        ("abc", "is 3 characters long"),
        ("A" * 64, "holds upper-case letters"),
        ("g" * 64, "holds a character that is not a lower-case hex digit"),
    ],
)
def test_a_fingerprint_that_is_no_whole_one_is_refused_saying_what_to_give(
    stack: Stack, given: str, wrong: str
) -> None:
    """pydantic said only "String should have at least 64 characters"; the refusal says, as
    the CLI's `--fingerprint` does, what is wrong and where the whole fingerprint is read."""
    session_id = stack.waiting()
    status, error = decide(stack, "alice", session_id, {"kind": "approve", "fingerprint": given})
    assert (status, error["code"]) == (422, "invalid_input"), error
    message = str(error["message"])
    assert f"body.fingerprint: fingerprint {wrong}, not a call's whole fingerprint" in message
    assert "give all its 64 hex digits, lower-case" in message
    assert "GET /api/v1/approvals/" in message and "String should" not in message


def test_only_the_whole_fingerprint_decides_and_a_refusal_never_shows_it(stack: Stack) -> None:
    session_id = stack.waiting()
    real = stack.fingerprint(session_id)
    wrong = ("1" if real[0] != "1" else "2") + real[1:]
    status, error = decide(stack, "alice", session_id, {"kind": "approve", "fingerprint": wrong})
    assert status == 409 and error["code"] == "stale_decision"
    assert real[:8] not in str(error) and real[-8:] not in str(error)
    for prefix in (real[:8], real[:12], real[:63]):
        status, error = decide(
            stack, "alice", session_id, {"kind": "approve", "fingerprint": prefix}
        )
        assert status == 422 and "body.fingerprint" in str(error["message"]), error
        assert real[:8] not in str(error["message"]).replace(prefix, "")
    # the Python client takes the same path: a prefix is refused there too
    with pytest.raises(StaleDecision) as raised:
        stack.deployment.client.approve(session_id, "s1c0", approver="alice", fingerprint=real[:12])
    assert real[:8] not in str(raised.value)
    assert stack.deployment.client.get(session_id).status is Status.WAITING_APPROVAL
    status, head = decide(stack, "alice", session_id, {"kind": "approve", "fingerprint": real})
    assert status == 200, head


def test_a_second_decision_is_409_naming_who_decided_and_when(stack: Stack) -> None:
    session_id = stack.waiting()
    fingerprint = stack.fingerprint(session_id)
    before = datetime.now(UTC)
    first, _ = decide(stack, "alice", session_id, {"kind": "approve", "fingerprint": fingerprint})
    after = datetime.now(UTC)
    assert first == 200
    status, error = decide(
        stack, "bob", session_id, {"kind": "reject", "fingerprint": fingerprint, "feedback": "no"}
    )
    assert status == 409, error
    assert error["code"] == "already_decided"
    assert error["decided_by"] == "alice" and error["decision"] == "approve"
    assert before <= datetime.fromisoformat(str(error["decided_at"])) <= after
    assert "alice" in str(error["message"])


def test_concurrent_decisions_have_one_winner(stack: Stack) -> None:
    session_id = stack.waiting()
    fingerprint = stack.fingerprint(session_id)
    who = ["alice", "bob"] * 5
    with ThreadPoolExecutor(10) as pool:
        results = list(
            pool.map(
                lambda w: decide(
                    stack,
                    w,
                    session_id,
                    {"kind": "approve", "fingerprint": fingerprint, "comment": w},
                )[0],
                who,
            )
        )
    assert sorted(results) == [200] + [409] * 9, results
    stack.wait(session_id, Status.COMPLETED)
    assert len(stack.deployment.client.load(session_id).decisions) == 1


def test_edit_is_checked_against_the_tool_schema_then_runs(stack: Stack) -> None:
    session_id = stack.waiting()
    fingerprint = stack.fingerprint(session_id)
    status, error = decide(
        stack,
        "bob",
        session_id,
        {"kind": "edit", "fingerprint": fingerprint, "arguments": {"value": 3}},
    )
    assert status == 422 and error["code"] == "invalid_tool_arguments"
    status, error = decide(stack, "bob", session_id, {"kind": "edit", "fingerprint": fingerprint})
    assert status == 422 and "an edit needs `arguments`" in str(error["message"])
    status, _ = decide(
        stack,
        "bob",
        session_id,
        {"kind": "edit", "fingerprint": fingerprint, "arguments": {"value": "staging-db"}},
    )
    assert status == 200
    stack.wait(session_id, Status.COMPLETED)
    assert f"{session_id}:1:s1c0 staging-db" in stack.deployment.sink_lines("danger.log")


def test_an_edit_whose_arguments_are_no_object_names_the_field_and_what_to_send(
    stack: Stack,
) -> None:
    """An edit with `arguments` a JSON array (or a string, a number) was answered with
    pydantic's own words ("Input should be a valid dictionary"): the 422 names the field,
    what was sent and what to send; nothing is decided."""
    session_id = stack.waiting()
    fingerprint = stack.fingerprint(session_id)
    for given, sent in (([{"value": "x"}], "a JSON array"), ("x", "a string"), (3, "a number")):
        body = {"kind": "edit", "fingerprint": fingerprint, "arguments": given}
        status, error = decide(stack, "bob", session_id, body)
        assert status == 422 and error["code"] == "invalid_input", error
        message = str(error["message"])
        assert "valid dictionary" not in message, message
        assert f"`arguments` is {sent}" in message, message
        assert "send the new arguments as one JSON object" in message, message
    assert stack.deployment.client.load(session_id).decisions == ()


def test_an_edit_a_tools_check_raises_on_with_a_bug_is_refused_naming_it(stack: Stack) -> None:
    """A tool's `check` that raises something other than ToolError (a KeyError from a bug)
    made the edit a 500; it is refused as any bad edit is, naming the tool and the error,
    and the call still waits for a decision."""
    from tests.jobs import BUGGY_CHECK_VALUE

    session_id = stack.waiting()
    body = {
        "kind": "edit",
        "fingerprint": stack.fingerprint(session_id),
        "arguments": {"value": BUGGY_CHECK_VALUE},
    }
    status, error = decide(stack, "bob", session_id, body)
    assert status == 422 and error["code"] == "invalid_input", error
    message = str(error["message"])
    assert message.startswith("the edit of call s1c0: the check of tool danger raised KeyError")
    assert "'target'" in message
    whole = stack.deployment.client.load(session_id)
    assert whole.head.awaiting == ("s1c0",) and whole.decisions == ()


def test_reject_tells_the_model_who_rejected_and_why(stack: Stack) -> None:
    session_id = stack.waiting()
    status, _ = decide(
        stack,
        "alice",
        session_id,
        {
            "kind": "reject",
            "fingerprint": stack.fingerprint(session_id),
            "feedback": "never touch prod",
        },
    )
    assert status == 200
    stack.wait(session_id, Status.COMPLETED)
    seen = stack.deployment.client.load(session_id).observation("s1c0")
    assert seen is not None and seen.is_error
    assert seen.content == "rejected by alice: never touch prod"
    assert not any(
        line.startswith(f"{session_id}:") for line in stack.deployment.sink_lines("danger.log")
    )


def test_a_reject_without_feedback_tells_the_model_not_to_make_the_call_again(
    stack: Stack,
) -> None:
    """Feedback is optional, as it was: the model gets a text that says the call did not run
    and what to do, not an empty reason."""
    session_id = stack.waiting()
    fingerprint = stack.fingerprint(session_id)
    status, _ = decide(stack, "alice", session_id, {"kind": "reject", "fingerprint": fingerprint})
    assert status == 200
    stack.wait(session_id, Status.COMPLETED)
    seen = stack.deployment.client.load(session_id).observation("s1c0")
    assert seen is not None and seen.is_error
    assert seen.content.startswith("rejected by alice, who gave no reason: danger did not run")
    assert "do not make the same call again" in seen.content


def test_decisions_that_do_not_fit_the_call_are_refused(stack: Stack) -> None:
    session_id = stack.waiting()
    fingerprint = stack.fingerprint(session_id)
    status, error = decide(
        stack,
        "alice",
        session_id,
        {"kind": "provide_output", "fingerprint": fingerprint, "output": "42"},
    )
    # a right request at the wrong time (README's rule): 409, as a decision on a call not waiting
    assert status == 409 and error["code"] == "not_in_doubt"
    assert "not in doubt" in str(error["message"])
    status, error = decide(
        stack, "alice", session_id, {"kind": "approve", "fingerprint": fingerprint}, call_id="s1c1"
    )
    assert status == 409 and error["code"] == "not_waiting"
    status, error = decide(
        stack, "alice", session_id, {"kind": "approve", "fingerprint": fingerprint}, call_id="s9c9"
    )
    assert status == 404 and error["code"] == "call_not_found"
    status, error = decide(
        stack, "alice", "no-such-session", {"kind": "approve", "fingerprint": fingerprint}
    )
    assert status == 404 and error["code"] == "session_not_found"
    status, error = decide(
        stack, "alice", session_id, {"kind": "bless", "fingerprint": fingerprint}
    )
    assert status == 422 and "body.kind" in str(error["message"])
    assert stack.deployment.client.load(session_id).decisions == ()


def test_an_output_given_past_the_tool_output_cap_is_refused(stack: Stack) -> None:
    """The body took up to 1,000,000 characters, past what any tool's output may be."""
    from tickwork.worker.tick.runtime import utc_now

    from tickwork.testing.store_ticks import Clock, in_doubt_call, new_session

    store = stack.deployment.client.store
    # an hour past the wall clock's now: the stack's relay (on the wall clock) finds this
    # session's ticks due only long after the test, so it hands none to its worker in the
    # middle of the steps below (at T0 they are long overdue; at the wall clock's now they
    # fall due TICKWORK_RELAY_AFTER_S later, which a loaded machine passes within the steps)
    clock = Clock(utc_now() + timedelta(hours=1))
    session_id = f"doubt-{uuid.uuid4().hex[:8]}"
    store.create(new_session(session_id, now=clock()), now=clock())
    call = in_doubt_call(store, session_id, clock)
    cap = stack.deployment.settings.max_output_chars
    body = {"kind": "provide_output", "fingerprint": call.fingerprint, "output": "o" * (cap + 1)}
    status, error = decide(stack, "alice", session_id, body, call_id=call.call_id)
    assert status == 422 and error["code"] == "invalid_input", error
    assert error["message"] == (
        f"the output given for {call.call_id} is {cap + 1:,} characters; a tool's output is "
        f"at most {cap:,} (TICKWORK_MAX_OUTPUT_CHARS): give a shorter one"
    )
    assert store.load(session_id).decisions == ()


def test_a_secret_in_a_comment_is_stored_and_shown_masked(stack: Stack) -> None:
    session_id = stack.waiting()
    key = "sk-proj-typedINTOaComment0123"
    status, head = decide(
        stack,
        "alice",
        session_id,
        {
            "kind": "approve",
            "fingerprint": stack.fingerprint(session_id),
            "comment": f"use {key} for it",
        },
    )
    assert status == 200, head
    stack.wait(session_id, Status.COMPLETED)
    decision = stack.deployment.client.load(session_id).decision("s1c0")
    assert decision is not None and decision.comment == "use **** for it"
    shown = stack.http("alice").get(f"/api/v1/sessions/{session_id}")
    assert shown.status_code == 200
    assert key not in shown.text and "use **** for it" in shown.text


def test_the_waiting_calls_come_without_previews_when_asked(stack: Stack, tmp_path: Path) -> None:
    """A client deciding without a fingerprint reads the waiting calls for it; the server
    read each waiting file write's file and diffed it for a preview nobody looked at.
    `?preview=false` answers the same calls, fingerprints and all, without previews."""
    from tests.api.test_page import _submit_fix

    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    stack.deployment.settings.workspace_roots = [tmp_path]  # the API takes paths under these
    try:
        answer = _submit_fix(stack, workspace, "def add(a, b):\n    return a + b\n")
    finally:
        stack.deployment.settings.workspace_roots = []
    assert answer.status_code == 201, answer.text
    session_id = answer.json()["id"]
    assert stack.wait(session_id)["status"] == "waiting_approval"
    http = stack.http("alice")

    full = http.get(f"/api/v1/approvals/{session_id}").json()
    bare = http.get(f"/api/v1/approvals/{session_id}", params={"preview": "false"})

    assert bare.status_code == 200, bare.text
    [previewed], [plain] = full["calls"], bare.json()["calls"]
    assert "+    return a + b" in previewed["preview"]["diff"]
    assert plain["preview"] is None
    assert {**plain, "preview": previewed["preview"]} == previewed
    assert plain["fingerprint"] == stack.fingerprint(session_id)
    refused = http.get(f"/api/v1/approvals/{session_id}", params={"preview": "maybe"})
    assert refused.status_code == 422, refused.text


def test_a_decision_without_its_fingerprint_says_where_to_find_it(stack: Stack) -> None:
    status, error = decide(stack, "alice", "any-session", {"kind": "approve"})
    assert status == 422 and error["code"] == "invalid_input", error
    said = str(error["message"])
    assert "`fingerprint` is missing" in said
    assert "GET /api/v1/approvals/{session_id}?preview=false" in said
