"""The page's fork from any step of a session's view, and the submit form's price, context
window and tenant, in headless Chromium against a real server (Postgres + Redis): every
refusal shown in the API's words beside what it is about, nothing typed lost, and the bounds
the fields offer read from the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.context import MAX_WINDOW, MIN_WINDOW
from tickwork.fsm.values import Status

from tests.api.conftest import TOKENS, Server, Stack
from tests.api.test_page import (  # noqa: F401 (fixtures)
    a_repair,
    browser,
    fill_the_repair,
    log_in,
    page,
)
from tests.api.test_page_actions import looked_at
from tests.api.test_sessions import ECHO
from tickwork.api import ApiSettings, make_api
from tickwork.api.bodies import page_bounds

pytestmark = pytest.mark.parametrize("stack", ["production"], indirect=True)

#: a step whose tool call ran, then the model fails for good: a dead letter with a step
DIES_AFTER_A_STEP = [
    ECHO[0],
    {"error": {"transient": False, "message": "model says 400 bad request"}},
]


def refused(stack: Stack, session_id: str, body: dict[str, Any], status: int) -> str:
    """What the API answers `body` posted as a fork of `session_id`, which it refuses."""
    answer = stack.http("olga").post(f"/api/v1/sessions/{session_id}/fork", json=body)
    assert answer.status_code == status, answer.text
    return str(answer.json()["message"])


def test_an_operator_forks_a_finished_session_from_a_step_with_a_fixed_prompt_and_output(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    parent = stack.submit(ECHO, prefix="fork-me")
    assert stack.wait(parent, Status.COMPLETED)["status"] == "completed"
    recorded = stack.deployment.client.load(parent).observation("s1c0")
    assert recorded is not None
    log_in(page, stack, "olga", f"#/sessions/{parent}")
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    expect(page.locator("#timeline button.fork-here")).to_have_count(2)  # one a step
    page.click("#fork-open")  # above the timeline: from its last step
    expect(page.locator('section.step[data-step="2"] + form#fork')).to_be_visible()
    expect(page.locator("#fork-step")).to_have_value("2")
    page.click('#timeline section.step[data-step="1"] button.fork-here')
    form = page.locator("form#fork")
    expect(form).to_have_count(1)  # the same form, moved to the step chosen
    # opened right after the step it forks from, with that step's output as recorded
    expect(page.locator('section.step[data-step="1"] + form#fork')).to_be_visible()
    expect(page.locator("#fork-step")).to_have_value("1")
    output = page.locator("#fork-output-s1c0")
    expect(output).to_have_value(recorded.content)
    looked_at(page, "session-fork-form", tmp_path)

    # a prompt of nothing but spaces: the API's refusal, in its words, beside the prompt
    page.fill("#fork-instruction", "say it twice")
    page.fill("#fork-system-prompt", "   ")
    page.fill("#fork-output-s1c0", "fixed by hand")
    form.locator("#fork-button").click()
    said = refused(stack, parent, {"from_step": 1, "system_prompt": "   "}, 422)
    expect(page.locator("#fork-system-prompt-error")).to_have_text(said)
    expect(page.locator("#fork-system-prompt")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#fork-error")).to_have_text(
        "Not forked (invalid_input): see the marked field."
    )

    # a step the session does not have: the API's words, as it gives them
    page.fill("#fork-system-prompt", "You fix things carefully.")
    page.fill("#fork-step", "9")
    expect(page.locator("#fork-outputs")).to_be_empty()  # step 9 has no calls to fix
    form.locator("#fork-button").click()
    said = refused(stack, parent, {"from_step": 9}, 422)
    expect(page.locator("#fork-error")).to_have_text(said)
    expect(page.locator("#fork-system-prompt-error")).to_have_text("")
    assert stack.http("olga").get(f"/api/v1/sessions?parent_id={parent}").json() == []

    # back at step 1: what was typed in its output is still there
    page.fill("#fork-step", "1")
    expect(output).to_have_value("fixed by hand")
    expect(page.locator("#fork-instruction")).to_have_value("say it twice")

    # an output longer than a tool's may be: the API's words beside that output
    longest = stack.deployment.settings.max_output_chars
    page.fill("#fork-output-s1c0", "x" * (longest + 1))
    form.locator("#fork-button").click()
    said = refused(
        stack, parent, {"from_step": 1, "tool_outputs": {"s1c0": "x" * (longest + 1)}}, 422
    )
    expect(page.locator("#fork-output-s1c0-error")).to_have_text(said)
    page.fill("#fork-output-s1c0", "fixed by hand")
    form.locator("#fork-button").click()
    page.wait_for_url(lambda url: "#/sessions/" in url and parent not in url)
    fork = page.url.rsplit("/", 1)[-1]
    view = stack.http("olga").get(f"/api/v1/sessions/{fork}").json()
    assert view["head"]["parent_id"] == parent and view["head"]["fork_step"] == 1
    # only what was changed is sent: the window and admission stay the original's
    assert view["forked_from"]["patch"] == {
        "system_prompt": "You fix things carefully.",
        "append_instruction": "say it twice",
        "tool_outputs": {"s1c0": "fixed by hand"},
    }
    assert stack.wait(fork, Status.COMPLETED, Status.FAILED)["status"] == "completed"
    seen = stack.deployment.client.load(fork).observation("s1c0")
    assert seen is not None and seen.content == "fixed by hand"


def test_a_fork_of_a_dead_lettered_session_resolves_it_and_once_more_asks_again(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    from playwright.sync_api import expect

    parent = stack.submit(DIES_AFTER_A_STEP, prefix="dead", context_window=4096)
    assert stack.wait(parent)["status"] == "failed"
    letter = stack.deployment.client.dead_letter(parent)
    # the dead letter's own form: a step of its timeline picks the step it forks from
    log_in(page, stack, "olga", f"#/dead-letters/{letter.id}")
    expect(page.locator("#fork-step")).to_have_value("0")
    expect(page.locator("#fork-outputs")).to_be_empty()
    page.click('#timeline section.step[data-step="1"] button.fork-here')
    expect(page.locator("#fork-step")).to_have_value("1")
    expect(page.locator("#fork-output-s1c0")).to_have_value("hi")

    page.goto(f"{stack.url}/#/sessions/{parent}")
    # the view before may still be drawn, with a step 1 of its own: wait for the parent's
    expect(page.locator(".bar h2 code")).to_have_text(parent)
    page.click('#timeline section.step[data-step="1"] button.fork-here')
    expect(page.locator("#fork-context-window")).to_have_value("4096")
    page.fill("#fork-context-window", "16000")
    page.click("#fork-button")
    page.wait_for_url(lambda url: "#/sessions/" in url and parent not in url)
    first = page.url.rsplit("/", 1)[-1]
    closed = stack.deployment.client.dead_letter(letter.id)
    assert closed.resolution is not None and closed.resolution["state"] == "forked"
    patch = stack.http("olga").get(f"/api/v1/sessions/{first}").json()["forked_from"]["patch"]
    assert patch == {"context_window": 16000}

    # once more from the same step: the API refuses (the dead letter is closed) and says
    # how to go on; the page offers that, and keeps what was typed
    page.goto(f"{stack.url}/#/sessions/{parent}")
    # the view before may still be drawn, with a step 1 of its own: wait for the parent's
    expect(page.locator(".bar h2 code")).to_have_text(parent)
    page.click('#timeline section.step[data-step="1"] button.fork-here')
    page.fill("#fork-instruction", "try the other way")
    expect(page.locator("#fork-again")).to_be_hidden()
    page.click("#fork-button")
    said = refused(stack, parent, {"from_step": 1}, 409)
    expect(page.locator("#fork-error")).to_have_text(said)
    expect(page.locator("#fork-instruction")).to_have_value("try the other way")
    page.check("#fork-again")
    # a model spec the server cannot run: its words beside the model, as a submit's
    page.fill("#fork-model", "gemini:pro")
    page.click("#fork-button")
    said = refused(stack, parent, {"from_step": 1, "model": "gemini:pro", "again": True}, 422)
    expect(page.locator("#fork-model-error")).to_have_text(said)
    expect(page.locator("#fork-model")).to_have_attribute("aria-invalid", "true")
    model = stack.deployment.script([ECHO[0], {"content": "the fork's own model answered"}])
    page.fill("#fork-model", model)
    page.click("#fork-button")
    page.wait_for_url(lambda url: "#/sessions/" in url and parent not in url and first not in url)
    second = page.url.rsplit("/", 1)[-1]
    forks = [f["id"] for f in stack.deployment.client.forks(parent)]
    assert forks == [first, second]
    done = stack.wait(second, Status.COMPLETED, Status.FAILED)
    assert done["model"] == model and done["final_answer"] == "the fork's own model answered"


def test_a_fork_being_typed_outlives_the_live_views_redraws(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    from playwright.sync_api import expect

    session_id = stack.waiting(prefix="live")  # a session not finished: the API forks it too
    log_in(page, stack, "olga", f"#/sessions/{session_id}")
    expect(page.locator("#status")).to_have_attribute("data-status", "waiting_approval")
    # the stream's first events redraw the timeline: the button stays the one pressed
    page.click('#timeline section.step[data-step="1"] button.fork-here')
    instruction = page.locator("#fork-instruction")
    instruction.fill("half typed")
    expect(instruction).to_be_focused()
    form = page.locator("form#fork").element_handle()
    # the session moves on: its events redraw the timeline around the open form
    stack.deployment.client.approve(session_id, "s1c0", approver="alice")
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    expect(page.locator("#live")).to_have_text("finished: completed")
    expect(page.locator('#timeline [data-call="s1c0"] pre.output')).to_have_count(1)
    assert form.evaluate("f => f.isConnected"), "the open fork form was replaced"
    expect(instruction).to_have_value("half typed")
    expect(instruction).to_be_focused()
    expect(page.locator('section.step[data-step="1"] + form#fork')).to_be_visible()
    # the step's output, recorded since the form opened, is offered once the step is chosen
    page.fill("#fork-step", "2")
    page.fill("#fork-step", "1")
    expect(page.locator("#fork-output-s1c0")).to_have_value("destroyed prod-db")


def test_only_an_operator_is_offered_a_fork_from_a_step(page: Any, stack: Stack) -> None:  # noqa: F811
    from playwright.sync_api import expect

    session_id = stack.submit(ECHO, prefix="no-fork")
    stack.wait(session_id, Status.COMPLETED)
    log_in(page, stack, "alice", f"#/sessions/{session_id}")
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    expect(page.locator("#timeline section.step")).to_have_count(2)
    expect(page.locator("button.fork-here")).to_have_count(0)
    expect(page.locator("#fork-open")).to_be_hidden()
    answer = stack.http("alice").post(f"/api/v1/sessions/{session_id}/fork", json={"from_step": 1})
    assert answer.status_code == 403  # the role the page asks for is the API's


def test_a_submitter_gives_a_price_and_a_context_window_refused_in_the_apis_words(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    with a_repair(stack, tmp_path, "page-price") as (workspace, model, session_id):
        log_in(page, stack, "sam", "#/submit")
        # the bounds the fields offer are the server's, served with the page
        served = page.evaluate(
            "JSON.parse(document.querySelector('meta[name=\"tickwork-bounds\"]').content)"
        )
        assert served == page_bounds()
        window = page.locator("#submit-context-window")
        expect(window).to_have_attribute("min", str(MIN_WINDOW))
        expect(window).to_have_attribute("max", str(MAX_WINDOW))
        expect(page.locator("#submit-tenant")).to_be_hidden()  # sam may name no other tenant
        fill_the_repair(page, workspace, model, session_id, test_command="true")

        def refusal(price: str) -> str:
            """The price typed and submitted: the API's message."""
            page.fill("#submit-price", price)
            with page.expect_response("**/api/v1/sessions") as answered:
                page.click("#submit-button")
            answer = answered.value
            assert answer.status == 422, answer.text()
            return str(answer.json()["message"])

        for typed in ("3", "3, abc", "1, -1"):
            message = refusal(typed)
            expect(page.locator("#submit-price-error")).to_have_text(message)
            expect(page.locator("#submit-price")).to_have_attribute("aria-invalid", "true")
            expect(page.locator("#submit-error")).to_have_text(
                "Not submitted (invalid_input): see the marked field."
            )
        assert "price" in message
        page.fill("#submit-price", "")
        page.fill("#submit-context-window", str(MIN_WINDOW - 1))
        page.click("#submit-button")
        expect(page.locator("#submit-context-window-error")).to_have_text(
            f"The context window must be a whole number of tokens from {MIN_WINDOW:,} "
            f"to {MAX_WINDOW:,}."
        )
        expect(page.locator("#submit-price-error")).to_have_text("")
        with pytest.raises(LookupError):
            stack.deployment.client.get(session_id)
        looked_at(page, "submit-price-window", tmp_path)

        # the rates sent as numbers, however they are spaced
        page.fill("#submit-price", " 3, 15 0.3 ")
        page.fill("#submit-context-window", "16000")
        page.reload()  # the draft keeps them
        expect(page.locator("#submit-price")).to_have_value(" 3, 15 0.3 ")
        expect(page.locator("#submit-context-window")).to_have_value("16000")
        with page.expect_request("**/api/v1/sessions") as sent:
            page.click("#submit-button")
        assert sent.value.post_data_json["price"] == [3, 15, 0.3]
        page.wait_for_url(lambda url: url.endswith(f"#/sessions/{session_id}"))
    head = stack.http("sam").get(f"/api/v1/sessions/{session_id}").json()["head"]
    assert head["config"]["context"]["window"] == 16000
    assert head["config"]["price"] == {"prompt": 3.0, "completion": 15.0, "cached": 0.3}


