"""The submit form's price, context window and tenant in headless Chromium against a real
server (Postgres + Redis): every refusal shown beside what it is about, nothing typed lost,
and the bounds the fields offer read from the server."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.context import MAX_WINDOW, MIN_WINDOW

from tests.api.conftest import TOKENS, Server, Stack
from tests.api.test_page import browser, log_in, page  # noqa: F401 (fixtures)
from tests.api.test_page_actions import looked_at
from tickwork.api import ApiSettings, make_api
from tickwork.api.bodies import page_bounds

pytestmark = pytest.mark.parametrize("stack", ["production"], indirect=True)


def test_a_submitter_gives_a_price_and_a_context_window_refused_in_the_apis_words(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "README").write_text("a project\n")
    model = stack.deployment.script([{"content": "nothing to fix"}])
    session_id = f"page-price-{uuid.uuid4().hex[:8]}"
    stack.deployment.settings.workspace_roots = [tmp_path]
    try:
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
        page.select_option("#submit-source-kind", "workspace")
        page.fill("#submit-workspace", str(workspace))
        page.select_option("#submit-setup-mode", "none")
        page.fill("#submit-test-command", "true")
        page.fill("#submit-model", model)
        page.fill("#submit-id", session_id)

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
    finally:
        stack.deployment.settings.workspace_roots = []
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
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "README").write_text("a project\n")
    model = stack.deployment.script([{"content": "nothing to fix"}])
    session_id = f"page-tenant-{uuid.uuid4().hex[:8]}"
    stack.deployment.settings.workspace_roots = [tmp_path]
    context = browser.new_context()
    try:
        with Server(make_api(stack.deployment.settings, api)) as server:
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
            shown.select_option("#submit-source-kind", "workspace")
            shown.fill("#submit-workspace", str(workspace))
            shown.select_option("#submit-setup-mode", "none")
            shown.fill("#submit-test-command", "true")
            shown.fill("#submit-model", model)
            shown.fill("#submit-id", session_id)
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
        stack.deployment.settings.workspace_roots = []
    assert stack.deployment.client.get(session_id).tenant == "acme"
