"""Dead letters through the API: list, show with the session's timeline, stats, the timeline
by cause, export in every format, fork."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import UTC, datetime
from typing import Any

import pytest
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Status
from tickwork.store import dead_letters as dl

from tests.api.conftest import TEST_KIND, Stack
from tests.api.test_sessions import ECHO
from tickwork import views

BROKEN = [{"error": {"transient": False, "message": "model says 400 bad request"}}]


def failed(stack: Stack, replies: list[dict[str, object]], **kw: object) -> str:
    session_id = stack.submit(replies, prefix="dead", **kw)
    assert stack.wait(session_id)["status"] == "failed"
    return session_id


def test_list_show_and_stats(stack: Stack) -> None:
    broken = failed(stack, BROKEN)
    over = failed(stack, ECHO, budgets={"max_steps": 1})
    api = stack.http("olga")
    listed = api.get("/api/v1/dead-letters").json()
    mine = {d["session_id"]: d for d in listed if d["session_id"] in (broken, over)}
    assert mine[broken]["code"] == "MODEL_ERROR" and mine[over]["code"] == "BUDGET_STEPS"
    assert "snapshot" not in mine[broken]
    only = api.get("/api/v1/dead-letters", params={"code": "BUDGET_STEPS"}).json()
    assert over in [d["session_id"] for d in only] and broken not in [d["session_id"] for d in only]
    recent = api.get("/api/v1/dead-letters", params={"since": "1h", "unresolved": True}).json()
    assert {broken, over} <= {d["session_id"] for d in recent}

    by_id = api.get(f"/api/v1/dead-letters/{mine[over]['id']}").json()
    by_session = api.get(f"/api/v1/dead-letters/{over}").json()
    assert by_id == by_session
    letter = stack.deployment.client.dead_letter(over)
    # what a fork needs to run on: twice the budget it ran out of (the page's form proposes it)
    assert by_id == {
        **views.dead_letter(letter, snapshot=True),
        "forks": [],
        "fork_budgets": {"max_steps": 2},
        "earlier_patches": [],
    }
    assert api.get(f"/api/v1/dead-letters/{broken}").json()["fork_budgets"] == {}
    assert by_id["session"]["steps"][0]["calls"][0]["name"] == "echo"
    # the API names the field the caller gave, as its refusals do
    assert by_id["message"] == "1 step made, `max_steps` is 1"
    assert by_id["session"]["head"]["error_message"] == by_id["message"]

    stats = api.get("/api/v1/dead-letters/stats").json()
    assert set(stats["by"]) == {"code", "kind", "model", "last_tool", "error_signature"}
    codes = {r["value"]: r["count"] for r in stats["by"]["code"]}
    assert codes["MODEL_ERROR"] >= 1 and codes["BUDGET_STEPS"] >= 1
    assert stats["total"] == sum(codes.values())
    one = api.get("/api/v1/dead-letters/stats", params={"by": "last_tool", "since": "1d"}).json()
    assert list(one["by"]) == ["last_tool"] and one["since"]


def test_stats_of_open_dead_letters_and_filters_as_the_cli_takes_them(stack: Stack) -> None:
    """`unresolved=true` counts only open dead letters (it was ignored), `code` takes any
    case as the CLI's --code, and a parameter no route takes is a 422 naming the ones it
    takes, not an unfiltered answer (found by an outside run of dead-letter analysis)."""
    kept = failed(stack, BROKEN)
    closed = failed(stack, BROKEN)
    api = stack.http("olga")
    api.post(f"/api/v1/dead-letters/{closed}/dismiss", json={"reason": "a test run"})

    every = api.get("/api/v1/dead-letters/stats").json()
    open_ = api.get("/api/v1/dead-letters/stats", params={"unresolved": "true"}).json()
    listed = api.get("/api/v1/dead-letters", params={"unresolved": True, "limit": 1000}).json()
    assert kept in {d["session_id"] for d in listed}
    assert open_["total"] == len(listed) < every["total"]
    assert {d["session_id"]: d["status"] for d in listed}[kept] == "open"
    assert api.get(f"/api/v1/dead-letters/{closed}").json()["status"] == "dismissed"

    lower = api.get("/api/v1/dead-letters", params={"code": "model_error"})
    assert lower.status_code == 200, lower.text
    assert {kept, closed} <= {d["session_id"] for d in lower.json()}
    wrong = api.get("/api/v1/dead-letters", params={"code": "nosuch"})
    assert wrong.status_code == 422 and "MODEL_ERROR" in wrong.text

    for path in ("/api/v1/dead-letters/stats", "/api/v1/dead-letters"):
        misspelt = api.get(path, params={"unresolve": "true"})
        assert misspelt.status_code == 422, misspelt.text
        message = misspelt.json()["message"]
        assert "'unresolve'" in message and "unresolved" in message and "since" in message


def test_fork_a_dead_letter_resolves_it(stack: Stack) -> None:
    over = failed(stack, ECHO, budgets={"max_steps": 1})
    answer = stack.http("olga").post(
        f"/api/v1/dead-letters/{over}/fork", json={"from_step": 1, "budgets": {"max_steps": 5}}
    )
    assert answer.status_code == 201, answer.text
    child = answer.json()
    assert child["parent_id"] == over and child["fork_step"] == 1
    assert stack.wait(child["id"], Status.COMPLETED)["final_answer"] == "said"
    letter = stack.http("olga").get(f"/api/v1/dead-letters/{over}").json()
    assert letter["resolved_at"] and letter["resolution"]["fork"] == child["id"]
    assert [(f["fork"], f["by"]) for f in letter["resolution"]["forks"]] == [(child["id"], "olga")]
    assert [f["id"] for f in letter["forks"]] == [child["id"]]
    unresolved = (
        stack.http("olga").get("/api/v1/dead-letters", params={"unresolved": "true"}).json()
    )
    assert over not in [d["session_id"] for d in unresolved]


def test_a_step_that_is_not_an_integer_is_refused_and_forks_nothing(stack: Stack) -> None:
    """QA4 #2: `from_step: false` forked from step 0 and closed the dead letter; every
    integer of a request body is strict, and the 422 names the field and the type."""
    over = failed(stack, ECHO, budgets={"max_steps": 1})
    api = stack.http("olga")
    for wrong in (True, False, "1", 1.0):
        for path in (f"/api/v1/dead-letters/{over}/fork", f"/api/v1/sessions/{over}/fork"):
            answer = api.post(path, json={"from_step": wrong})
            assert answer.status_code == 422, (path, wrong, answer.text)
            said = answer.json()["message"]
            assert "body.from_step" in said and "valid integer" in said, said
    for wrong in ("200000", 200000.0):  # the fork's window as strict as the submit's
        answer = api.post(
            f"/api/v1/sessions/{over}/fork", json={"from_step": 1, "context_window": wrong}
        )
        assert answer.status_code == 422 and "body.context_window" in answer.json()["message"]
    for wrong in (True, False, "1"):  # the local client's fork as strict as the API's
        with pytest.raises(InvalidInput, match="from_step must be a whole number"):
            stack.deployment.client.fork(over, from_step=wrong, by="olga")
    not_a_number = api.post(
        f"/api/v1/dead-letters/{over}/fork", json={"from_step": 1, "budgets": {"max_steps": "5"}}
    )
    assert not_a_number.status_code == 422
    assert "`max_steps` must be a number, got '5'" in not_a_number.json()["message"]
    for field, wrong in (("priority", "1"), ("context_window", True), ("max_per_key", "2")):
        body = {"kind": TEST_KIND, "input": {}, "model": "scripted:x", field: wrong}
        answer = stack.http("sam").post("/api/v1/sessions", json=body)
        assert answer.status_code == 422 and f"body.{field}" in answer.json()["message"], field
    assert api.get(f"/api/v1/dead-letters/{over}").json()["resolved_at"] is None
    assert api.get("/api/v1/sessions", params={"parent_id": over}).json() == []
    schema = api.get("/api/v1/openapi.json").json()["components"]["schemas"]
    assert schema["Fork"]["properties"]["from_step"]["type"] == "integer"


def test_a_fork_with_a_budget_its_kept_steps_used_up_is_refused(stack: Stack) -> None:
    """QA4 #3: the fork failed at once and the dead letter was marked forked."""
    over = failed(stack, ECHO, budgets={"max_steps": 1})
    api = stack.http("olga")
    for body in ({"from_step": 1}, {"from_step": 1, "budgets": {"max_steps": 1}}):
        answer = api.post(f"/api/v1/dead-letters/{over}/fork", json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "invalid_budget"
        assert (
            "steps 1..1 are kept and count against `max_steps`, which is 1; give "
            in (answer.json()["message"])
        )
        assert "give `max_steps` above 1" in answer.json()["message"]
    assert api.get(f"/api/v1/dead-letters/{over}").json()["resolved_at"] is None
    assert api.get("/api/v1/sessions", params={"parent_id": over}).json() == []


def test_an_output_past_the_tool_output_cap_or_an_empty_instruction_is_refused(
    stack: Stack,
) -> None:
    """QA4 #15: an output longer than any tool's could be, and an instruction of nothing
    (recorded, and nothing added), were taken."""
    over = failed(stack, ECHO, budgets={"max_steps": 1})
    api = stack.http("olga")
    cap = stack.deployment.settings.max_output_chars
    fork = {"from_step": 1, "budgets": {"max_steps": 5}}
    long = api.post(
        f"/api/v1/dead-letters/{over}/fork",
        json={**fork, "tool_outputs": {"s1c0": "x" * (cap + 1)}},
    )
    assert long.status_code == 422, long.text
    assert long.json()["message"] == (
        f"the output given for s1c0 is {cap + 1:,} characters; a tool's output is at most "
        f"{cap:,} (TICKWORK_MAX_OUTPUT_CHARS): give a shorter one"
    )
    empty = api.post(f"/api/v1/sessions/{over}/fork", json={**fork, "append_instruction": " "})
    assert empty.status_code == 422 and "`append_instruction` is empty" in empty.json()["message"]
    for prompt in ("", " \n"):
        blank = api.post(
            f"/api/v1/dead-letters/{over}/fork", json={**fork, "system_prompt": prompt}
        )
        assert blank.status_code == 422, blank.text
        assert "`system_prompt` is empty" in blank.json()["message"]
    assert api.get(f"/api/v1/dead-letters/{over}").json()["resolved_at"] is None
    at_the_cap = api.post(
        f"/api/v1/dead-letters/{over}/fork", json={**fork, "tool_outputs": {"s1c0": "x" * cap}}
    )
    assert at_the_cap.status_code == 201, at_the_cap.text


def test_a_session_fork_resolves_the_sessions_dead_letter(stack: Stack) -> None:
    """QA4 #10: POST /sessions/{id}/fork left the dead letter open while its show listed
    the fork; it resolves it as the dead letter's fork does, `again` for a second."""
    over = failed(stack, ECHO, budgets={"max_steps": 1})
    api = stack.http("olga")
    body = {"from_step": 1, "budgets": {"max_steps": 5}}
    first = api.post(f"/api/v1/sessions/{over}/fork", json=body)
    assert first.status_code == 201, first.text
    letter = api.get(f"/api/v1/dead-letters/{over}").json()
    assert letter["resolution"]["state"] == "forked" and letter["resolution"]["by"] == "olga"
    assert [f["id"] for f in letter["forks"]] == [first.json()["id"]]
    unresolved = api.get("/api/v1/dead-letters", params={"unresolved": "true"}).json()
    assert over not in [d["session_id"] for d in unresolved]

    refused = api.post(f"/api/v1/sessions/{over}/fork", json=body)
    assert refused.status_code == 409 and refused.json()["message"].endswith(
        "; fork it once more on purpose with `again`"
    )
    again = api.post(f"/api/v1/sessions/{over}/fork", json={**body, "again": True})
    assert again.status_code == 201, again.text
    rows = [
        json.loads(line)
        for line in api.get("/api/v1/dead-letters/export").text.splitlines()
        if json.loads(line)["session_id"] == over
    ]
    assert [r["forks"] for r in rows] == [[first.json()["id"], again.json()["id"]]]
    assert api.post(f"/api/v1/sessions/{over}/fork", json={**body, "again": 1}).status_code == 422


def test_dead_letter_errors(stack: Stack) -> None:
    api = stack.http("olga")
    missing = api.get("/api/v1/dead-letters/999999")
    assert missing.status_code == 404 and missing.json()["code"] == "dead_letter_not_found"
    # where to look, in words for the API caller and for `tickwork --server dlq show`, which
    # prints it: neither a route nor a command
    assert missing.json()["message"] == (
        "no dead letter has id or session id '999999'; list the dead letters for their ids "
        "and session ids"
    )
    assert api.post("/api/v1/dead-letters/nope/fork", json={"from_step": 0}).status_code == 404
    bad_since = api.get("/api/v1/dead-letters", params={"since": "last tuesday"})
    assert bad_since.status_code == 422 and "since" in bad_since.json()["message"]
    bad_by = api.get("/api/v1/dead-letters/stats", params={"by": "colour"})
    assert bad_by.status_code == 422 and "query.by" in bad_by.json()["message"]
    bad_code = api.get("/api/v1/dead-letters", params={"code": "OOPS"})
    assert bad_code.status_code == 422
    # a misspelt kind answered [] where `dlq ls --kind` refused it: now as the sessions' list
    for path in ("/api/v1/dead-letters", "/api/v1/dead-letters/export"):
        typo = api.get(path, params={"kind": "nope"})
        assert typo.status_code == 422 and typo.json()["code"] == "unknown_kind", typo.text
        assert "unknown job kind 'nope'" in typo.json()["message"]
        assert "known: " in typo.json()["message"] and "repair" in typo.json()["message"]
    assert api.get("/api/v1/dead-letters", params={"kind": TEST_KIND}).status_code == 200


def test_a_session_that_has_not_failed_is_told_so_not_that_it_is_unknown(stack: Stack) -> None:
    """A dead-letter route given the id of a session the token sees that is still running
    or waiting says what the session is, where 'no dead letter has id ...' sent an operator
    looking for an id that is there; another tenant's is answered as a made-up id still
    (tests/api/test_tenancy.py)."""
    waiting = stack.waiting()
    api = stack.http("olga")
    for method, path, body in (
        ("GET", f"/api/v1/dead-letters/{waiting}", None),
        ("POST", f"/api/v1/dead-letters/{waiting}/fork", {"from_step": 0}),
        ("POST", f"/api/v1/dead-letters/{waiting}/resolve", {"reason": "done"}),
    ):
        answer = api.request(method, path, json=body)
        assert answer.status_code == 404, answer.text
        assert answer.json()["code"] == "dead_letter_not_found"
        assert answer.json()["message"] == (
            f"session {waiting} has no dead letter: it is waiting_approval, and only a failed "
            "session has one; read it, or fork it from a step, as a session"
        )
    assert stack.deployment.client.get(waiting).status.value == "waiting_approval"


def test_a_second_fork_needs_again_and_a_dead_letter_closes_without_one(stack: Stack) -> None:
    over = failed(stack, ECHO, budgets={"max_steps": 1})
    other = failed(stack, ECHO, budgets={"max_steps": 1})
    api = stack.http("olga")
    step_1 = {"from_step": 1, "budgets": {"max_steps": 5}}
    first = api.post(f"/api/v1/dead-letters/{over}/fork", json=step_1).json()

    refused = api.post(f"/api/v1/dead-letters/{over}/fork", json=step_1)
    again = api.post(f"/api/v1/dead-letters/{over}/fork", json={**step_1, "again": True})
    # a blank reason passes the body's length: the refusal named the CLI's --reason
    blank = api.post(f"/api/v1/dead-letters/{other}/dismiss", json={"reason": "  "})
    dismissed = api.post(f"/api/v1/dead-letters/{other}/dismiss", json={"reason": "noise"})
    twice = api.post(f"/api/v1/dead-letters/{other}/resolve", json={"reason": "fixed"})
    no_reason = api.post(f"/api/v1/dead-letters/{other}/resolve", json={})
    empty = api.post(f"/api/v1/dead-letters/{other}/resolve", json={"reason": ""})
    no_step = api.post(f"/api/v1/dead-letters/{other}/fork", json={"budgets": {"max_steps": 5}})

    assert refused.status_code == 409
    assert first["id"] in refused.json()["message"] and "olga" in refused.json()["message"]
    assert again.status_code == 201, again.text
    shown = api.get(f"/api/v1/dead-letters/{over}").json()
    assert [f["id"] for f in shown["forks"]] == [first["id"], again.json()["id"]]
    assert len(shown["resolution"]["forks"]) == 2
    assert dismissed.status_code == 200, dismissed.text
    assert dismissed.json()["resolution"]["state"] == "dismissed"
    assert dismissed.json()["resolution"]["by"] == "olga"
    assert twice.status_code == 409 and "already dismissed by olga" in twice.json()["message"]
    # a missing or empty reason, and a fork without its step, say what to give, not
    # pydantic's "Field required"
    for refused_body in (no_reason, empty):
        assert refused_body.status_code == 422, refused_body.text
        assert "Field required" not in refused_body.json()["message"]
        assert (
            "say why the dead letter is closed: give a `reason`" in (refused_body.json()["message"])
        )
    assert no_step.status_code == 422, no_step.text
    assert "`from_step` is missing: give the step to fork from" in no_step.json()["message"]
    assert blank.status_code == 422, blank.text
    assert blank.json()["message"] == (
        "say why the dead letter is dismissed: give a reason (reason), not a blank one"
    )


def test_export_in_every_format(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    broken = failed(stack, BROKEN)
    over = failed(stack, ECHO, budgets={"max_steps": 1})
    api = stack.http("alice")  # any role reads dead letters
    assert (
        stack.http("olga")
        .post(f"/api/v1/dead-letters/{broken}/dismiss", json={"reason": "noise"})
        .is_success
    )
    mine = {broken, over}
    columns = [name for name, _ in dl.EXPORT_COLUMNS]

    jsonl = api.get("/api/v1/dead-letters/export", params={"since": "1h"})
    assert jsonl.status_code == 200, jsonl.text
    assert jsonl.headers["content-type"] == "application/jsonl; charset=utf-8"
    assert 'filename="dead-letters.jsonl"' in jsonl.headers["content-disposition"]
    lines = [json.loads(line) for line in jsonl.text.splitlines()]
    assert all(list(line) == columns for line in lines)
    by_jsonl = {r["session_id"]: r for r in lines if r["session_id"] in mine}
    assert by_jsonl[broken]["code"] == "MODEL_ERROR" and by_jsonl[broken]["status"] == "dismissed"
    assert by_jsonl[over]["code"] == "BUDGET_STEPS" and by_jsonl[over]["steps"] == 1

    text = api.get("/api/v1/dead-letters/export", params={"format": "csv", "code": "MODEL_ERROR"})
    assert text.headers["content-type"] == "text/csv; charset=utf-8"
    rows = list(csv.DictReader(io.StringIO(text.text)))
    assert list(rows[0]) == columns and {r["code"] for r in rows} == {"MODEL_ERROR"}
    assert broken in {r["session_id"] for r in rows} and over not in {r["session_id"] for r in rows}

    binary = api.get("/api/v1/dead-letters/export", params={"format": "parquet"})
    assert binary.headers["content-type"] == "application/vnd.apache.parquet"
    table = pq.read_table(io.BytesIO(binary.content))
    assert table.column_names == columns
    assert table.schema.field("failed_at").type == pa.timestamp("us", tz="UTC")
    by_parquet = {r["session_id"]: r for r in table.to_pylist() if r["session_id"] in mine}
    # the same instant: JSON Lines writes it with a Z, as every view's date
    assert by_jsonl[over]["failed_at"].endswith("Z")
    assert by_parquet[over]["failed_at"] == datetime.fromisoformat(by_jsonl[over]["failed_at"])
    assert by_parquet[over]["tokens"] == by_jsonl[over]["tokens"] > 0

    assert api.get("/api/v1/dead-letters/export", params={"format": "xml"}).status_code == 422
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # the server runs in this process
    missing = api.get("/api/v1/dead-letters/export", params={"format": "parquet"})
    assert missing.status_code == 501 and missing.json()["code"] == "parquet_unavailable"
    assert "pip install 'tickwork[parquet]'" in missing.json()["message"]
    assert "format=parquet" in missing.json()["message"]
    # said to a client elsewhere (`tickwork --server URL dlq export`): "not installed here"
    # read as the client's own machine
    said = missing.json()["message"]
    assert "not installed on the tickwork server" in said and " here" not in said, said
    assert "format=csv" in said, said


def test_timeline_by_cause(stack: Stack) -> None:
    before = stack.http("olga").get("/api/v1/dead-letters/timeline").json()
    failed(stack, ECHO, budgets={"max_steps": 1})
    failed(stack, BROKEN)
    api = stack.http("olga")
    days = api.get("/api/v1/dead-letters/timeline").json()
    assert days["bucket"] == "day" and len(days["buckets"]) == 30
    today = datetime.now(UTC).date().isoformat()
    assert days["buckets"][-1].startswith(today) and days["buckets"][-1].endswith("T00:00:00Z")
    assert len(set(days["buckets"])) == 30 and days["buckets"] == sorted(days["buckets"])

    def last(data: dict[str, Any], code: str) -> int:
        counts = {c["code"]: c["counts"] for c in data["codes"]}
        return counts.get(code, [0])[-1]

    for code in ("BUDGET_STEPS", "MODEL_ERROR"):  # other tests of the stack add theirs too
        assert last(days, code) >= last(before, code) + 1
    assert days["total"] == sum(c["total"] for c in days["codes"])
    assert all(c["total"] == sum(c["counts"]) for c in days["codes"])
    totals = [c["total"] for c in days["codes"]]
    assert totals == sorted(totals, reverse=True)

    hours = api.get("/api/v1/dead-letters/timeline", params={"bucket": "hour", "since": "2h"})
    assert hours.status_code == 200 and len(hours.json()["buckets"]) == 3
    assert last(hours.json(), "MODEL_ERROR") >= 1
    too_long = api.get("/api/v1/dead-letters/timeline", params={"bucket": "hour", "since": "30d"})
    assert too_long.status_code == 422 and "bucket=day" in too_long.json()["message"]
    future = api.get("/api/v1/dead-letters/timeline", params={"since": "2999-01-01"})
    assert future.status_code == 422 and "after now" in future.json()["message"]
    assert api.get("/api/v1/dead-letters/timeline", params={"bucket": "week"}).status_code == 422


def test_digits_naming_two_letters_are_refused_and_hash_names_a_number(stack: Stack) -> None:
    """A session whose id is all digits could not be named while a dead letter had that
    number: the digits were read as the number first."""
    api = stack.http("olga")
    other = failed(stack, BROKEN)
    number = api.get(f"/api/v1/dead-letters/{other}").json()["id"]
    digits = failed(stack, BROKEN, id=str(number))
    mine = api.get("/api/v1/dead-letters", params={"session_id": digits}).json()[0]["id"]
    both = api.get(f"/api/v1/dead-letters/{number}")
    assert both.status_code == 422 and both.json()["code"] == "invalid_input", both.text
    assert f"'#{number}' or '#{mine}'" in both.json()["message"]
    assert api.get(f"/api/v1/dead-letters/%23{number}").json()["session_id"] == other
    assert api.get(f"/api/v1/dead-letters/%23{mine}").json()["session_id"] == digits
    gone = api.get("/api/v1/dead-letters/%23987654321")
    assert gone.status_code == 404 and gone.json()["code"] == "dead_letter_not_found"
    # `#N` is a number only, never a session id: the refusal says so, as `dlq show` does
    assert gone.json()["message"].startswith("no dead letter has number 987654321;"), gone.text
    forked = api.post(f"/api/v1/dead-letters/%23{mine}/fork", json={"from_step": 0})
    assert forked.status_code == 201 and forked.json()["parent_id"] == digits


def test_the_dead_letter_reads_are_stated_as_they_answer(stack: Stack) -> None:
    """`GET /dead-letters/{key}`, `/stats` and `/timeline` were stated as objects of
    anything: a client generated from the document had no session, `fork_budgets`, forks,
    counts nor buckets to read. Each is stated, and what they answer holds to it: an open
    dead letter, one forked (with its fork), every grouping, one grouping, and both buckets."""
    import jsonschema

    broken = failed(stack, BROKEN)
    over = failed(stack, ECHO, budgets={"max_steps": 1})
    api = stack.http("olga")
    forked = api.post(f"/api/v1/dead-letters/{broken}/fork", json={"from_step": 0})
    assert forked.status_code == 201, forked.text
    schema = api.get("/api/v1/openapi.json").json()

    def given(path: str) -> dict[str, Any]:
        answer = schema["paths"][path]["get"]["responses"]["200"]
        return answer["content"]["application/json"]["schema"]

    def stated(path: str) -> jsonschema.Draft202012Validator:
        return jsonschema.Draft202012Validator(
            {**given(path), "components": schema["components"]},
            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
        )

    answers = {
        "/api/v1/dead-letters/{key}": [
            api.get(f"/api/v1/dead-letters/{over}"),
            api.get(f"/api/v1/dead-letters/{broken}"),
        ],
        "/api/v1/dead-letters/stats": [
            api.get("/api/v1/dead-letters/stats"),
            api.get("/api/v1/dead-letters/stats", params={"by": "last_tool", "unresolved": True}),
        ],
        "/api/v1/dead-letters/timeline": [
            api.get("/api/v1/dead-letters/timeline", params={"bucket": b}) for b in ("day", "hour")
        ],
    }
    for path, got in answers.items():
        assert given(path).get("$ref", "").startswith("#/components/"), given(path)
        for answer in got:
            assert answer.status_code == 200, answer.text
            assert not list(stated(path).iter_errors(answer.json())), (path, answer.json())
    shown = answers["/api/v1/dead-letters/{key}"]
    assert shown[0].json()["fork_budgets"] == {"max_steps": 2}
    assert [f["id"] for f in shown[1].json()["forks"]] == [forked.json()["id"]]
    unresolved = answers["/api/v1/dead-letters/stats"][1].json()["by"]["last_tool"]
    assert "echo" in {g["value"] for g in unresolved}, unresolved