def test_an_admin_submits_into_a_tenant_it_names(
    browser: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    token = "ada-admin-token-000000001"
    api = ApiSettings(
        api_tokens={**TOKENS, token: {"name": "ada", "roles": ["admin"]}},  # type: ignore[arg-type]
        api_scripted_roots=[stack.deployment.tmp],
    )
    context = browser.new_context()
    try:
        with (
            a_repair(stack, tmp_path, "page-tenant") as (workspace, model, session_id),
            Server(make_api(stack.deployment.settings, api)) as server,
        ):
            shown = context.new_page()
            shown.goto(f"{server.url}/#/submit")
            shown.fill("#token", token)
            shown.click("form#login button[type=submit]")
            expect(shown.locator("#who")).to_have_text("ada (admin)")
            # an admin passes every role's check, in the page as in the API
            expect(shown.locator('nav a[data-nav="submit"]')).to_be_visible()
            tenant = shown.locator("#submit-tenant")
            expect(tenant).to_be_visible()
            expect(tenant).to_have_attribute("placeholder", "default")
            fill_the_repair(shown, workspace, model, session_id, test_command="true")
            shown.fill("#submit-tenant", "not a tenant")
            with shown.expect_response("**/api/v1/sessions") as answered:
                shown.click("#submit-button")
            assert answered.value.status == 422
            expect(shown.locator("#submit-tenant-error")).to_have_text(
                answered.value.json()["message"]
            )
            shown.fill("#submit-tenant", "acme")
            shown.click("#submit-button")
            shown.wait_for_url(lambda url: url.endswith(f"#/sessions/{session_id}"))
            expect(shown.locator("#status")).to_have_attribute("data-status", "completed")
    finally:
        context.close()
    assert stack.deployment.client.get(session_id).tenant == "acme"


def test_a_fork_onto_another_model_is_priced_in_the_form(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The fork form could change the model but not price it: a price below the server's
    is refused beside the price, in the API's words, and one given is the fork's."""
    from playwright.sync_api import expect

    parent = stack.submit(ECHO, prefix="price-me")
    assert stack.wait(parent, Status.COMPLETED)["status"] == "completed"
    log_in(page, stack, "olga", f"#/sessions/{parent}")
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    page.click("#fork-open")
    form = page.locator("form#fork")
    page.fill("#fork-step", "0")
    page.fill("#fork-model", "openai:gpt-4o-mini")
    page.fill("#fork-price", "0.001, 0.002")
    form.locator("#fork-button").click()
    body = {"from_step": 0, "model": "openai:gpt-4o-mini", "price": [0.001, 0.002]}
    said = refused(stack, parent, body, 422)
    expect(page.locator("#fork-price-error")).to_have_text(said)
    expect(page.locator("#fork-price")).to_have_attribute("aria-invalid", "true")
    assert stack.http("olga").get(f"/api/v1/sessions?parent_id={parent}").json() == []

    page.fill("#fork-model", "")
    page.fill("#fork-price", "1, 2, 0.5")
    form.locator("#fork-button").click()
    page.wait_for_url(lambda url: "#/sessions/" in url and parent not in url)
    fork = page.url.rsplit("/", 1)[-1]
    assert stack.deployment.client.get(fork).config["price"] == {
        "prompt": 1,
        "completion": 2,
        "cached": 0.5,
    }


def test_the_deadline_fields_take_a_duration_as_the_cli_does(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The page's Deadline fields (submit, fork) kept their own list of units, case and
    all: `2H`, which `--deadline` takes, was "not a duration". They take the server's units
    (served with the page) in either case, and refuse what `--deadline` refuses."""
    from tickwork.fsm.errors import InvalidInput

    from tickwork.parsing import seconds

    log_in(page, stack, "sam", "#/submit")
    typed = ["90", "90s", " 30m ", "2H", "1.5h", "1D", "1w", "soon", "h", ""]
    shown = page.evaluate(
        "(typed) => import('/static/submit.js').then((m) => typed.map((t) => m.seconds(t)))",
        typed,
    )
    for text, page_said in zip(typed, shown, strict=True):
        try:
            cli_said: float | None = seconds(text, example="2h")
        except InvalidInput:
            cli_said = None
        assert page_said == cli_said, text
