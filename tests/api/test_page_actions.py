"""The page's actions in headless Chromium (issue 28): submit a repair job (an error from
the API beside its field, nothing typed lost), filter the sessions, read each step's tokens,
cost and durations, resolve and dismiss dead letters, and put a fork beside its parent.

Every view is screenshotted at a narrow and a wide viewport and checked for layout
overflow: no container wider than its box, no page wider than the window. Screenshots go
to the test's temporary folder, or to TICKWORK_TEST_SCREENSHOTS to look at them."""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.admission import MAX_PER_KEY, MAX_PRIORITY, MIN_PRIORITY
from tickwork.fsm.context import MAX_WINDOW, MIN_WINDOW
from tickwork.fsm.values import Status
from tickwork.fsm.wording import usd

from tests.api.conftest import TEST_KIND, TOKEN, Stack
from tests.api.test_dead_letters import BROKEN
from tests.api.test_page import (  # noqa: F401 (fixtures)
    a_project,
    a_repair,
    browser,
    fill_the_repair,
    log_in,
    page,
)
from tests.api.test_sessions import ECHO
from tickwork.testing import until

pytestmark = pytest.mark.parametrize("stack", ["production"], indirect=True)

#: a token the tests below revoke or move while the page follows a session
RITA = "rita-will-be-moved-000001"
#: a script that counts the page's answered fetches of PATH in `window.reads`
COUNTS_READS = """{
  window.reads = 0;
  const fetched = window.fetch;
  window.fetch = async (url, ...rest) => {
    const answer = await fetched(url, ...rest);
    if (String(url).endsWith("PATH")) window.reads += 1;
    return answer;
  };
}"""
#: a phone and a laptop
VIEWPORTS = {"narrow": (390, 844), "wide": (1280, 900)}
#: the boxes that must never be wider than they are: the page, its frame, each view's
#: parts (a `pre` scrolls inside its own box, so it is not one of them)
CONTAINERS = (
    "html, body, header, nav, main, main > *, section, form, fieldset, .field, table, "
    ".summary, .compare, .pair, .side, .closing, .charts, figure"
)
FITS = """(selector) => {
  const over = [];
  for (const e of document.querySelectorAll(selector)) {
    if (e.scrollWidth > e.clientWidth + 1) {
      const name = `${e.tagName.toLowerCase()}#${e.id}.${e.className}`;
      over.push(`${name}: ${e.scrollWidth} > ${e.clientWidth}`);
    }
  }
  if (document.documentElement.scrollWidth > window.innerWidth) {
    over.push(`the page: ${document.documentElement.scrollWidth} > ${window.innerWidth}`);
  }
  return over;
}"""


def shown_ms(text: str) -> tuple[float, float]:
    """A duration as the page shows it (core.js `ms`: 340 ms, 1.2 s, 3 min 5 s) in
    milliseconds, and how far from the exact one its rounding may be."""
    if found := re.fullmatch(r"(\d+) ms", text):
        return float(found[1]), 1
    if found := re.fullmatch(r"(\d+\.\d) s", text):
        return float(found[1]) * 1000, 51
    found = re.fullmatch(r"(\d+) min (\d+) s", text)
    assert found, f"{text!r} is not a duration as the page shows one"
    return (int(found[1]) * 60 + int(found[2])) * 1000.0, 501


def looked_at(shown: Any, name: str, folder: Path) -> list[Path]:
    """Screenshots of the page at each viewport, after checking nothing overflows there."""
    shots = Path(os.environ.get("TICKWORK_TEST_SCREENSHOTS") or folder)
    shots.mkdir(parents=True, exist_ok=True)
    taken = []
    for label, (width, height) in VIEWPORTS.items():
        shown.set_viewport_size({"width": width, "height": height})
        shown.wait_for_timeout(150)  # a layout pass at the new width
        assert shown.evaluate(FITS, CONTAINERS) == [], f"{name} overflows at {label} ({width}px)"
        path = shots / f"{name}-{label}.png"
        shown.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 0
        taken.append(path)
    shown.set_viewport_size({"width": VIEWPORTS["wide"][0], "height": VIEWPORTS["wide"][1]})
    return taken


