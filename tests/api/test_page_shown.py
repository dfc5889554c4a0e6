"""How the page shows what it shows, in headless Chromium against a real server (Postgres +
Redis): the session view draws again only what changed (a step's button that did not change
is the same element after the session moved on, so a click whose press and release straddle
a redraw is not lost)."""

from __future__ import annotations

from typing import Any

import pytest
from tickwork.fsm.values import Status

from tests.api.conftest import Stack
from tests.api.test_page import browser, log_in, page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.parametrize("stack", ["production"], indirect=True)

#: a step whose call runs at once, then one whose call waits for a person, then an answer
RUNS_THEN_WAITS = [
    {"content": "look", "tool_calls": [{"name": "echo", "arguments": {"text": "first"}}]},
    {"content": "delete it", "tool_calls": [{"name": "danger", "arguments": {"value": "db"}}]},
    {"content": "done"},
]


def test_a_steps_button_is_the_same_element_after_the_session_moves_on(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    from playwright.sync_api import expect

    session_id = stack.waiting(RUNS_THEN_WAITS, prefix="redraw")
    log_in(page, stack, "olga", f"#/sessions/{session_id}")
    expect(page.locator("#status")).to_have_attribute("data-status", "waiting_approval")
    expect(page.locator("#timeline section.step")).to_have_count(2)
    expect(page.locator("#live")).to_have_text("live")
    first = page.locator('#timeline section.step[data-step="1"] button.fork-here')
    button = first.element_handle()
    link = page.locator('#steps-table tr[data-step="1"] a').element_handle()
    waiting = page.locator('#timeline [data-call="s2c0"]').element_handle()
    assert waiting.evaluate("c => !c.querySelector('pre.output')")

    stack.deployment.client.approve(session_id, "s2c0", approver="alice")
    stack.wait(session_id, Status.COMPLETED)
    expect(page.locator("#live")).to_have_text("finished: completed")
    # what changed is drawn: step 2's call has its output, step 3 is there
    expect(page.locator('#timeline [data-call="s2c0"] pre.output')).to_have_count(1)
    expect(page.locator("#timeline section.step")).to_have_count(3)
    expect(page.locator("#steps-table tbody tr")).to_have_count(3)
    # what did not is the very element it was: a click on it lands whenever it is pressed
    assert button.evaluate("(b, now) => b.isConnected && b === now", first.element_handle())
    assert link.evaluate("a => a.isConnected"), "step 1's row of the table was drawn anew"
    first.click()
    expect(page.locator('section.step[data-step="1"] + form#fork')).to_be_visible()
    expect(page.locator("#fork-step")).to_have_value("1")
