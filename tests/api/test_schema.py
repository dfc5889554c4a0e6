"""Issue 12: the OpenAPI schema documents every error a route may answer, with its body, and
the docs page serves Swagger UI from tickwork itself under a CSP that allows only self."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Status

from tests.api.conftest import TEST_KIND, Stack
from tickwork.parsing import SINCE_PATTERN, since

ERROR = "#/components/schemas/ErrorBody"


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if path.startswith("/api/v1/")
    ]


def test_every_route_documents_its_errors_with_the_error_body(stack: Stack) -> None:
    schema = stack.http().get("/api/v1/openapi.json").json()
    assert set(schema["components"]["schemas"]["ErrorBody"]["required"]) == {"code", "message"}
    found = operations(schema)
    assert len(found) >= 14
    for method, path, op in found:
        wanted = {"401", "403", "422"}
        if "{" in path:
            wanted.add("404")
        if method == "POST":
            wanted |= {"404", "409", "413"} if "{" in path else {"409", "413"}
        missing = wanted - set(op["responses"])
        assert not missing, (method, path, missing)
        for status in wanted:
            content = op["responses"][status]["content"]["application/json"]["schema"]
            assert content == {"$ref": ERROR}, (method, path, status, content)
    assert "bearer" in str(schema["components"]["securitySchemes"]).lower()


def test_a_success_states_the_media_types_the_route_sends_each_with_its_schema(
    stack: Stack,
) -> None:
    """The patch (a diff, text/x-diff) also stated an `application/json` answer with an
    empty schema: a client generated from the document (openapi-python-client) parsed the
    diff as JSON and raised. A JSON success states its schema; the patch states text only,
    and its errors JSON (not text/x-diff, as a route's error `model` is stated)."""
    schema = stack.http().get("/api/v1/openapi.json").json()
    for method, path, op in operations(schema):
        for status, answer in op["responses"].items():
            json_body = answer.get("content", {}).get("application/json")
            if status.startswith("2") and json_body is not None:
                assert json_body.get("schema"), (method, path, status, json_body)
            elif not status.startswith("2"):  # an error is JSON whatever the route's success
                assert set(answer["content"]) == {"application/json"}, (method, path, status)
    patch = schema["paths"]["/api/v1/sessions/{session_id}/patch"]["get"]["responses"]["200"]
    assert patch["content"] == {"text/x-diff": {"schema": {"type": "string"}}}, patch


def test_the_docs_page_and_its_assets_come_from_tickwork(stack: Stack) -> None:
    http = stack.http()
    page = http.get("/api/v1/docs")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "unsafe-inline" not in policy
    assert "cdn" not in page.text and "http" not in page.text
    assert "<script>" not in page.text  # no inline script: the CSP would refuse it
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert len(assets) >= 3
    for asset in assets:
        assert asset.startswith("/static/"), asset
        answer = http.get(asset)
        assert answer.status_code == 200 and answer.content, asset
        assert "default-src 'self'" in answer.headers["content-security-policy"]


def test_the_page_at_its_file_path_holds_the_bounds_as_at_the_root(stack: Stack) -> None:
    """/static/index.html was the raw file: `JSON.parse("__BOUNDS__")` threw and the page's
    modules failed to load. It answers what / answers, the API's bounds in its meta tag."""
    import html
    import json

    from tickwork.api.bodies import page_bounds

    http = stack.http()
    root = http.get("/")
    assert root.status_code == 200, root.text
    bounds = html.escape(json.dumps(page_bounds()), quote=True)
    assert f'<meta name="tickwork-bounds" content="{bounds}">' in root.text
    at_file = http.get("/static/index.html")
    assert at_file.status_code == 200, at_file.text
    assert "__BOUNDS__" not in at_file.text
    assert at_file.text == root.text
    assert "default-src 'self'" in at_file.headers["content-security-policy"]


def test_a_wrong_method_is_405_naming_every_method_the_path_takes(stack: Stack) -> None:
    http = stack.http("olga")
    for method, path, allowed in [
        ("DELETE", "/api/v1/sessions", "GET, POST"),
        ("PUT", "/api/v1/sessions/some-id", "GET"),
        ("GET", "/api/v1/sessions/some-id/cancel", "POST"),
        ("POST", "/healthz", "GET, HEAD"),
    ]:
        answer = http.request(method, path)
        assert answer.status_code == 405, (method, path)
        assert answer.headers["allow"] == allowed, (method, path)
        assert answer.json() == {
            "code": "method_not_allowed",
            "message": f"{method} {path}: this path takes {allowed} only",
        }


def test_an_unknown_route_s_404_names_what_was_asked(stack: Stack) -> None:
    answer = stack.http("olga").get("/tw/api/v1/me")
    assert answer.status_code == 404
    assert answer.json() == {
        "code": "not_found",
        "message": "no such endpoint: GET /tw/api/v1/me; see /api/v1/docs for the API's routes",
    }


def test_the_decision_schema_says_which_fields_go_with_which_kind() -> None:
    """A client generated from the schema knows what the server checks: `arguments` with an
    edit only, `output` with provide_output only, `feedback` with reject only."""
    import jsonschema
    from pydantic import ValidationError

    from tickwork.api.bodies import Decide

    schema = Decide.model_json_schema()
    fingerprint = "0" * 64
    bodies = [
        {"kind": "approve"},
        {"kind": "approve", "arguments": {"a": 1}},
        {"kind": "edit"},
        {"kind": "edit", "arguments": {"a": 1}},
        {"kind": "edit", "arguments": None},
        {"kind": "reject", "feedback": "no"},
        {"kind": "approve", "feedback": "no"},
        {"kind": "provide_output"},
        {"kind": "provide_output", "output": "it ran"},
        {"kind": "reject", "output": "x"},
    ]
    for body in bodies:
        body = {**body, "fingerprint": fingerprint}
        try:
            Decide.model_validate(body)
            server = True
        except ValidationError:
            server = False
        documented = jsonschema.Draft202012Validator(schema).is_valid(body)
        assert documented == server, (body, documented, server)


#: `since` texts the server takes, then texts it refuses; the schema must say the same
SINCE_TAKEN = [
    "",
    "90s",
    "1.5h",
    "3d",
    "99999d",
    "9999999999s",
    "2026-01-31",
    "2024-02-29",
    "2000-02-29",
    "2026-01-31T12:00",
    "2026-01-31 12:00:00.123456789+01:00",
    "2026-01-31t12:00:05z",
    "0001-01-01T00:00+01:00",
    "9999-12-31T23:00-01:00",
]
SINCE_REFUSED = [
    "2026-02-29",
    "1900-02-29",
    "2026-04-31",
    "0000-01-01",
    "2026-01-31T24:00",
    "2026-01-31T12:00:60",
    "2026-01-31T12:00+24:00",
    "2026-01-31T12",
    "2026-01-31+01:00",
    "20260131",
    "2026-W05",
    "2026-01-31x12:00",
    " 2h",
    "2 h",
    "100000d",
    "99999999999s",
    "\u0663d",  # an Arabic-Indic 3: Python's \d and float() take it, the schema does not
    "-2h",
    "yesterday",
]


def test_since_takes_exactly_what_its_schema_says(stack: Stack) -> None:
    """Each route's `since` is stated by a pattern: a text it matches is taken, any other
    is a 422 naming `since` (it was any string up to 100 characters, and the server took
    less and more: `20260131`, `2026-W05`, ` 2h`, refused `2026-02-29`)."""
    import jsonschema

    http = stack.http("olga")
    schema = http.get("/api/v1/openapi.json").json()
    found = {
        path: parameter["schema"]
        for path, item in schema["paths"].items()
        for parameter in item.get("get", {}).get("parameters", [])
        if parameter["name"] == "since"
    }
    assert set(found) >= {"/api/v1/dead-letters", "/api/v1/dead-letters/stats"}, found
    for path, stated_schema in found.items():
        stated = jsonschema.Draft202012Validator(stated_schema)
        assert "pattern" in str(stated_schema), (path, stated_schema)
        for text in SINCE_TAKEN + SINCE_REFUSED:
            documented = stated.is_valid(text)
            assert documented == (text in SINCE_TAKEN), (path, text)
            if path.endswith("/timeline"):
                continue  # a schema-valid since may still be too far back for its buckets
            answer = http.get(path, params={"since": text})
            if documented:
                assert answer.status_code == 200, (path, text, answer.text)
            else:
                assert answer.status_code == 422, (path, text, answer.text)
                assert "since" in answer.json()["message"], answer.text


@given(
    st.from_regex(SINCE_PATTERN, fullmatch=True)
    | st.text(alphabet="0123456789-:.+TtZz smhdw", max_size=40)
)
def test_since_parses_every_text_its_pattern_matches_and_no_other(text: str) -> None:
    now = datetime(2026, 12, 5, tzinfo=UTC)
    if re.fullmatch(SINCE_PATTERN, text):
        at = since(text, now=now)
        assert at is None or at.tzinfo is UTC
    else:
        with pytest.raises(InvalidInput, match="since"):
            since(text, now=now)


def _texts(node: Any, components: dict[str, Any], seen: set[str]) -> Iterator[dict[str, Any]]:
    """Every string schema a client fills in under `node`, following references."""
    if isinstance(node, list):
        for item in node:
            yield from _texts(item, components, seen)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("$ref", "")
    if ref.startswith("#/components/schemas/") and ref not in seen:
        seen.add(ref)
        yield from _texts(components[ref.rsplit("/", 1)[1]], components, seen)
    if node.get("type") == "string" and not {"enum", "const", "format"} & set(node):
        yield node
    if "propertyNames" in node:
        yield {"type": "string", **node["propertyNames"]}
    for key in ("properties", "$defs"):
        yield from _texts(list(node.get(key, {}).values()), components, seen)
    for key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"):
        yield from _texts(node.get(key), components, seen)


def test_every_text_a_client_sends_is_stated_to_hold_no_nul(stack: Stack) -> None:
    """The server refuses NUL and lone surrogates in every query, path and body text; the
    schema says so for each (a pattern for NUL, the body's description for surrogates)."""
    import jsonschema

    schema = stack.http().get("/api/v1/openapi.json").json()
    components = schema["components"]["schemas"]
    checked, bodies = 0, set()
    for _, _, op in operations(schema):
        given = [p["schema"] for p in op.get("parameters", [])]
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body:
            given.append(body["schema"])
            bodies |= {r.rsplit("/", 1)[1] for r in re.findall(r"'\$ref': '([^']+)'", str(body))}
        for text in _texts(given, components, set()):
            assert not jsonschema.Draft202012Validator(text).is_valid("a\x00b"), text
            checked += 1
    assert checked >= 40 and {"Decide", "Fork", "Closing"} <= bodies
    for name in bodies:
        assert "lone UTF-16 surrogate" in components[name]["description"], name


#: (who, route, body, the field the 422 names, what is wrong)
UNSTORABLE = [
    (
        "sam",
        "/api/v1/sessions",
        {"kind": "repair", "input": {"test_command": "pytest", "goal": "a\x00b"}},
        "goal",
        "NUL",
    ),
    ("sam", "/api/v1/sessions", {"kind": "mine", "input": {"a\x00": 1}}, "key", "NUL"),
    (
        "alice",
        "/api/v1/sessions/{session_id}/calls/{call_id}/decision",
        {"kind": "reject", "fingerprint": "0" * 64, "feedback": "no\x00"},
        "feedback",
        "NUL",
    ),
    ("olga", "/api/v1/sessions/{session_id}/fork", {"from_step": 0, "id": "a\x00"}, "id", "NUL"),
    (
        "olga",
        "/api/v1/sessions/{session_id}/fork",
        {"from_step": 0, "append_instruction": "go \ud800 on"},
        "append_instruction",
        "surrogate",
    ),
    ("olga", "/api/v1/dead-letters/{key}/resolve", {"reason": "\x00"}, "reason", "NUL"),
]


@pytest.mark.parametrize(("who", "route", "body", "field", "wrong"), UNSTORABLE)
def test_a_text_the_schema_refuses_is_a_422_naming_its_field(
    stack: Stack, who: str, route: str, body: dict[str, Any], field: str, wrong: str
) -> None:
    import json

    import jsonschema

    schema = stack.http().get("/api/v1/openapi.json").json()
    given = schema["paths"][route]["post"]["requestBody"]["content"]["application/json"]
    stated = jsonschema.Draft202012Validator(
        {**given["schema"], "components": schema["components"]}
    )
    if wrong == "NUL":  # a lone surrogate is said in words: no pattern every validator reads
        assert not stated.is_valid(body), body
    path = route.format(session_id="s-none", call_id="s1c0", key="1")
    answer = stack.http(who).post(
        path,
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 422, answer.text
    message = answer.json()["message"]
    assert field in message and wrong in message and "Value error" not in message, message


def test_the_session_views_events_say_where_their_ids_are(stack: Stack) -> None:
    """A session's view gives its events without ids (`"id": null`), which a client took
    for the `after` of the events page or the stream with nothing in the schema to say
    otherwise: the schema says the events page gives them, and it does, in the same order."""
    session_id = stack.waiting()
    http = stack.http("olga")
    view = http.get(f"/api/v1/sessions/{session_id}").json()
    assert view["events"] and all(e["id"] is None for e in view["events"])
    said = http.get("/api/v1/openapi.json").json()["components"]["schemas"]["SessionView"]
    assert (
        "GET /api/v1/sessions/{id}/events pages them with their ids"
        in (said["properties"]["events"]["description"])
    )
    page = http.get(f"/api/v1/sessions/{session_id}/events").json()["events"]
    assert [e["kind"] for e in page] == [e["kind"] for e in view["events"]]
    assert all(isinstance(e["id"], int) for e in page)


def _stated_answer(schema: dict[str, Any], path: str, status: str = "200") -> Any:
    """A validator of what the document states `GET path` answers with `status`."""
    import jsonschema

    given = schema["paths"][path]["get"]["responses"][status]["content"]["application/json"]
    return jsonschema.Draft202012Validator(
        {**given["schema"], "components": schema["components"]},
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )


def test_the_approvals_answers_are_stated_call_by_call(stack: Stack, tmp_path: Path) -> None:
    """Both approvals routes were stated as objects of anything: a client generated from the
    document had no `calls`, `fingerprint` nor `preview` to read, though a decision needs
    the fingerprint. Each answer is stated (`Waiting`, with its `WaitingCall`s), and what the
    routes answer holds to it: a write with its preview, a call in doubt, a call without a
    preview, with `preview=false`, and a session that waits no more."""
    from datetime import timedelta

    from tickwork.worker.tick.runtime import utc_now

    from tests.api.test_page import _submit_fix
    from tickwork.testing.store_ticks import Clock, in_doubt_call, new_session

    http = stack.http("alice")
    schema = http.get("/api/v1/openapi.json").json()
    call = schema["components"]["schemas"]["WaitingCall"]
    assert {"call_id", "fingerprint", "arguments", "state", "preview"} <= set(call["required"])
    assert call["properties"]["fingerprint"]["type"] == "string"

    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    stack.deployment.settings.workspace_roots = [tmp_path]
    try:
        answer = _submit_fix(stack, workspace, "def add(a, b):\n    return a + b\n")
    finally:
        stack.deployment.settings.workspace_roots = []
    assert answer.status_code == 201, answer.text
    written = answer.json()["id"]
    danger = stack.waiting()
    assert stack.wait(written)["status"] == "waiting_approval"
    store = stack.deployment.client.store
    clock = Clock(utc_now() + timedelta(hours=1))  # no relay hands its ticks to the worker
    doubted = f"doubt-{uuid.uuid4().hex[:8]}"
    store.create(new_session(doubted, now=clock()), now=clock())
    in_doubt_call(store, doubted, clock)
    finished = stack.submit([{"content": "done"}])
    stack.wait(finished, Status.COMPLETED)

    one = _stated_answer(schema, "/api/v1/approvals/{session_id}")
    for session_id, preview in [(written, True), (danger, True), (doubted, True), (written, False)]:
        shown = http.get(f"/api/v1/approvals/{session_id}", params={"preview": preview})
        assert shown.status_code == 200, shown.text
        assert not list(one.iter_errors(shown.json())), (session_id, shown.json())
        [waiting] = shown.json()["calls"]
        assert (waiting["preview"] is not None) == (preview and session_id == written), waiting
    assert http.get(f"/api/v1/approvals/{doubted}").json()["calls"][0]["state"] == "in_doubt"
    done = http.get(f"/api/v1/approvals/{finished}").json()
    assert done["calls"] == [] and done["waiting_since"] is None
    assert not list(one.iter_errors(done)), done
    queue = http.get("/api/v1/approvals", params={"limit": 200}).json()
    assert {written, danger, doubted} <= {w["session"]["id"] for w in queue}
    assert not list(_stated_answer(schema, "/api/v1/approvals").iter_errors(queue))


def test_a_waiting_call_s_decision_and_observation_are_stated_as_the_store_keeps_them() -> None:
    """The approvals' calls are the store's, each with its latest decision and observation
    without their `call_id`: the stated answer names every field they carry, no other."""
    from tickwork.fsm.values import Decision, Observation, ToolCall

    from tickwork.api.answers import CallDecision, CallObservation, WaitingCall

    assert set(CallDecision.model_fields) == set(Decision.model_fields) - {"call_id"}
    kept = {n for n, f in Observation.model_fields.items() if not f.exclude} - {"call_id"}
    assert set(CallObservation.model_fields) == kept
    views = {"blocked", "observation", "decision", "as_edited", "preview"}
    assert set(WaitingCall.model_fields) == set(ToolCall.model_fields) | views


def test_the_headers_a_client_reads_are_stated_where_they_come(stack: Stack) -> None:
    """A stored submit or fork answers `Location` (and a replay `Idempotent-Replayed`),
    a 429 or a busy server's 503 `Retry-After`, as docs/API.md says: the document named
    none of them. Each is stated where it comes, and a submit sent twice with a key
    answers the stated headers."""
    schema = stack.http().get("/api/v1/openapi.json").json()
    for method, path, op in operations(schema):
        answers = op["responses"]
        if method == "POST" and "201" in answers:
            assert set(answers["201"]["headers"]) == {"Location", "Idempotent-Replayed"}, path
        for status in {"429", "503"} & set(answers):
            assert set(answers[status]["headers"]) == {"Retry-After"}, (method, path, status)
    created = {p for m, p, op in operations(schema) if "201" in op["responses"]}
    assert created == {
        "/api/v1/sessions",
        "/api/v1/sessions/{session_id}/fork",
        "/api/v1/dead-letters/{key}/fork",
    }

    body = {"kind": TEST_KIND, "input": {}, "model": stack.deployment.script([{"content": "ok"}])}
    key = {"Idempotency-Key": f"schema-{uuid.uuid4()}"}
    first, again = (
        stack.http("sam").post("/api/v1/sessions", json=body, headers=key) for _ in "12"
    )
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    session_id = first.json()["id"]
    assert (
        first.headers["location"] == again.headers["location"] == f"/api/v1/sessions/{session_id}"
    )
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"


def test_the_tenant_s_metrics_are_in_the_document_as_they_answer(stack: Stack) -> None:
    """docs/API.md sends a token to `/api/v1/metrics` for its tenant's series, and the
    document left the route out: a client generated from it had no way to ask. It states
    the route, its text answer and its errors, and the route answers what it states."""
    schema = stack.http().get("/api/v1/openapi.json").json()
    stated = schema["paths"]["/api/v1/metrics"]["get"]
    assert stated["responses"]["200"]["content"] == {"text/plain": {"schema": {"type": "string"}}}
    assert [p["name"] for p in stated["parameters"]] == ["tenant"]
    http = stack.http("sam")
    answer = http.get("/api/v1/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].split(";")[0] == "text/plain"
    assert "tickwork_tenant_sessions" in answer.text
    other = http.get("/api/v1/metrics", params={"tenant": "not-mine"})
    assert other.status_code == 404 and other.json()["code"] == "tenant_not_found"
    assert "tenant_not_found" in stated["responses"]["404"]["description"]


def test_a_head_s_fields_are_stated_required_as_every_head_has_them(stack: Stack) -> None:
    """Every head the API answers (a submit's, a decision's, a listing's, a view's) holds
    every field, and the document stated all but five as optional: a client generated from
    it read `status` as "a status or nothing" (openapi-python-client: `Status | Unset`).
    A head's and its budgets' fields are stated required, and a head answered has them."""
    schema = stack.http().get("/api/v1/openapi.json").json()
    components = schema["components"]["schemas"]
    for name in ("Head", "Listed", "Budgets"):
        stated = components[name]
        assert set(stated["required"]) == set(stated["properties"]), name
    session_id = stack.submit([{"content": "done"}])
    stack.wait(session_id, Status.COMPLETED)
    http = stack.http("sam")
    shown = http.get(f"/api/v1/sessions/{session_id}").json()["head"]
    listed = http.get("/api/v1/sessions", params={"id_prefix": session_id}).json()
    assert [h["id"] for h in listed] == [session_id]
    for head in (shown, listed[0]):
        assert set(head) == set(components["Listed"]["properties"]), head
        assert set(head["budgets"]) == set(components["Budgets"]["properties"]), head


def test_the_document_is_valid_openapi(stack: Stack) -> None:
    """A third party validates the document before generating a client from it (`moto[server]`
    of the test extra brings openapi-spec-validator, which does so)."""
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(stack.http().get("/api/v1/openapi.json").json())