def test_a_submitter_submits_a_repair_job_and_an_error_keeps_what_was_typed(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    with a_repair(stack, tmp_path, "page-submit") as (workspace, model, session_id):
        _submit_through_the_form(page, stack, tmp_path, workspace, model, session_id)


def _submit_through_the_form(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
    workspace: Path,
    model: str,
    session_id: str,
) -> None:
    from playwright.sync_api import expect

    log_in(page, stack, "sam")
    page.click('nav a[data-nav="submit"]')
    fill_the_repair(page, workspace, model, session_id)
    expect(page.locator("#submit-repo")).to_be_hidden()
    page.fill("#submit-goal", "make the README friendlier")
    page.fill("#submit-max-steps", "7")
    page.fill("#submit-max-tokens", "50000")
    page.fill("#submit-max-cost-usd", "1.5")
    page.fill("#submit-deadline", "soon")

    # a deadline that is not a duration: said beside it, nothing sent
    page.click("#submit-button")
    expect(page.locator("#submit-deadline-error")).to_contain_text('"soon" is not a duration')
    expect(page.locator("#submit-error")).to_have_text(
        "Nothing was sent: put right what is marked."
    )
    expect(page.locator("#submit-deadline")).to_have_attribute("aria-invalid", "true")

    # no test command: the API's 422, beside the field it names
    page.fill("#submit-deadline", "30m")
    page.click("#submit-button")
    said = page.locator("#submit-test-command-error")
    expect(said).to_contain_text("`test_command` is required")
    expect(page.locator("#submit-error")).to_have_text(
        "Not submitted (invalid_input): see the marked field."
    )
    expect(page.locator("#submit-test-command")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#submit-deadline-error")).to_have_text("")
    for field, typed in [
        ("#submit-workspace", str(workspace)),
        ("#submit-goal", "make the README friendlier"),
        ("#submit-model", model),
        ("#submit-max-steps", "7"),
        ("#submit-max-tokens", "50000"),
        ("#submit-max-cost-usd", "1.5"),
        ("#submit-deadline", "30m"),
        ("#submit-id", session_id),
    ]:
        expect(page.locator(field)).to_have_value(typed)
    with pytest.raises(LookupError):
        stack.deployment.client.get(session_id)
    looked_at(page, "submit-errors", tmp_path)

    # a budget the API refuses, beside its field; then the form survives a reload
    page.fill("#submit-test-command", "true")
    page.fill("#submit-max-steps", "0")
    page.click("#submit-button")
    expect(page.locator("#submit-max-steps-error")).to_contain_text("max_steps")
    expect(page.locator("#submit-test-command-error")).to_have_text("")
    page.fill("#submit-max-steps", "7")
    page.reload()
    expect(page.locator("#submit-source-kind")).to_have_value("workspace")
    expect(page.locator("#submit-setup-mode")).to_have_value("none")
    expect(page.locator("#submit-test-command")).to_have_value("true")
    expect(page.locator("#submit-max-steps")).to_have_value("7")

    page.click("#submit-button")
    page.wait_for_url(lambda url: url.endswith(f"#/sessions/{session_id}"))
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    head = stack.deployment.client.get(session_id)
    assert head.submitted_by == "sam" and head.kind == "repair"
    assert head.input == {
        "workspace": str(workspace),
        "test_command": "true",
        "goal": "make the README friendlier",
        "setup": "none",
    }
    assert head.model == f"scripted:{Path(model.removeprefix('scripted:')).resolve()}"
    assert (head.budgets.max_steps, head.budgets.max_tokens) == (7, 50_000)
    assert (head.budgets.max_cost_usd, head.budgets.deadline_s) == (1.5, 1800.0)
    page.click('nav a[data-nav="submit"]')  # submitted: the draft is gone
    expect(page.locator("#submit-test-command")).to_have_value("")


def test_a_submitter_sets_admission_and_a_refusal_is_said_in_the_pages_words(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    with a_repair(stack, tmp_path, "page-admit") as (workspace, model, session_id):
        log_in(page, stack, "sam", "#/submit")
        # the API's bounds, offered by the form
        for field, low, high in [
            ("#submit-priority", MIN_PRIORITY, MAX_PRIORITY),
            ("#submit-max-per-key", 1, MAX_PER_KEY),
        ]:
            expect(page.locator(field)).to_have_attribute("min", str(low))
            expect(page.locator(field)).to_have_attribute("max", str(high))
        fill_the_repair(page, workspace, model, session_id, test_command="true")

        # out of the API's bounds: its 422, said beside the field in the form's words
        page.fill("#submit-priority", str(MAX_PRIORITY + 1))
        page.click("#submit-button")
        said = page.locator("#submit-priority-error")
        expect(said).to_have_text(
            f"Priority must be a whole number from {MIN_PRIORITY:,} to {MAX_PRIORITY:,} "
            "(higher is admitted first)."
        )
        expect(page.locator("#submit-priority")).to_have_attribute("aria-invalid", "true")
        expect(page.locator("#submit-error")).to_have_text(
            "Not submitted (invalid_input): see the marked field."
        )

        # a limit without a key: the API's refusal names its flag; the page, its fields
        page.fill("#submit-priority", "7")
        page.fill("#submit-max-per-key", "2")
        page.click("#submit-button")
        said = page.locator("#submit-max-per-key-error")
        expect(said).to_have_text(
            "Max per key needs a concurrency key: fill in Concurrency key, or empty Max per key."
        )
        expect(page.locator("#submit-priority-error")).to_have_text("")
        page.fill("#submit-concurrency-key", "not a key")
        page.click("#submit-button")
        expect(page.locator("#submit-concurrency-key-error")).to_contain_text(
            "A concurrency key is up to 200 letters, digits and _ - . : / @ + ="
        )
        expect(page.locator("#submit-max-per-key-error")).to_have_text("")
        with pytest.raises(LookupError):
            stack.deployment.client.get(session_id)

        page.fill("#submit-concurrency-key", "github.com/org/repo")
        page.reload()  # the draft keeps them
        expect(page.locator("#submit-priority")).to_have_value("7")
        expect(page.locator("#submit-concurrency-key")).to_have_value("github.com/org/repo")
        expect(page.locator("#submit-max-per-key")).to_have_value("2")
        page.click("#submit-button")
        page.wait_for_url(lambda url: url.endswith(f"#/sessions/{session_id}"))
    head = stack.http("sam").get(f"/api/v1/sessions/{session_id}").json()["head"]
    assert (head["priority"], head["concurrency_key"], head["max_per_key"]) == (
        7,
        "github.com/org/repo",
        2,
    )


def test_a_draft_outlives_a_refused_token_but_not_a_log_out(page: Any, stack: Stack) -> None:  # noqa: F811
    from playwright.sync_api import expect

    log_in(page, stack, "sam", "#/submit")
    page.fill("#submit-goal", "half typed")
    page.fill("#submit-test-command", "make test")
    page.evaluate("sessionStorage.setItem('tickwork.token', 'revoked-meanwhile-token-01')")
    page.reload()
    expect(page.locator("#login-error")).to_contain_text("log in again")
    page.fill("#token", TOKEN["sam"])
    page.click("form#login button[type=submit]")
    expect(page.locator("#submit-goal")).to_have_value("half typed")
    expect(page.locator("#submit-test-command")).to_have_value("make test")
    page.click("#logout")
    log_in(page, stack, "sam", "#/submit")
    expect(page.locator("#submit-goal")).to_have_value("")


def test_only_a_submitter_is_offered_the_submit_form(page: Any, stack: Stack) -> None:  # noqa: F811
    from playwright.sync_api import expect

    log_in(page, stack, "alice")
    expect(page.locator('nav a[data-nav="submit"]')).to_be_hidden()
    page.goto(f"{stack.url}/#/submit")
    expect(page.locator("#submit-refused")).to_have_text("Submitting needs the submitter role.")
    expect(page.locator("form#submit")).to_have_count(0)


def test_the_sessions_are_filtered_by_status_submitter_and_kind(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    by_sam = stack.submit(ECHO, prefix="by-sam")
    body = {
        "kind": TEST_KIND,
        "input": {"sink": str(stack.deployment.sink)},
        "model": stack.deployment.script(ECHO),
        "id": f"by-fuzz-{uuid.uuid4().hex[:8]}",
    }
    answer = stack.http("fuzz").post("/api/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text
    by_fuzz = answer.json()["id"]
    waiting = stack.waiting(prefix="by-sam-waiting")
    for session_id in (by_sam, by_fuzz):
        stack.wait(session_id, Status.COMPLETED)
    rows = page.locator("#sessions tbody tr")

    log_in(page, stack, "sam", "#/sessions")
    page.fill("#submitter-filter", "fuzz")
    page.press("#submitter-filter", "Enter")
    page.wait_for_url(lambda url: url.endswith("#/sessions?submitted_by=fuzz"))
    expect(page.locator(f'#sessions tr[data-session="{by_fuzz}"] td.submitter')).to_have_text(
        "fuzz"
    )
    expect(page.locator(f'#sessions tr[data-session="{by_sam}"]')).to_have_count(0)
    assert set(rows.locator("td.submitter").all_inner_texts()) == {"fuzz"}

    page.click("#mine")  # the logged-in name
    expect(page.locator("#submitter-filter")).to_have_value("sam")
    expect(page.locator(f'#sessions tr[data-session="{by_sam}"]')).to_have_count(1)
    expect(page.locator(f'#sessions tr[data-session="{waiting}"]')).to_have_count(1)
    page.select_option("#status-filter", "waiting_approval")
    page.wait_for_url(
        lambda url: url.endswith("#/sessions?status=waiting_approval&submitted_by=sam")
    )
    expect(page.locator(f'#sessions tr[data-session="{waiting}"]')).to_have_count(1)
    expect(page.locator(f'#sessions tr[data-session="{by_sam}"]')).to_have_count(0)
    expect(page.locator("#submitter-filter")).to_have_value("sam")  # kept across the change
    looked_at(page, "sessions-filtered", tmp_path)

    # other tests' repairs may wait for sam too: only what the filters shut out is certain
    page.fill("#kind-filter", "repair")
    page.click("#session-filters button[type=submit]")
    page.wait_for_url(lambda url: url.endswith("submitted_by=sam&kind=repair"))
    expect(page.locator("#sessions, #no-sessions")).to_have_count(1)  # the list came
    expect(page.locator(f'#sessions tr[data-session="{waiting}"]')).to_have_count(0)
    assert set(rows.locator('td[data-label="kind"]').all_inner_texts()) <= {"repair"}
    page.select_option("#outcome-filter", "repaired")  # only a finished session has one
    expect(page.locator("#no-sessions")).to_have_text("No sessions match.")
    page.select_option("#outcome-filter", "")
    page.fill("#kind-filter", TEST_KIND)
    page.click("#session-filters button[type=submit]")
    expect(page.locator(f'#sessions tr[data-session="{waiting}"]')).to_have_count(1)

    # a value the API refuses (a hand-made address): its 422, the filters still there
    page.goto(f"{stack.url}/#/sessions?outcome=fixed&submitted_by=sam")
    expect(page.locator("#filter-error")).to_contain_text("query.outcome")
    expect(page.locator("#filter-error")).to_contain_text("'repaired'")
    expect(page.locator("#submitter-filter")).to_have_value("sam")
    page.click("#clear-filters")
    expect(page.locator(f'#sessions tr[data-session="{by_fuzz}"]')).to_have_count(1)


def test_the_session_list_fits_the_window_whatever_its_sessions_hold(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    """A server-made id is 32 hex digits, a kind or a model spec can be 200 characters
    with no space and a name as long: the list wraps them in their cells rather than
    scroll the page sideways. Its own kind keeps other tests' sessions out of the list."""
    from playwright.sync_api import expect
    from tickwork.worker.tick.runtime import utc_now

    from tickwork.testing.store_ticks import new_session

    store = stack.deployment.client.store
    mark = uuid.uuid4().hex
    kind = f"tests.jobs:{'A_KIND_WITHOUT_A_SPACE_' * 7}{mark[:8]}"
    model = f"scripted:/{'a-folder-without-a-space' * 6}/{mark}.json"
    statuses = (Status.COMPLETED, Status.WAITING_CHILDREN, Status.WAITING_APPROVAL)
    for n, status in enumerate(statuses):
        # not runnable: stored with no tick, so no worker takes them up
        session = new_session((mark * 2)[: 64 - n], now=utc_now(), kind=kind, model=model)
        head = session.head.model_copy(
            update={"status": status, "submitted_by": "s" * 200, "step": 123_456_789}
        )
        store.create(session.model_copy(update={"head": head}), now=utc_now())

    log_in(page, stack, "sam", f"#/sessions?kind={kind}")
    expect(page.locator("#sessions tbody tr")).to_have_count(len(statuses))
    looked_at(page, "sessions-long", tmp_path)


def test_each_step_shows_its_tokens_cost_and_durations(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    replies = [
        {
            "content": "say it",
            "tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 30, "cached_prompt_tokens": 1000},
            "delay_s": 0.3,
        },
        {
            "content": "said",
            "usage": {"prompt_tokens": 1300, "completion_tokens": 12, "cached_prompt_tokens": 0},
        },
    ]
    session_id = stack.submit(replies, prefix="steps")
    stack.wait(session_id, Status.COMPLETED)
    view = stack.http("alice").get(f"/api/v1/sessions/{session_id}").json()
    log_in(page, stack, "alice", f"#/sessions/{session_id}")
    # the stream replays the session's events and then ends; the view says "finished" once
    # it has drawn what it last read, and redraws nothing after: the table read below is
    # the final one, the one `view` holds (#status says "completed" from the first draw,
    # which the replayed events then redrew under the reads)
    expect(page.locator("#live")).to_have_text("finished: completed")
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")

    table = page.locator("#steps-table")
    final = table.element_handle()
    expect(table.locator("thead th")).to_have_text(
        ["step", "prompt", "cached", "completion", "cost", "model", "tools", "time"]
    )
    first = table.locator('tbody tr[data-step="1"] td')
    expect(first).to_have_count(8)
    assert first.all_inner_texts()[:4] == ["1", "1,200", "1,000", "30"]
    step = view["steps"][0]
    assert first.nth(4).inner_text() == usd(step["cost_usd"])
    # a loaded machine may take over a second for the delayed call: the page says "1.1 s"
    model_ms, off = shown_ms(first.nth(5).inner_text())
    assert abs(model_ms - step["latency_ms"]) <= off and step["latency_ms"] >= 300
    tool_ms, off = shown_ms(first.nth(6).inner_text())
    assert abs(tool_ms - step["calls"][0]["observation"]["duration_ms"]) <= off
    # the bar as drawn: the step's model time over the longest step's time (model and
    # tools), of its track; which step is longest is the machine's (a loaded one may take
    # longer over the second model call than over the first's delay)
    # both boxes measured in one evaluation, of one bar
    track, drawn = first.nth(7).evaluate(
        "cell => ['.spark', '.spark .model'].map("
        "(css) => cell.querySelector(css).getBoundingClientRect().width)"
    )
    longest = max(
        s["latency_ms"] + sum((c["observation"] or {}).get("duration_ms") or 0 for c in s["calls"])
        for s in view["steps"]
    )
    assert track > 0 and drawn / track == pytest.approx(step["latency_ms"] / longest, abs=0.02)
    totals = table.locator("tfoot tr.totals > *")
    assert totals.all_inner_texts()[:4] == ["total", "2,500", "1,000", "42"]
    assert totals.nth(4).inner_text() == usd(view["totals"]["cost_usd"])

    card = page.locator('#timeline section.step[data-step="1"]')
    expect(card.locator("p.usage")).to_contain_text(
        "1,200 prompt (1,000 cached) + 30 completion tokens"
    )
    expect(card.locator("p.usage")).to_contain_text(" · model ")
    expect(card.locator("p.usage")).to_contain_text(" · tools ")
    expect(card.locator('[data-call="s1c0"] .took')).to_contain_text("took ")
    expect(page.locator('#timeline section.step[data-step="2"] p.usage')).not_to_contain_text(
        "tools"
    )  # no calls: no tool time
    looked_at(page, "session-steps", tmp_path)
    assert final.evaluate("table => table.isConnected"), "the finished view was redrawn"


def test_an_operator_resolves_one_dead_letter_and_dismisses_another(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    first, second = (stack.submit(BROKEN, prefix="dead") for _ in range(2))
    for session_id in (first, second):
        assert stack.wait(session_id)["status"] == "failed"
    one, other = (stack.deployment.client.dead_letter(s) for s in (first, second))

    log_in(page, stack, "olga", f"#/dead-letters/{one.id}")
    expect(page.locator("form#close")).to_be_visible()
    looked_at(page, "dead-letter-open", tmp_path)
    page.click("#resolve")  # no reason: asked for one, nothing closed
    expect(page.locator("#close-error")).to_contain_text("Say why you resolve it")
    assert stack.deployment.client.dead_letter(one.id).resolved_at is None
    page.fill("#close-reason", "the provider fixed its outage")
    page.click("#resolve")
    closed = page.locator("#closed")
    expect(closed).to_contain_text("resolved by olga")
    expect(closed).to_contain_text("(the provider fixed its outage)")
    expect(page.locator("form#close")).to_have_count(0)
    looked_at(page, "dead-letter-resolved", tmp_path)
    resolved = stack.deployment.client.dead_letter(one.id)
    assert resolved.resolution is not None
    assert resolved.resolution["state"] == "resolved" and resolved.resolution["by"] == "olga"

    # closed by someone else meanwhile: the API's 409 is shown beside the form
    page.goto(f"{stack.url}/#/dead-letters/{other.id}")
    expect(page.locator("form#close")).to_be_visible()
    meanwhile = stack.http("olga").post(
        f"/api/v1/dead-letters/{other.id}/dismiss", json={"reason": "a duplicate"}
    )
    assert meanwhile.status_code == 200, meanwhile.text
    page.fill("#close-reason", "nothing to do")
    page.click("#dismiss")
    expect(page.locator("#close-error")).to_contain_text("dismissed by olga")
    expect(page.locator("#close-reason")).to_have_value("nothing to do")

    page.goto(f"{stack.url}/#/dead-letters")
    row = page.locator(f'#dead-letters tr[data-id="{one.id}"] td.closed')
    expect(row).to_have_text("resolved")
    expect(page.locator(f'#dead-letters tr[data-id="{other.id}"] td.closed')).to_have_text(
        "dismissed"
    )
    looked_at(page, "dead-letters", tmp_path)
    api = stack.http("olga")
    open_before = api.get("/api/v1/dead-letters/stats?unresolved=true").json()["total"]
    page.check("#dl-unresolved")
    page.wait_for_url(lambda url: url.endswith("#/dead-letters?unresolved=1"))
    expect(page.locator("#dl-unresolved")).to_be_checked()
    for letter in (one, other):
        expect(page.locator(f'#dead-letters tr[data-id="{letter.id}"]')).to_have_count(0)
    # the totals follow the checkbox, as the list does (they counted the closed ones too)
    expect(page.locator("#dl-total")).to_have_text(re.compile(r"^\(\d+ open\)$"))
    shown = int(page.locator("#dl-total").inner_text().strip("( open)"))
    open_after = api.get("/api/v1/dead-letters/stats?unresolved=true").json()["total"]
    assert open_before <= shown <= open_after  # other tests' dead letters may arrive meanwhile
    by_code = page.locator('#dl-stats table[data-by="code"] td.num').all_inner_texts()
    assert sum(int(n) for n in by_code) == shown


def test_an_operator_forks_a_dead_letter_under_its_own_admission(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    session_id = stack.submit(
        BROKEN, prefix="dead", priority=3, concurrency_key="repo-a", max_per_key=2
    )
    assert stack.wait(session_id)["status"] == "failed"
    letter = stack.deployment.client.dead_letter(session_id)
    log_in(page, stack, "olga", f"#/dead-letters/{letter.id}")
    form = page.locator("form#fork")
    # the API's bounds; what an empty field keeps: the original's
    for field, low, high in [
        ("#fork-priority", MIN_PRIORITY, MAX_PRIORITY),
        ("#fork-max-per-key", 1, MAX_PER_KEY),
    ]:
        expect(page.locator(field)).to_have_attribute("min", str(low))
        expect(page.locator(field)).to_have_attribute("max", str(high))
    expect(form.locator("legend")).to_have_text(
        [
            "Run it under (empty: the original's)",
            "Budgets (empty: the original's; steps 1 to K count against them)",
        ]
    )
    for field, kept in [("priority", "3"), ("concurrency-key", "repo-a"), ("max-per-key", "2")]:
        expect(page.locator(f"#fork-{field}")).to_have_attribute("placeholder", kept)
    looked_at(page, "dead-letter-fork-form", tmp_path)

    # refused by the API: said beside the field in the form's words, nothing forked
    page.fill("#fork-step", "0")
    page.fill("#fork-priority", str(MIN_PRIORITY - 1))
    page.fill("#fork-concurrency-key", "not a key")
    form.locator("button[type=submit]").click()
    expect(page.locator("#fork-priority-error")).to_have_text(
        f"Priority must be a whole number from {MIN_PRIORITY:,} to {MAX_PRIORITY:,} "
        "(higher is admitted first)."
    )
    expect(page.locator("#fork-error")).to_have_text(
        "Not forked (invalid_input): see the marked field."
    )
    page.fill("#fork-priority", "9")
    form.locator("button[type=submit]").click()
    expect(page.locator("#fork-concurrency-key-error")).to_contain_text(
        "A concurrency key is up to 200 letters, digits and _ - . : / @ + ="
    )
    expect(page.locator("#fork-priority-error")).to_have_text("")
    assert stack.deployment.client.dead_letter(letter.id).resolved_at is None

    page.fill("#fork-concurrency-key", "repo-b")
    page.fill("#fork-max-per-key", "3")
    form.locator("button[type=submit]").click()
    page.wait_for_url(lambda url: "#/sessions/" in url and session_id not in url)
    fork = page.url.rsplit("/", 1)[-1]
    head = stack.http("olga").get(f"/api/v1/sessions/{fork}").json()["head"]
    assert head["parent_id"] == session_id
    assert (head["priority"], head["concurrency_key"], head["max_per_key"]) == (9, "repo-b", 3)
    page.goto(f"{stack.url}/#/sessions/{fork}/compare")
    expect(page.locator("#fork-patch dd")).to_have_text(
        ["priority 9, concurrency key repo-b, at most 3 of its key at once"]
    )


def test_an_operator_forks_a_budget_dead_letter_with_more_of_that_budget(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    project = a_project(tmp_path)
    call = {"name": "run_command", "arguments": {"command": "true"}}
    spec = stack.deployment.script(
        [
            {"content": "one", "tool_calls": [call]},
            {"content": "two", "tool_calls": [{**call, "arguments": {"command": "echo 2"}}]},
            {"content": "done"},
        ]
    )
    parent = stack.deployment.client.submit(
        "repair",
        {"workspace": str(project), "test_command": "true", "setup": "none"},
        model=spec,
        budgets={"max_steps": 1},
    ).id
    assert stack.wait(parent)["error_code"] == "BUDGET_STEPS"
    letter = stack.deployment.client.dead_letter(parent)
    log_in(page, stack, "olga", f"#/dead-letters/{letter.id}")
    form = page.locator("form#fork")
    # what an empty field keeps: the original's budgets
    expect(page.locator("#fork-max-steps")).to_have_attribute("placeholder", "1")
    # the budget it ran out of is proposed raised, as `dlq show`'s next step: the form's
    # default fork stopped again the same way
    expect(page.locator("#fork-max-steps")).to_have_value("2")
    expect(page.locator("#fork-max-tokens")).to_have_value("")
    page.fill("#fork-step", "1")
    page.fill("#fork-max-steps", "")  # the original's, which the kept step used up
    # the kept step counts against the steps: the API's refusal beside the field
    form.locator("button[type=submit]").click()
    expect(page.locator("#fork-max-steps-error")).to_contain_text("give `max_steps` above 1")
    page.fill("#fork-max-steps", "5")
    page.fill("#fork-deadline-s", "soon")
    form.locator("button[type=submit]").click()
    expect(page.locator("#fork-deadline-s-error")).to_contain_text('"soon" is not a duration')
    assert stack.deployment.client.dead_letter(letter.id).resolved_at is None

    page.fill("#fork-deadline-s", "2h")
    form.locator("button[type=submit]").click()
    page.wait_for_url(lambda url: "#/sessions/" in url and parent not in url)
    fork = page.url.rsplit("/", 1)[-1]
    view = stack.http("olga").get(f"/api/v1/sessions/{fork}").json()
    assert view["forked_from"]["patch"] == {"budgets": {"max_steps": 5, "deadline_s": 7200}}
    assert stack.wait(fork)["status"] == "completed"


def test_an_operator_forks_a_dead_letter_onto_a_larger_context_window(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    from playwright.sync_api import expect

    session_id = stack.submit(BROKEN, prefix="dead", context_window=4096)
    assert stack.wait(session_id)["status"] == "failed"
    letter = stack.deployment.client.dead_letter(session_id)
    log_in(page, stack, "olga", f"#/dead-letters/{letter.id}")
    window = page.locator("#fork-context-window")
    expect(window).to_have_value("4096")  # the window the session ran under, to be raised
    expect(window).to_have_attribute("min", str(MIN_WINDOW))
    expect(window).to_have_attribute("max", str(MAX_WINDOW))

    page.fill("#fork-step", "0")
    page.fill("#fork-context-window", str(MAX_WINDOW + 1))
    page.click("form#fork button[type=submit]")
    expect(page.locator("#fork-context-window-error")).to_have_text(
        f"The context window must be a whole number of tokens from {MIN_WINDOW:,} "
        f"to {MAX_WINDOW:,}."
    )
    assert stack.deployment.client.dead_letter(letter.id).resolved_at is None

    page.fill("#fork-context-window", "16000")
    page.click("form#fork button[type=submit]")
    page.wait_for_url(lambda url: "#/sessions/" in url and session_id not in url)
    fork = page.url.rsplit("/", 1)[-1]
    view = stack.http("olga").get(f"/api/v1/sessions/{fork}").json()
    assert view["head"]["config"]["context"]["window"] == 16000
    assert view["forked_from"]["patch"] == {"context_window": 16000}
    page.goto(f"{stack.url}/#/sessions/{fork}/compare")
    patch = page.locator("#fork-patch")
    expect(patch.locator("dt")).to_have_text(["context window"])
    expect(patch.locator("dd")).to_have_text(["16,000 tokens (the parent's: 4,096)"])


def test_a_fork_left_at_the_sessions_window_asks_for_none(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    from playwright.sync_api import expect

    session_id = stack.submit(BROKEN, prefix="dead", context_window=4096, priority=3)
    assert stack.wait(session_id)["status"] == "failed"
    letter = stack.deployment.client.dead_letter(session_id)
    log_in(page, stack, "olga", f"#/dead-letters/{letter.id}")
    expect(page.locator("#fork-context-window")).to_have_value("4096")
    page.fill("#fork-step", "0")
    page.click("form#fork button[type=submit]")
    page.wait_for_url(lambda url: "#/sessions/" in url and session_id not in url)
    fork = page.url.rsplit("/", 1)[-1]
    view = stack.http("olga").get(f"/api/v1/sessions/{fork}").json()
    # nothing changed, nothing in the patch: the fork has the original's window and admission
    assert view["forked_from"]["patch"] == {}
    assert view["head"]["config"]["context"]["window"] == 4096
    assert view["head"]["priority"] == 3


def test_an_approver_is_not_offered_resolve_or_dismiss(page: Any, stack: Stack) -> None:  # noqa: F811
    from playwright.sync_api import expect

    session_id = stack.submit(BROKEN, prefix="dead")
    assert stack.wait(session_id)["status"] == "failed"
    letter = stack.deployment.client.dead_letter(session_id)
    log_in(page, stack, "alice", f"#/dead-letters/{letter.id}")
    expect(page.locator("#dead-letter")).to_contain_text(f"Dead letter #{letter.id}")
    expect(page.locator("form#close")).to_have_count(0)
    refused = stack.http("alice").post(
        f"/api/v1/dead-letters/{letter.id}/resolve", json={"reason": "mine to close?"}
    )
    assert refused.status_code == 403  # the role the page asks for is the API's


def test_a_fork_is_shown_beside_its_parent_with_both_patches(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    project = a_project(tmp_path)

    def run(command: str) -> dict[str, Any]:
        return {"name": "run_command", "arguments": {"command": command}}

    # the parent runs out of steps after one; its fork, with more, goes on
    spec = stack.deployment.script(
        [
            {"content": "mark it", "tool_calls": [run("printf 'one\\n' >> fixed.txt")]},
            {"content": "and more", "tool_calls": [run("printf 'two\\n' >> extra.txt")]},
            {"content": "done twice"},
        ]
    )
    parent = stack.deployment.client.submit(
        "repair",
        {"workspace": str(project), "test_command": "true"},
        model=spec,
        budgets={"max_steps": 1},
    ).id
    assert stack.wait(parent, Status.COMPLETED, Status.FAILED)["status"] == "failed"
    answer = stack.http("olga").post(
        f"/api/v1/sessions/{parent}/fork",
        json={
            "from_step": 1,
            "append_instruction": "also write extra.txt",
            "budgets": {"max_steps": 5},
            "priority": 7,
        },
    )
    assert answer.status_code == 201, answer.text
    fork = answer.json()["id"]
    assert stack.wait(fork, Status.COMPLETED, Status.FAILED)["status"] == "completed"

    log_in(page, stack, "alice", f"#/sessions/{parent}")
    expect(page.locator("#compare-link")).to_be_hidden()  # a parent has no parent
    expect(page.locator("#forks")).to_contain_text(f"Forks (1): {fork} from step 1, completed")
    page.click(f'#forks a[data-fork="{fork}"]')
    page.wait_for_url(lambda url: url.endswith(f"#/sessions/{fork}/compare"))
    page.goto(f"{stack.url}/#/sessions/{fork}")
    expect(page.locator("#forks")).to_be_hidden()
    page.click("#compare-link")
    page.wait_for_url(lambda url: url.endswith(f"#/sessions/{fork}/compare"))
    expect(page.locator("#compare-title")).to_contain_text(
        f"Fork {fork} beside its parent {parent}"
    )
    patch = page.locator("#fork-patch")
    expect(patch).to_contain_text("from step 1")
    expect(patch).to_contain_text("by olga")
    expect(patch.locator("dt")).to_have_text(["instruction after step 1", "budgets", "admission"])
    expect(patch.locator("dd").first).to_have_text("also write extra.txt")
    expect(patch.locator("dd").nth(1)).to_contain_text('"max_steps": 5')
    expect(patch.locator("dd").nth(2)).to_have_text("priority 7")

    heads = page.locator("#compare .pair.heads")
    expect(heads.locator(f'.side.parent[data-session="{parent}"]')).to_contain_text("1 step ·")
    expect(heads.locator(f'.side.parent[data-session="{parent}"] p.error')).to_contain_text(
        "BUDGET_STEPS"
    )
    expect(heads.locator(f'.side.fork[data-session="{fork}"]')).to_contain_text("3 steps ·")
    kept = page.locator("#kept-steps")
    expect(kept.locator("summary")).to_have_text("Steps 1\u20131: the parent's, kept by the fork")
    expect(kept.locator('.pair[data-step="1"] .side')).to_have_count(2)
    second = page.locator('#compare > .pair[data-step="2"]')
    expect(second.locator(".side.parent p.none")).to_have_text("no step here in the parent")
    expect(second.locator(".side.fork blockquote.thought")).to_have_text("and more")
    expect(second.locator(".side.fork pre.args")).to_contain_text("extra.txt")
    third = page.locator('#compare > .pair[data-step="3"]')
    expect(third.locator(".side.parent p.none")).to_have_text("no step here in the parent")
    expect(third.locator(".side.fork blockquote.thought")).to_have_text("done twice")

    patches = page.locator("#compare-patches")
    parent_diff = patches.locator(f'.side.parent[data-session="{parent}"] pre.diff')
    fork_diff = patches.locator(f'.side.fork[data-session="{fork}"] pre.diff')
    expect(parent_diff.locator(".line.add")).to_have_text(["+one\n"])
    expect(fork_diff.locator(".line.add")).to_have_text(["+two\n", "+one\n"])
    expect(fork_diff.locator(".line.file")).to_contain_text(["+++ b/extra.txt", "+++ b/fixed.txt"])
    looked_at(page, "fork-beside-parent", tmp_path)
    kept.locator("summary").click()
    looked_at(page, "fork-beside-parent-kept", tmp_path)

    page.goto(f"{stack.url}/#/sessions/{parent}/compare")
    expect(page.locator("#not-a-fork")).to_contain_text(f"Session {parent} is not a fork")

    # a view still loading (its patch held back) does not draw over the one opened after it
    def held(route: Any) -> None:
        time.sleep(1.5)
        route.continue_()

    page.route(f"**/api/v1/sessions/{fork}/patch", held)
    page.evaluate(
        """(fork) => {
        location.hash = `#/sessions/${fork}/compare`;
        setTimeout(() => { location.hash = "#/approvals"; }, 100);
    }""",
        fork,
    )
    page.wait_for_timeout(2500)
    expect(page.locator("#approvals")).to_be_visible()
    expect(page.locator("#compare-title")).to_have_count(0)


@contextlib.contextmanager
def following_as_rita(browser: Any, stack: Stack, tmp_path: Path) -> Iterator[tuple[Any, Path]]:  # noqa: F811
    """The page of a session waiting for a person, followed live by rita (an approver) on
    a server that reads its tokens from a file: the page, and the tokens file to change."""
    import json

    from playwright.sync_api import expect

    from tests.api.conftest import Server
    from tickwork.api import ApiSettings, make_api

    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({RITA: {"name": "rita", "roles": ["approver"]}}))
    session_id = stack.waiting()
    context = browser.new_context()
    try:
        with Server(make_api(stack.deployment.settings, ApiSettings(api_tokens_file=path))) as s:
            shown = context.new_page()
            # the page's reads of the session, counted as they are answered
            shown.add_init_script(COUNTS_READS.replace("PATH", f"/api/v1/sessions/{session_id}"))
            shown.goto(f"{s.url}/#/sessions/{session_id}")
            shown.fill("#token", RITA)
            shown.click("form#login button[type=submit]")
            expect(shown.locator("#live")).to_have_text("live")
            # the view reads the session again once the stream's first events are drawn:
            # done before the token changes, it is not what answers that change
            expect(shown.locator('#events li[data-kind="approval_requested"]')).to_have_count(1)
            until(lambda: shown.evaluate("window.reads") >= 2, what="the view's second read")
            yield shown, path
    finally:
        context.close()


def test_the_live_view_says_why_its_stream_ended_when_its_token_moved(
    browser: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    """A token moved to another tenant while it follows a session: the stream's last
    `error` frame is shown as why the view stopped following, not listed as an event of the
    session."""
    import json

    from playwright.sync_api import expect

    with following_as_rita(browser, stack, tmp_path) as (shown, path):
        rita = {"name": "rita", "roles": ["approver"], "tenant": "team-z"}
        path.write_text(json.dumps({RITA: rita}))
        expect(shown.locator("#live")).to_contain_text(
            "stream ended: rita's token no longer sees session"
        )
        expect(shown.locator('li[data-kind="error"]')).to_have_count(0)


def test_a_token_revoked_while_the_live_view_follows_logs_the_page_out(
    browser: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    """The token is revoked while the page follows a session waiting for a person: the
    stream ends with its `error` frame (401), and nothing else reads meanwhile. The view said
    "stream ended" and stayed, its buttons offered to a token no longer valid; it goes back
    to the token prompt, saying the token was revoked."""
    from playwright.sync_api import expect

    with following_as_rita(browser, stack, tmp_path) as (shown, path):
        path.write_text("{}")
        expect(shown.locator("form#login")).to_be_visible()
        expect(shown.locator("#login-error")).to_contain_text(
            "the token this stream was opened with was revoked"
        )
        expect(shown.locator("#logout")).to_be_hidden()
        assert shown.evaluate("sessionStorage.getItem('tickwork.token')") is None
