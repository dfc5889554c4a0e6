"""Sessions through the API: submit, show (as `tickwork show --json`), list, cancel, fork,
and the errors of each as JSON with a code and a message."""

from __future__ import annotations

import json
import sys
import uuid

from tickwork.fsm.values import Status

from tests.api.conftest import DANGER, TEST_KIND, Stack
from tickwork import views
from tickwork.api.bodies import MAX_MODEL_SPEC

ECHO = [
    {"content": "say it", "tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]},
    {"content": "said"},
]


def test_a_submitted_session_runs_and_shows_as_the_cli_shows_it(stack: Stack) -> None:
    session_id = stack.submit(ECHO, budgets={"max_steps": 7})
    head = stack.wait(session_id, Status.COMPLETED)
    assert head["final_answer"] == "said" and head["budgets"]["max_steps"] == 7
    shown = stack.http("alice").get(f"/api/v1/sessions/{session_id}")
    assert shown.status_code == 200
    whole = views.session(stack.deployment.client.load(session_id))
    assert shown.json() == {
        **whole,
        "lease": None,
        "forks": [],
        "tree": None,
        "earlier_patches": [],
    }
    assert [c["observation"]["content"] for c in shown.json()["steps"][0]["calls"]] == ["hi"]
    # the token's holder submitted it: stored, and shown wherever the session is
    assert shown.json()["head"]["submitted_by"] == "sam"
    assert stack.deployment.client.get(session_id).submitted_by == "sam"
    listed = stack.http("olga").get("/api/v1/sessions", params={"limit": 500}).json()
    assert next(h for h in listed if h["id"] == session_id)["submitted_by"] == "sam"


def test_submit_answers_201_with_the_head(stack: Stack) -> None:
    session_id = f"fresh-{uuid.uuid4().hex[:8]}"
    answer = stack.http("sam").post(
        "/api/v1/sessions",
        json={
            "kind": TEST_KIND,
            "input": {},
            "model": stack.deployment.script(ECHO),
            "id": session_id,
        },
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["id"] == session_id and answer.json()["status"] == "ready"
    assert answer.headers["location"] == f"/api/v1/sessions/{session_id}"
    keyed = {"kind": TEST_KIND, "model": stack.deployment.script(ECHO), "priority": 3}
    keyed |= {"concurrency_key": f"repo-{session_id}"}
    first = stack.http("sam").post("/api/v1/sessions", json=keyed)
    second = stack.http("sam").post("/api/v1/sessions", json=keyed)
    assert first.status_code == second.status_code == 201, second.text
    assert (first.json()["priority"], first.json()["max_per_key"]) == (3, 1)
    # one of a key at a time: the second waits, queued, unless the first already finished
    assert (
        second.json()["status"] == "queued"
        or stack.deployment.client.get(first.json()["id"]).status.terminal
    )
    again = stack.http("sam").post(
        "/api/v1/sessions",
        json={"kind": TEST_KIND, "model": stack.deployment.script(ECHO), "id": session_id},
    )
    assert again.status_code == 409, again.text
    assert again.json()["code"] == "session_exists"


def test_bad_submissions_are_422_and_say_what_was_wrong(stack: Stack) -> None:
    script = stack.deployment.script(ECHO)
    cases = [
        ({"input": {}}, "body.kind: Field required"),
        ({"kind": TEST_KIND, "model": script, "colour": "red"}, "body.colour: Extra inputs"),
        (
            {"kind": TEST_KIND, "model": script, "budgets": {"max_stepz": 3}},
            "unknown budget max_stepz",
        ),
        ({"kind": TEST_KIND, "model": script, "budgets": {"max_steps": -1}}, "max_steps"),
        (
            {"kind": TEST_KIND, "model": script, "budgets": {"max_tokens": 2**70}},
            "`max_tokens` must be at most 9,007,199,254,740,991",
        ),
        (
            {"kind": TEST_KIND, "model": script, "budgets": {"max_steps": 2**62}},
            "`max_steps` must be at most 2,147,483,647",
        ),
        (
            {"kind": TEST_KIND, "model": script, "budgets": {"max_cost_usd": 1e308}},
            "`max_cost_usd` must be at most 1,000,000,000",
        ),
        (
            {"kind": TEST_KIND, "model": script, "budgets": {"deadline_s": 1e308}},
            "`deadline_s` must be at most",
        ),
        ({"kind": "nope"}, "unknown job kind 'nope'"),
        ({"kind": "os:path", "model": script}, "not one this deployment names"),
        ({"kind": TEST_KIND, "model": script, "id": "no spaces please"}, "may only hold"),
        ({"kind": TEST_KIND, "model": script, "id": "trailing-newline\n"}, "may only hold"),
        ({"kind": TEST_KIND, "model": "scripted:/no/such/script.json"}, "script"),
        ({"kind": TEST_KIND, "model": "gpt-4o"}, "unknown model spec 'gpt-4o': use openai:MODEL"),
        # the field, in the API's words: no CLI flag
        (
            {"kind": TEST_KIND, "model": "openai:my-local"},
            "'openai:my-local' has no price, so `max_cost_usd` ($",
        ),
        # a budget in dollars as given, not in exponent form ($1.5e+06, $5e-07)
        (
            {"kind": TEST_KIND, "model": "openai:my-local", "budgets": {"max_cost_usd": 1.5e6}},
            "so `max_cost_usd` ($1500000) cannot limit its cost",
        ),
        (
            {"kind": TEST_KIND, "model": "openai:my-local", "budgets": {"max_cost_usd": 5e-7}},
            "so `max_cost_usd` ($0.0000005) cannot limit its cost",
        ),
        ({"kind": TEST_KIND, "model": "openai:my-local", "price": [-1, 2]}, "body.price.0"),
        ({"kind": TEST_KIND, "model": script, "context_window": 10}, "body.context_window"),
        ({"kind": TEST_KIND, "model": script, "context_window": "big"}, "body.context_window"),
        ({"kind": TEST_KIND, "model": script, "priority": 1001}, "body.priority"),
        # the body's fields, not the CLI's flags (it said "give --concurrency-key KEY with it")
        (
            {"kind": TEST_KIND, "model": script, "max_per_key": 2},
            "max_per_key needs a concurrency key: give concurrency_key with it",
        ),
        ({"kind": TEST_KIND, "model": script, "concurrency_key": "a b"}, "concurrency key 'a b'"),
        # an empty key (an unset shell variable) ran unkeyed; the schema's pattern refuses it
        (
            {"kind": TEST_KIND, "model": script, "concurrency_key": ""},
            "the concurrency key (concurrency_key) is empty",
        ),
        (
            {"kind": TEST_KIND, "model": script, "concurrency_key": "k", "max_per_key": 0},
            "body.max_per_key",
        ),
    ]
    for body, fragment in cases:
        answer = stack.http("sam").post("/api/v1/sessions", json=body)
        assert answer.status_code == 422, (body, answer.text)
        error = answer.json()
        assert set(error) >= {"code", "message"}, error
        assert fragment in error["message"], (fragment, error)
        if "concurrency" in fragment:  # an API client sent fields: no CLI flag to give
            assert "--" not in error["message"], error
        if "job kind" in fragment:  # one mistake, one code: an unknown kind, named or imported
            assert error["code"] == "unknown_kind", error
    # JSON from JavaScript or Python may hold NaN: not a price, whatever its bounds say
    nan = f'{{"kind": "{TEST_KIND}", "model": "openai:my-local", "price": [NaN, 2]}}'
    answer = stack.http("sam").post(
        "/api/v1/sessions", content=nan, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    assert "body.price.0: Input should be a finite number" in answer.json()["message"]
    answer = stack.http("sam").post(
        "/api/v1/sessions", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 422 and answer.json()["code"] == "invalid_input"


def test_text_the_database_cannot_hold_is_named_not_blamed_on_the_database(stack: Stack) -> None:
    script = json.dumps(stack.deployment.script(ECHO))
    sink = json.dumps(str(stack.deployment.sink))
    cases = [
        ('{"goal": "fix\\u0000it"}', "more.goal contains a NUL byte"),
        ('{"goal": "fix \\udcff it"}', "more.goal is not valid UTF-8"),
        ('{"notes": ["x", {"a\\u0000": 1}]}', "more.notes[1] contains a NUL byte"),
    ]
    for extra, fragment in cases:
        body = f'{{"kind": "{TEST_KIND}", "model": {script}, "input": {{"sink": {sink}, '
        body += f'"more": {extra}}}}}'
        answer = stack.http("sam").post(
            "/api/v1/sessions", content=body.encode(), headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 422, (body, answer.text)
        assert fragment in answer.json()["message"], answer.text


def test_a_submitted_price_never_lowers_what_the_budget_and_the_quota_count(
    stack: Stack,
) -> None:
    """The submitter would choose what its cost budget and its tenant's dollar quota count:
    a price below the deployment's is refused, and so is any price for a model the
    deployment has none for; a higher one stands."""
    free = "may not price a model the deployment has no price for"
    cases = [
        ({"model": "openai:gpt-4o", "price": [0, 0]}, "below the configured price"),
        ({"model": "openai:gpt-4o", "price": [2.5, 9]}, "in completion; a given price may"),
        ({"model": "openai:my-local", "price": [0.5, 1.5]}, free),
        ({"model": "openai:my-local", "price": [0, 0], "budgets": {"max_cost_usd": 0}}, free),
    ]
    for extra, fragment in cases:
        answer = stack.http("sam").post("/api/v1/sessions", json={"kind": TEST_KIND, **extra})
        assert answer.status_code == 422, (extra, answer.text)
        assert answer.json()["code"] == "invalid_input"
        assert fragment in answer.json()["message"], (fragment, answer.text)
        assert "openai:" in answer.json()["message"]  # names the model whose price it refused
    body = {"kind": TEST_KIND, "model": "openai:gpt-4o", "price": [3, 12]}
    answer = stack.http("sam").post("/api/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text
    stored = stack.deployment.client.get(answer.json()["id"])
    assert stored.config["price"] == {"prompt": 3, "completion": 12}
    # a Claude model's list price stands: its cache rates are the model's discount on it
    body = {"kind": TEST_KIND, "model": "anthropic:claude-sonnet-4-5", "price": [3, 15]}
    answer = stack.http("sam").post("/api/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text


def test_a_submitted_price_may_give_the_cached_rate_checked_as_the_others(
    stack: Stack,
) -> None:
    """The body's `price` took [prompt, completion] only: cache reads were billed at the
    model's discount on the given prompt rate, with no way to say the provider's own. A
    third number is the cached rate, never below the deployment's either."""
    cases = [
        ([3, 12, 1], "in cached; a given price may"),
        ([3, 12, 1.5, 2.5, 1], "body.price: List should have at most 4 items"),
        ([3], "body.price: List should have at least 2 items"),
        ([3, 12, -1], "body.price.2"),
    ]
    for price, fragment in cases:
        body = {"kind": TEST_KIND, "model": "openai:gpt-4o", "price": price}
        answer = stack.http("sam").post("/api/v1/sessions", json=body)
        assert answer.status_code == 422, (price, answer.text)
        assert fragment in answer.json()["message"], (fragment, answer.text)
    body = {"kind": TEST_KIND, "model": "openai:gpt-4o", "price": [3, 12, 1.5]}
    answer = stack.http("sam").post("/api/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text
    stored = stack.deployment.client.get(answer.json()["id"])
    assert stored.config["price"] == {"prompt": 3, "completion": 12, "cached": 1.5}


def test_a_submitted_price_may_give_the_cache_write_rate_checked_as_the_others(
    stack: Stack,
) -> None:
    """Anthropic bills prompt tokens written to its cache at their own rate (1.25 times the
    prompt's), which the body's `price` could not give: a fourth number is it, never below
    the deployment's, stored with the session and shown with it."""
    cases = [
        ([3, 15, 0.3, 3], "in cache_write; a given price may"),
        ([3, 15, 0.3, -1], "body.price.3"),
        ([3, 15, 0.3, 2e6], "body.price.3"),
    ]
    for price, fragment in cases:
        body = {"kind": TEST_KIND, "model": "anthropic:claude-sonnet-4-5", "price": price}
        answer = stack.http("sam").post("/api/v1/sessions", json=body)
        assert answer.status_code == 422, (price, answer.text)
        assert fragment in answer.json()["message"], (fragment, answer.text)
    refused = stack.http("sam").post(
        "/api/v1/sessions",
        json={"kind": TEST_KIND, "model": "anthropic:claude-sonnet-4-5", "price": [3, 15, 0.3, 3]},
    )
    # the refusal says the cache-write rate it was given beside the configured one
    assert "$3 cache write per million tokens) is refused" in refused.json()["message"]
    body = {"kind": TEST_KIND, "model": "anthropic:claude-sonnet-4-5", "price": [3, 15, 0.3, 4]}
    answer = stack.http("sam").post("/api/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text
    given = {"prompt": 3, "completion": 15, "cached": 0.3, "cache_write": 4}
    assert answer.json()["config"]["price"] == given
    shown = stack.http("sam").get(f"/api/v1/sessions/{answer.json()['id']}")
    assert shown.json()["head"]["config"]["price"] == given


def test_a_submit_may_give_the_models_context_window(stack: Stack) -> None:
    body = {"kind": TEST_KIND, "model": "openai:gpt-4o", "context_window": 64_000}
    answer = stack.http("sam").post("/api/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text
    stored = stack.deployment.client.get(answer.json()["id"])
    assert stored.config["context"]["window"] == 64_000


def test_unknown_things_are_404_json(stack: Stack) -> None:
    for path in (
        "/api/v1/sessions/nope",
        "/api/v1/sessions/nope/events",
        "/api/v1/sessions/nope/stream",
        "/api/v1/no/such/endpoint",
    ):
        answer = stack.http("alice").get(path)
        assert answer.status_code == 404, path
        assert answer.json()["code"] in ("session_not_found", "not_found")
        assert answer.json()["message"]
    unknown = stack.http("alice").get("/api/v1/sessions/nope").json()["message"]
    assert "GET /api/v1/sessions" in unknown  # the API's way to list them, beside the CLI's


def test_list_filters_by_status_and_kind(stack: Stack) -> None:
    waiting = stack.waiting()
    listed = stack.http("alice").get("/api/v1/sessions", params={"status": "waiting_approval"})
    assert listed.status_code == 200
    assert waiting in [h["id"] for h in listed.json()]
    assert {h["status"] for h in listed.json()} == {"waiting_approval"}
    both = stack.http("alice").get(
        "/api/v1/sessions",
        params=[
            ("status", "waiting_approval"),
            ("status", "completed"),
            ("kind", TEST_KIND),
            ("limit", "500"),
        ],
    )
    assert waiting in [h["id"] for h in both.json()]
    none = stack.http("alice").get("/api/v1/sessions", params={"kind": "repair", "limit": 500})
    assert none.status_code == 200, none.text  # a kind the server has, of no session here
    # a misspelt kind is refused, naming those the server knows, as the CLI's --kind is
    typo = stack.http("alice").get("/api/v1/sessions", params={"kind": "other"})
    assert typo.status_code == 422 and typo.json()["code"] == "unknown_kind", typo.text
    assert "unknown job kind 'other'" in typo.json()["message"]
    assert "known: " in typo.json()["message"] and "repair" in typo.json()["message"]
    # a module:attr kind is a name to the listing, never a module the server imports (an
    # HTTP client's name is untrusted: importing a module runs its code)
    probe = "tests.api.never_imported_by_a_listing"
    asked = stack.http("alice").get("/api/v1/sessions", params={"kind": f"{probe}:KIND"})
    assert asked.status_code == 422 and asked.json()["code"] == "unknown_kind", asked.text
    assert probe not in sys.modules
    assert len(stack.http("alice").get("/api/v1/sessions", params={"limit": 1}).json()) == 1
    bad = stack.http("alice").get("/api/v1/sessions", params={"status": "sleeping"})
    assert bad.status_code == 422 and "query.status" in bad.json()["message"]
    assert stack.http("alice").get("/api/v1/sessions", params={"limit": 0}).status_code == 422


def test_list_filters_by_submitter_and_names_a_bad_filter(stack: Stack) -> None:
    by_sam = stack.submit(ECHO, prefix="by-sam")
    body = {
        "kind": TEST_KIND,
        "input": {"sink": str(stack.deployment.sink)},
        "model": stack.deployment.script(ECHO),
    }
    answer = stack.http("fuzz").post("/api/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text
    by_fuzz = answer.json()["id"]

    def listed(**params: object) -> list[dict[str, object]]:
        found = stack.http("alice").get("/api/v1/sessions", params={"limit": 500, **params})
        assert found.status_code == 200, found.text
        return list(found.json())

    mine = listed(submitted_by="fuzz")
    assert by_fuzz in [h["id"] for h in mine] and by_sam not in [h["id"] for h in mine]
    assert {h["submitted_by"] for h in mine} == {"fuzz"}
    both = listed(submitted_by="sam", kind=TEST_KIND, status=["ready", "executing", "completed"])
    assert by_sam in [h["id"] for h in both]
    assert listed(submitted_by="sa") == []  # exact names, not a prefix

    def refused(**params: object) -> str:
        answer = stack.http("alice").get("/api/v1/sessions", params=params)
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "invalid_input"
        return str(answer.json()["message"])

    said = refused(outcome="fixed")
    assert "query.outcome" in said and "'repaired'" in said  # names what it takes
    assert "query.status" in refused(status=["completed", "asleep"])
    assert "query.submitted_by" in refused(submitted_by="x" * 201)
    assert "query.submitted_by" in refused(submitted_by="sam\nroot")  # no name holds one
    assert "query.kind" in refused(kind="k" * 201)
    assert "query.error_code" in refused(error_code="OOPS")


def test_events_page_after_an_id(stack: Stack) -> None:
    session_id = stack.submit(ECHO)
    stack.wait(session_id, Status.COMPLETED)
    everything = stack.http("sam").get(f"/api/v1/sessions/{session_id}/events").json()
    ids = [e["id"] for e in everything["events"]]
    assert ids == sorted(ids) and everything["last_id"] == ids[-1]
    assert everything["events"][0]["kind"] == "created"
    assert everything["events"][-1]["kind"] == "completed"
    rest = (
        stack.http("sam")
        .get(f"/api/v1/sessions/{session_id}/events", params={"after": ids[2]})
        .json()
    )
    assert [e["id"] for e in rest["events"]] == ids[3:]


def test_a_waiting_calls_body_says_why_it_needs_approval(stack: Stack) -> None:
    session_id = stack.waiting()
    shown = stack.http("alice").get(f"/api/v1/sessions/{session_id}").json()
    danger, echo = shown["steps"][0]["calls"]
    assert danger["approval_reason"] == "tool 'danger' always needs a person's approval"
    assert echo["approval_reason"] is None
    assert danger["provider_call_id"] is None, "the scripted model gives no ids"


def test_cancel_a_waiting_session_at_once(stack: Stack) -> None:
    session_id = stack.waiting()
    answer = stack.http("olga").post(f"/api/v1/sessions/{session_id}/cancel")
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    events = stack.deployment.client.load(session_id).events
    assert any(e.kind == "cancel_requested" and e.data.get("by") == "olga" for e in events)
    again = stack.http("alice").post(f"/api/v1/sessions/{session_id}/cancel")
    assert again.status_code == 409 and again.json()["code"] == "session_finished"


def test_fork_records_who_forked_and_runs(stack: Stack) -> None:
    parent = stack.waiting()
    stack.http("alice").post(f"/api/v1/sessions/{parent}/cancel")
    answer = stack.http("olga").post(
        f"/api/v1/sessions/{parent}/fork",
        json={
            "from_step": 0,
            "append_instruction": "be careful",
            "budgets": {"max_steps": 9},
            "id": f"fork-{uuid.uuid4().hex[:8]}",
        },
    )
    assert answer.status_code == 201, answer.text
    child = answer.json()
    assert child["parent_id"] == parent and child["fork_step"] == 0
    assert child["budgets"]["max_steps"] == 9
    forked = stack.deployment.client.load(child["id"]).events
    assert any(e.kind == "forked" and e.data["by"] == "olga" for e in forked)
    # the fork's view says what it was forked from and the patch it applied
    origin = stack.http("alice").get(f"/api/v1/sessions/{child['id']}").json()["forked_from"]
    assert {k: origin[k] for k in ("session_id", "step", "by")} == (
        {"session_id": parent, "step": 0, "by": "olga"}
    )
    assert origin["patch"] == {"append_instruction": "be careful", "budgets": {"max_steps": 9}}
    assert stack.http("alice").get(f"/api/v1/sessions/{parent}").json()["forked_from"] is None
    schema = stack.http().get("/api/v1/openapi.json").json()
    shown = schema["paths"]["/api/v1/sessions/{session_id}"]["get"]["responses"]["200"]
    view = shown["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    fields = schema["components"]["schemas"][view]["properties"]
    assert {"head", "steps", "events", "forked_from", "lease", "forks", "tree"} <= set(fields)
    patch = schema["components"]["schemas"]["ForkPatch"]["properties"]
    assert {"system_prompt", "append_instruction", "tool_outputs", "budgets"} <= set(patch)
    assert stack.wait(child["id"])["status"] == "waiting_approval"  # the same script again
    forks = stack.http("alice").get("/api/v1/sessions", params={"parent_id": parent}).json()
    assert [(f["id"], f["parent_id"]) for f in forks] == [(child["id"], parent)]
    assert (
        stack.http("alice").get("/api/v1/sessions", params={"parent_id": child["id"]}).json() == []
    )
    out_of_range = stack.http("olga").post(f"/api/v1/sessions/{parent}/fork", json={"from_step": 5})
    assert out_of_range.status_code == 422
    assert out_of_range.json()["code"] == "fork_out_of_range"
    assert "choose `from_step` between 0 and 1, not 5" in out_of_range.json()["message"]
    negative = stack.http("olga").post(f"/api/v1/sessions/{parent}/fork", json={"from_step": -1})
    assert negative.status_code == 422 and "from_step" in negative.json()["message"]


def test_a_fork_takes_a_context_window_in_the_submits_bounds(stack: Stack) -> None:
    parent = stack.waiting()
    stack.http("alice").post(f"/api/v1/sessions/{parent}/cancel")
    path = f"/api/v1/sessions/{parent}/fork"
    answer = stack.http("olga").post(path, json={"from_step": 0, "context_window": 20_000})
    assert answer.status_code == 201, answer.text
    assert answer.json()["config"]["context"]["window"] == 20_000
    small = stack.http("olga").post(path, json={"from_step": 0, "context_window": 100})
    assert small.status_code == 422 and "context_window" in small.json()["message"]


def test_a_fork_runs_on_the_model_it_names_taken_as_a_submit_s(stack: Stack) -> None:
    parent = stack.waiting()
    stack.http("alice").post(f"/api/v1/sessions/{parent}/cancel")
    path = f"/api/v1/sessions/{parent}/fork"
    refusals = {
        "gemini:pro": "invalid_model_spec",
        "openai:a b": "invalid_model_spec",
        # a script outside TICKWORK_API_SCRIPTED_ROOTS, as a submit's
        "scripted:/etc/passwd": "model_not_allowed",
    }
    for spec, code in refusals.items():
        refused = stack.http("olga").post(path, json={"from_step": 0, "model": spec})
        assert refused.status_code == 422 and refused.json()["code"] == code, refused.text
        assert "model" in refused.json()["message"]
    # a spec as long as a submit takes is checked as a spec; one longer, by neither body
    longest = "openai:" + "m" * (MAX_MODEL_SPEC - len("openai:"))
    for who, at, body in (
        ("olga", path, {"from_step": 0}),
        ("sam", "/api/v1/sessions", {"kind": TEST_KIND}),
    ):
        taken = stack.http(who).post(at, json={**body, "model": longest})
        assert taken.status_code == 422 and "errors" not in taken.json(), taken.text
        long = stack.http(who).post(at, json={**body, "model": longest + "m"})
        assert long.status_code == 422 and long.json()["errors"][0]["loc"] == ["body", "model"]
    named = stack.http("olga").post(path, json={"from_step": 0, "model": "gemini:pro"}).json()
    assert named["message"].startswith("`model`: unknown model spec 'gemini:pro'")
    assert stack.http("alice").get("/api/v1/sessions", params={"parent_id": parent}).json() == []

    model = stack.deployment.script([{"content": "the fork's own model answered"}])
    answer = stack.http("olga").post(path, json={"from_step": 0, "model": model})

    assert answer.status_code == 201, answer.text
    fork = answer.json()
    assert fork["model"] == model
    done = stack.wait(fork["id"])
    assert done["status"] == "completed" and done["final_answer"] == "the fork's own model answered"


def test_the_openapi_document_and_the_health_check(stack: Stack) -> None:
    document = stack.http().get("/api/v1/openapi.json").json()
    assert {
        "/api/v1/sessions",
        "/api/v1/sessions/{session_id}/stream",
        "/api/v1/sessions/{session_id}/calls/{session_id}/decision".replace(
            "{session_id}/decision", "{call_id}/decision"
        ),
        "/api/v1/dead-letters/stats",
        "/api/v1/approvals",
    } <= set(document["paths"])
    assert "HTTPBearer" in document["components"]["securitySchemes"]
    assert stack.http().get("/healthz").json() == {"ok": True}
    assert DANGER  # the shared script is what `stack.waiting` submits
