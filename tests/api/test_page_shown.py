"""How the page shows what it shows, in headless Chromium against a real server (Postgres +
Redis): the session view draws again only what changed (a step's button that did not change
is the same element after the session moved on, so a click whose press and release straddle
a redraw is not lost), and a whole session id stays on one line in the lists."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import Status

from tests.api.conftest import TEST_KIND, Stack
from tests.api.test_page import REFRESH_MS, browser, log_in, page  # noqa: F401 (fixtures)
from tests.api.test_page_actions import looked_at
from tests.api.test_page_forms import DIES_AFTER_A_STEP as DIES
from tests.api.test_sessions import ECHO

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
    # the events' numbers have room: "10." lost its first digit to the list's scrolling box
    room, number = page.locator("#events").evaluate(
        """ol => {
        const pen = document.createElement("canvas").getContext("2d");
        pen.font = getComputedStyle(ol).font;
        return [parseFloat(getComputedStyle(ol).paddingLeft), pen.measureText("9999. ").width];
    }"""
    )
    assert room >= number, f"the events' numbers are cut off: {room}px for {number}px"


def test_an_approve_button_is_the_same_element_after_the_queue_reloads(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The approvals queue reloads itself every few seconds: a card that did not change
    stays the element it was, while a session that came since is drawn."""
    from playwright.sync_api import expect

    first = stack.waiting(prefix="queued")
    log_in(page, stack, "alice")
    card = f'section.waiting[data-session="{first}"] article[data-call="s1c0"]'
    approve = page.locator(f"{card} button.approve")
    expect(approve).to_be_visible()
    button = approve.element_handle()
    later = stack.waiting(prefix="later")
    expect(page.locator(f'section.waiting[data-session="{later}"]')).to_have_count(1)
    assert button.evaluate("(b, now) => b.isConnected && b === now", approve.element_handle())
    approve.click()
    expect(page.locator(f"{card} p.decided")).to_contain_text("Approved s1c0")
    stack.wait(first, Status.COMPLETED)


def test_a_whole_session_id_stays_on_one_line_in_the_lists_at_a_laptops_width(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    made = stack.http("sam").post(
        "/api/v1/sessions",
        json={
            "kind": TEST_KIND,
            "input": {"sink": str(stack.deployment.sink)},
            "model": stack.deployment.script(DIES),
            "id": uuid.uuid4().hex,  # as the API makes one: 32 hex digits
        },
    )
    assert made.status_code == 201, made.text
    session_id = made.json()["id"]
    stack.wait(session_id, Status.FAILED)
    log_in(page, stack, "olga", "#/sessions?submitted_by=sam&status=failed")
    page.set_viewport_size({"width": 1280, "height": 900})
    shown = page.locator(f'#sessions tr[data-session="{session_id}"] td a.id')
    seen = page.locator(f'#dead-letters td code.id[title="{session_id}"]')
    for where, cell in (("#/sessions", shown), ("#/dead-letters", seen)):
        page.goto(f"{stack.url}/{where}")
        expect(cell).to_have_attribute("title", session_id)  # the whole id, on hovering
        expect(cell).to_have_text(session_id)  # and in the page: selected, it copies whole
        lines = cell.evaluate("e => e.getClientRects().length")
        height, line = cell.evaluate(
            "e => [e.getBoundingClientRect().height, parseFloat(getComputedStyle(e).lineHeight)]"
        )
        assert lines == 1 and height < 1.5 * line, f"{where}: the id wraps ({height}px)"
        visible = cell.evaluate("e => e.clientWidth / e.scrollWidth")
        assert visible > 0.3, f"{where}: too little of the id shows ({visible:.0%})"
        looked_at(page, f"session-ids-{where[2:]}", tmp_path)


def test_a_fork_beside_its_parent_says_the_model_and_price_it_was_given(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """What the fork changed listed its instruction, prompt, outputs, budgets, admission
    and window, but not the model it runs on instead nor the price it was given: a fork
    onto another model read as the same run again."""
    from playwright.sync_api import expect

    parent = stack.submit(ECHO, prefix="model-parent")
    had = stack.wait(parent, Status.COMPLETED)["model"]
    model = stack.deployment.script([{"content": "the other model answered"}])
    answer = stack.http("olga").post(
        f"/api/v1/sessions/{parent}/fork",
        json={"from_step": 1, "model": model, "price": [1, 2]},
    )
    assert answer.status_code == 201, answer.text
    fork = answer.json()["id"]
    log_in(page, stack, "alice", f"#/sessions/{fork}/compare")
    patch = page.locator("#fork-patch")
    expect(patch.locator("dt")).to_contain_text(["model", "price"])
    expect(patch.locator("dt:text-is('model') + dd")).to_have_text(f"{model} (the parent's: {had})")
    expect(patch.locator("dt:text-is('price') + dd")).to_have_text(
        "prompt $1, completion $2 per million tokens"
    )


def test_a_failed_session_its_dead_letter_and_its_fork_link_to_each_other(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """A failed session's view did not lead to its dead letter (where it is forked,
    resolved or dismissed), the dead letter named its session as text, and a fork named
    its parent as text: each is a link now."""
    from playwright.sync_api import expect

    failed = stack.submit(DIES, prefix="dies")
    stack.wait(failed, Status.FAILED)
    log_in(page, stack, "olga", f"#/sessions/{failed}")
    expect(page.locator("#status")).to_have_attribute("data-status", "failed")
    page.click("#dead-letter-link")
    expect(page.locator("#dead-letter")).to_contain_text("MODEL_ERROR")
    page.click("#letter-session")
    expect(page.locator("#status")).to_have_attribute("data-status", "failed")
    answer = stack.http("olga").post(f"/api/v1/dead-letters/{failed}/fork", json={"from_step": 1})
    assert answer.status_code == 201, answer.text
    fork = answer.json()["id"]
    page.goto(f"{stack.url}/#/sessions/{fork}")
    page.click(f'.summary a.parent[href="#/sessions/{failed}"]')
    expect(page).to_have_url(f"{stack.url}/#/sessions/{failed}")
    expect(page.locator("#forks")).to_contain_text(f"Forks (1): {fork} from step 1")


def test_the_list_takes_a_sessions_forks_from_its_address_as_the_docs_say(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """docs/PAGE.md gives `parent_id` among the list's filters kept in the address, but
    the page read only the other four: `#/sessions?parent_id=ID` listed every session."""
    from playwright.sync_api import expect

    parent = stack.submit(ECHO, prefix="has-forks")
    other = stack.submit(ECHO, prefix="no-forks")
    for done in (parent, other):
        stack.wait(done, Status.COMPLETED)
    answer = stack.http("olga").post(f"/api/v1/sessions/{parent}/fork", json={"from_step": 1})
    assert answer.status_code == 201, answer.text
    fork = answer.json()["id"]
    log_in(page, stack, "olga", f"#/sessions?parent_id={parent}")
    expect(page.locator("#parent-filter")).to_have_value(parent)
    expect(page.locator("#sessions tbody tr")).to_have_count(1)
    expect(page.locator(f'#sessions tr[data-session="{fork}"]')).to_have_count(1)
    page.click("#clear-filters")
    expect(page.locator(f'#sessions tr[data-session="{other}"]')).to_have_count(1)
    page.fill("#parent-filter", other)
    page.click("#session-filters button[type=submit]")
    expect(page.locator("#no-sessions")).to_be_visible()
    assert page.url.endswith(f"#/sessions?parent_id={other}")


def test_the_list_pages_back_past_its_first_page(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The list asked for the newest 100 sessions and said nothing of the rest: an older
    session was out of reach but through a filter. A full page offers the older ones."""
    from playwright.sync_api import expect

    parent = stack.submit(ECHO, prefix="paged")
    stack.wait(parent, Status.COMPLETED)
    forks = []
    for _ in range(3):
        answer = stack.http("olga").post(f"/api/v1/sessions/{parent}/fork", json={"from_step": 1})
        assert answer.status_code == 201, answer.text
        forks.append(answer.json()["id"])
    log_in(page, stack, "olga", f"#/sessions?parent_id={parent}&limit=2")
    rows = page.locator("#sessions tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#newer")).to_have_count(0)
    expect(page.locator("#pager")).to_contain_text("1\u20132")
    page.click("#older")
    expect(rows).to_have_count(1)
    expect(page.locator("#pager span")).to_have_text("3")
    expect(page.locator("#older")).to_have_count(0)
    page.click("#newer")
    expect(rows).to_have_count(2)
    shown = set(rows.evaluate_all("rs => rs.map((r) => r.dataset.session)"))
    page.click("#older")
    expect(rows).to_have_count(1)
    shown |= set(rows.evaluate_all("rs => rs.map((r) => r.dataset.session)"))
    assert shown == set(forks)  # each once, none left out


def test_the_dead_letters_page_back_past_their_first_page(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The same for the dead letters, which listed the newest 100 alone."""
    from playwright.sync_api import expect

    for _ in range(2):
        stack.wait(stack.submit(DIES, prefix="paged-dies"), Status.FAILED)
    log_in(page, stack, "olga", "#/dead-letters?limit=1")
    rows = page.locator("#dead-letters tbody tr")
    expect(rows).to_have_count(1)
    first = rows.get_attribute("data-id")
    page.click("#older")
    expect(page).to_have_url(f"{stack.url}/#/dead-letters?limit=1&offset=1")
    expect(rows).to_have_count(1)
    expect(rows).not_to_have_attribute("data-id", str(first))
    expect(page.locator("#pager span")).to_have_text("2")
    page.click("#newer")
    expect(rows).to_have_attribute("data-id", str(first))


def test_a_repair_whose_tests_ran_old_compiled_code_says_so_as_show_does(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """A repair that changed an extension module's C source without rebuilding it has
    `stale_build` on its final tests: `tickwork show` prints it under the final tests'
    line, the page showed neither. Its summary now has both. (The session's result is the
    repair job's record, put into the API's answer: a real one builds a C extension.)"""
    from playwright.sync_api import expect
    from tickwork.fsm.outcomes import lacking_fixtures
    from tickwork.worker.files.versions import unrebuilt_note

    session_id = stack.submit(ECHO, prefix="stale")
    stack.wait(session_id, Status.COMPLETED)
    stale = unrebuilt_note(["pkg/_speedups.c"], ["pkg/_speedups.cpython-311-x86_64-linux-gnu.so"])
    tests = {"command": "python3 -m pytest", "exit_code": 0, "passed": True, "timed_out": False}
    # and, as `show` and `ls` say it, the plugin whose fixtures its tests lacked
    lacking = lacking_fixtures("E       fixture 'mocker' not found")

    def as_a_repair(route: Any) -> None:
        view = route.fetch().json()
        view["head"]["result"]["tests"] = {
            **tests,
            "output": "1 passed",
            "stale_build": stale,
            "lacking_plugins": lacking,
        }
        route.fulfill(json=view)

    page.route(f"**/api/v1/sessions/{session_id}", as_a_repair)
    log_in(page, stack, "olga", f"#/sessions/{session_id}")
    shown = page.locator("#final-tests")
    expect(shown.locator("p.meta")).to_have_text("Final tests: python3 -m pytest exit 0, passed")
    expect(shown.locator("#stale-build")).to_have_text(stale)
    expect(shown.locator("#lacking-plugins")).to_have_text(str(lacking))
    assert "did not rebuild pkg/_speedups.cpython-311" in stale
    # a refresh of the view may be in the handler still: let it answer before the route goes
    page.unroute_all(behavior="wait")
    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    expect(page.locator("#final-tests")).to_have_count(0)  # a session of another kind has none


def test_a_call_approved_in_the_queue_stays_shown_as_decided_after_the_queue_reloads(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """Approved in the queue, a card said "Approved ... Follow the session"; the queue's
    next reload (within 5 s) no longer listed the session and took the card away, before
    the approver had read the outcome. A session decided here stays where it was, as
    decided, until the view is left; so does a card someone else decided first."""
    from playwright.sync_api import expect

    session_id = stack.waiting(prefix="kept")
    page.clock.install()  # the queue's refresh timer, run on demand below
    log_in(page, stack, "alice")
    section = page.locator(f'section.waiting[data-session="{session_id}"]')
    section.locator('article[data-call="s1c0"] button.approve').click()
    expect(section).to_contain_text("Approved s1c0 (danger) as alice")
    stack.wait(session_id, Status.COMPLETED)
    with page.expect_response("**/api/v1/approvals") as reloaded:
        page.clock.run_for(REFRESH_MS + 1000)
    assert session_id not in reloaded.value.text()
    expect(section.locator("p.decided")).to_contain_text("Approved s1c0 (danger) as alice")
    section.locator("a.follow").click()
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    page.click('nav a[data-nav="approvals"]')
    expect(page.locator(f'section.waiting[data-session="{session_id}"]')).to_have_count(0)


#: a risky call, then another: the session waits for a person twice
WAITS_TWICE = [
    {"content": "delete it", "tool_calls": [{"name": "danger", "arguments": {"value": "db"}}]},
    {"content": "and this", "tool_calls": [{"name": "danger", "arguments": {"value": "log"}}]},
    {"content": "done"},
]


def test_a_call_approved_in_the_queue_stays_decided_beside_the_next_call_of_its_session(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """A session decided in the queue kept its card, as decided, only while the session
    waited for nobody: its next risky call brought the session back into the queue, and the
    reload drew the session's section anew, the card of the call decided here (and its
    outcome) gone. The decided card stays, beside the new one."""
    from playwright.sync_api import expect

    from tickwork.testing import until

    session_id = stack.waiting(WAITS_TWICE, prefix="twice")
    page.clock.install()  # the queue's refresh timer, run on demand below
    log_in(page, stack, "alice")
    section = page.locator(f'section.waiting[data-session="{session_id}"]')
    section.locator('article[data-call="s1c0"] button.approve').click()
    decided = section.locator('article[data-call="s1c0"] p.decided')
    expect(decided).to_contain_text("Approved s1c0 (danger) as alice")
    until(
        lambda: stack.deployment.client.load(session_id).head.awaiting == ("s2c0",) or None,
        timeout=60,
        what=f"{session_id} to wait for s2c0",
    )
    with page.expect_response("**/api/v1/approvals") as reloaded:
        page.clock.run_for(REFRESH_MS + 1000)
    assert '"s2c0"' in reloaded.value.text()
    expect(section.locator('article[data-call="s2c0"] button.approve')).to_be_visible()
    expect(decided).to_contain_text("Approved s1c0 (danger) as alice")
    expect(section.locator("article.call")).to_have_count(2)
    cards = section.locator("article.call").evaluate_all("cs => cs.map((c) => c.dataset.call)")
    assert cards == ["s1c0", "s2c0"]
    # and again at the next reload, which changes nothing
    with page.expect_response("**/api/v1/approvals"):
        page.clock.run_for(REFRESH_MS + 1000)
    expect(decided).to_contain_text("Approved s1c0 (danger) as alice")
    section.locator('article[data-call="s2c0"] button.approve').click()
    expect(section.locator('article[data-call="s2c0"] p.decided')).to_contain_text(
        "Approved s2c0 (danger) as alice"
    )
    stack.wait(session_id, Status.COMPLETED)


def test_a_call_approved_in_the_session_view_stays_shown_as_decided(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The session view's card of a waiting call went as soon as the session moved on,
    its "Approved ..." with it; it stays, as decided, as in the approvals queue."""
    from playwright.sync_api import expect

    session_id = stack.waiting(prefix="kept-here")
    log_in(page, stack, "alice", f"#/sessions/{session_id}")
    card = page.locator('#waiting article[data-call="s1c0"]')
    card.locator("button.approve").click()
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    expect(page.locator("#live")).to_have_text("finished: completed")
    expect(card.locator("p.decided")).to_contain_text("Approved s1c0 (danger) as alice")
    expect(page.locator("#waiting h3")).to_have_text("Decided here")


def test_a_call_approved_in_the_session_view_stays_decided_above_the_next_call_waiting(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The same in the session view: its card of a call decided there went as soon as the
    session waited for its next call, drawn alone under "Waiting for you"."""
    from playwright.sync_api import expect

    session_id = stack.waiting(WAITS_TWICE, prefix="twice-here")
    log_in(page, stack, "alice", f"#/sessions/{session_id}")
    page.locator('#waiting article[data-call="s1c0"] button.approve').click()
    expect(page.locator('#waiting article[data-call="s2c0"] button.approve')).to_be_visible()
    decided = page.locator('#waiting article[data-call="s1c0"] p.decided')
    expect(decided).to_contain_text("Approved s1c0 (danger) as alice")
    expect(page.locator("#waiting h3")).to_have_text(["Decided here", "Waiting for you"])
    page.locator('#waiting article[data-call="s2c0"] button.approve').click()
    expect(page.locator("#live")).to_have_text("finished: completed")
    expect(page.locator("#waiting article.call.done")).to_have_count(2)
    expect(page.locator("#waiting h3")).to_have_text("Decided here")


#: three steps that read, then an answer: room for a mask and a compaction between them
READS = [
    *[
        {"content": f"read {n}", "tool_calls": [{"name": "echo", "arguments": {"text": n}}]}
        for n in ("a", "b", "c")
    ],
    {"content": "done"},
]


def test_the_page_says_why_a_compaction_was_made_and_where_stubs_began_as_show_does(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """`tickwork show` says why a compaction was made at once (the model refused the prompt
    as too long, from the step's `refused_prompt`), and at which step the model began to
    read older observations as stubs (`masked_through`); the page's heading said only that
    a step was a compaction, and nothing of stubs. (A long session under a small window
    makes both: here the API's answer is made so, as the worker's tests check the steps.)"""
    from playwright.sync_api import expect

    session_id = stack.submit(READS, prefix="refused")
    stack.wait(session_id, Status.COMPLETED)

    def compacted(route: Any) -> None:
        view = route.fetch().json()
        view["steps"][1]["masked_through"] = 1
        view["steps"][3]["masked_through"] = 2
        view["steps"][2].update(
            kind="compaction",
            compacted_through=2,
            masked_through=2,
            refused_prompt={"prompt_tokens_estimate": 8_100, "window": 8_192},
        )
        route.fulfill(json=view)

    page.route(f"**/api/v1/sessions/{session_id}", compacted)
    log_in(page, stack, "olga", f"#/sessions/{session_id}")
    expect(page.locator('#timeline section.step[data-step="3"] h4')).to_have_text(
        "Step 3 · compaction of steps 1-2 (the model refused the prompt of about 8,100 tokens "
        "in a window of 8,192 as too long)"
    )
    expect(page.locator('#timeline section.step[data-step="4"] h4')).to_have_text("Step 4")
    usage = '#timeline section.step[data-step="{}"] p.usage'
    expect(page.locator(usage.format(2))).to_contain_text(
        " · observations of steps ≤1 shown as stubs"
    )
    for step in (1, 3, 4):  # none yet, the compaction's own cut, no further than it
        expect(page.locator(usage.format(step))).not_to_contain_text("stubs")
    # a refresh of the view may be in the handler still: let it answer before the route goes
    page.unroute_all(behavior="wait")


def test_a_taken_over_or_refused_tick_says_from_whom_and_why_in_the_events(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The relay's `taken_over` (the worker it was taken from) and a worker's `tick_refused`
    (who, at what version, why) were listed on the page by their kind alone: the page's
    event line names only the keys it knows, and knew none of theirs."""
    from playwright.sync_api import expect
    from tickwork.fsm.values import Event, EventKind
    from tickwork.store import rows
    from tickwork.store.schema import events

    session_id = stack.submit(ECHO, prefix="relayed")
    stack.wait(session_id, Status.COMPLETED)
    now = stack.deployment.client.get(session_id).updated_at
    said = {
        EventKind.TAKEN_OVER: {"from": "alpha@host:41:7@12"},
        EventKind.TICK_REFUSED: {"worker": "beta@host:42", "version": 3, "reason": "no kind"},
    }
    with stack.deployment.client.store.engine.begin() as conn:
        for kind, data in said.items():
            row = rows.event_to_row(session_id, 3, Event(kind=kind, at=now, data=data))
            conn.execute(events.insert(), [row])
    log_in(page, stack, "olga", f"#/sessions/{session_id}")
    taken = page.locator('#events li[data-kind="taken_over"]')
    expect(taken).to_contain_text("from=alpha@host:41:7@12")
    refused = page.locator('#events li[data-kind="tick_refused"]')
    expect(refused).to_contain_text("worker=beta@host:42 version=3 reason=no kind")


def test_a_dead_letters_link_opens_its_own_letter_where_its_session_id_is_digits(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The list links each letter by its session's id; digits there name a letter by its
    number first (as `dlq show` takes them), so the link of session "N" opened dead letter
    #N, another session's. Such a session's letter is linked by its own number."""
    from playwright.sync_api import expect

    other = stack.submit(DIES, prefix="dies")
    stack.wait(other, Status.FAILED)
    number = stack.http("olga").get(f"/api/v1/dead-letters/{other}").json()["id"]
    digits = stack.submit(DIES, id=str(number))
    stack.wait(digits, Status.FAILED)
    letters = stack.http("olga").get("/api/v1/dead-letters").json()
    (own,) = [d["id"] for d in letters if d["session_id"] == digits]
    log_in(page, stack, "olga", "#/dead-letters")
    page.click(f'#dead-letters tr[data-id="{own}"] td.key a')
    expect(page.locator("#dead-letter")).to_contain_text(f"#{own}")
    expect(page.locator("#letter-session")).to_have_text(digits)


def test_a_failed_sessions_link_opens_its_own_letter_where_its_id_is_digits(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """A failed session's "Its dead letter" linked #/dead-letters/ID; digits there name a
    letter by its number first, so session "N" opened dead letter #N, another session's.
    The page finds the letter by the session's id (GET /dead-letters?session_id=) and links
    it by its own number."""
    from playwright.sync_api import expect

    other = stack.submit(DIES, prefix="dies")
    stack.wait(other, Status.FAILED)
    number = stack.http("olga").get(f"/api/v1/dead-letters/{other}").json()["id"]
    digits = stack.submit(DIES, id=str(number))
    stack.wait(digits, Status.FAILED)
    (own,) = stack.http("olga").get("/api/v1/dead-letters", params={"session_id": digits}).json()
    assert own["session_id"] == digits and own["id"] != number
    log_in(page, stack, "olga", f"#/sessions/{digits}")
    expect(page.locator("#status")).to_have_attribute("data-status", "failed")
    page.click("#dead-letter-link")
    expect(page.locator("#dead-letter")).to_contain_text(f"#{own['id']}")
    expect(page.locator("#letter-session")).to_have_text(digits)


def test_the_header_says_who_took_the_session_over_and_which_workers_refused_it_as_show_does(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    """`tickwork show` has a "taken over" row in a session's header (the last time the relay
    took it over from a worker that was gone, and how many times before) and says a session
    is not run because the workers that took its tick refused it; the page's header said
    neither (its events list them, one line each, among the rest). Both are said now, in
    show's words. (A refused tick is for a session waiting for a worker: the API's answer
    is made so here, as the worker's tests check the refusals.)"""
    from playwright.sync_api import expect
    from tickwork.fsm.values import Event, EventKind
    from tickwork.store import rows
    from tickwork.store.schema import events

    from tickwork import render

    session_id = stack.submit(ECHO, prefix="relayed-head")
    stack.wait(session_id, Status.COMPLETED)
    now = stack.deployment.client.get(session_id).updated_at
    with stack.deployment.client.store.engine.begin() as conn:
        for worker in ("alpha@host:41:7@12", "gamma@host:43:9@14"):
            taken = Event(kind=EventKind.TAKEN_OVER, at=now, data={"from": worker})
            conn.execute(events.insert(), [rows.event_to_row(session_id, 3, taken)])
    refusals = [
        {"worker": "beta@host:42", "at": "2026-12-06T03:50:00Z", "reason": "no kind"},
        {"worker": "delta@host:44", "at": "2026-12-06T03:51:30Z", "reason": "no graph v2"},
    ]

    def refused(route: Any) -> None:
        view = route.fetch().json()
        view["refused"] = refusals
        route.fulfill(json=view)

    page.route(f"**/api/v1/sessions/{session_id}", refused)
    log_in(page, stack, "olga", f"#/sessions/{session_id}")
    shown = render.taken_over(
        stack.http("olga").get(f"/api/v1/sessions/{session_id}").json()["events"]
    )
    assert shown is not None and "(and 1 time before)" in shown.plain
    # in show's words, each time with the Z that says it is in UTC
    expect(page.locator(".summary #taken-over")).to_have_text(f"Taken over: {shown.plain}")
    said = render.refused(refusals)
    assert said is not None and "by 2 workers (beta@host:42 at 2026-12-06 03:50:00Z" in said.plain
    expect(page.locator(".summary #refused")).to_have_text("N" + said.plain[1:].replace("`", ""))
    looked_at(page, "relayed-header", tmp_path)  # nothing overflows at a phone's width
    # a refresh of the view may be in the handler still: let it answer before the route goes
    page.unroute_all(behavior="wait")
    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    expect(page.locator(".summary #refused")).to_have_count(0)  # none refused its tick
    expect(page.locator(".summary #taken-over")).to_contain_text("from gamma@host:43:9@14")


def test_the_events_list_and_the_header_both_say_their_times_in_utc(
    browser: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """In a browser away from UTC the header said the relay's take-over in UTC while the
    events list said each event in the browser's own time, neither saying which: both are
    in UTC, with a Z."""
    from datetime import UTC, datetime

    from playwright.sync_api import expect
    from tickwork.fsm.values import Event, EventKind
    from tickwork.store import rows
    from tickwork.store.schema import events

    session_id = stack.submit(ECHO, prefix="zoned")
    stack.wait(session_id, Status.COMPLETED)
    at = datetime(2026, 12, 6, 3, 50, 0, tzinfo=UTC)
    taken = Event(kind=EventKind.TAKEN_OVER, at=at, data={"from": "alpha@host:41:7@12"})
    with stack.deployment.client.store.engine.begin() as conn:
        conn.execute(events.insert(), [rows.event_to_row(session_id, 3, taken)])
    context = browser.new_context(timezone_id="America/New_York")
    try:
        zoned = context.new_page()
        log_in(zoned, stack, "olga", f"#/sessions/{session_id}")
        expect(zoned.locator(".summary #taken-over")).to_contain_text("2026-12-06 03:50:00Z")
        line = zoned.locator('#events li[data-kind="taken_over"] time')
        expect(line).to_have_text("03:50:00Z")
    finally:
        context.close()


def _in_doubt_as_edited(stack: Stack) -> tuple[str, str]:
    """A session whose call bob edited, started with his arguments ({"n": 4242}), and whose
    worker died: the call is in doubt. Its id and the call's."""
    from datetime import timedelta

    from tickwork.fsm import machine
    from tickwork.fsm.machine import Change, RunTool
    from tickwork.fsm.values import Decision, DecisionKind
    from tickwork.worker.tick.runtime import utc_now

    from tickwork.testing.store_ticks import LEASE_S, Clock, claim, new_session, wait_for_approval

    store = stack.deployment.client.store
    # an hour ahead of the wall clock: the stack's relay hands none of these ticks to its
    # worker in the middle of the steps below (tests/api/test_decisions.py says why)
    clock = Clock(utc_now() + timedelta(hours=1))
    session_id = f"doubt-{uuid.uuid4().hex[:8]}"
    store.create(new_session(session_id, now=clock()), now=clock())
    [call] = wait_for_approval(store, session_id, clock, "danger")
    edit = Decision(
        call_id=call.call_id,
        kind=DecisionKind.EDIT,
        approver="bob",
        at=clock(),
        fingerprint=call.fingerprint,
        arguments={"n": 4242},
    )
    store.decide(session_id, edit, now=clock())  # stored, not published: no worker runs it
    claimed = claim(store, session_id, now=clock(), owner="dead")
    todo = machine.start_execute(
        claimed.head, claimed.calls, claimed.decisions, idempotent=False, now=clock()
    )
    assert isinstance(todo, RunTool) and todo.arguments == {"n": 4242}
    store.start_call(session_id, claimed.head.version, todo.call, owner="dead", now=clock())
    later = claim(store, session_id, now=clock.advance(LEASE_S + 1), owner="w2")
    change = machine.start_execute(
        later.head, later.calls, later.decisions, idempotent=False, now=clock()
    )
    assert isinstance(change, Change)
    store.save(change, version=later.head.version, owner="w2", now=clock())
    return session_id, call.call_id


def test_an_in_doubt_call_that_ran_as_edited_shows_the_edited_arguments(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """bob edited the call, it started with his arguments, its worker died: the call is in
    doubt. Its card showed the model's arguments, while `tickwork show`, the diff preview
    and the webhook card said "as edited by bob": it shows bob's, says so, and its edit
    form starts from them (running it again runs it as edited)."""
    from playwright.sync_api import expect

    session_id, call_id = _in_doubt_as_edited(stack)
    log_in(page, stack, "alice", f"#/sessions/{session_id}")

    card = page.locator(f'#waiting article.call[data-call="{call_id}"]')
    expect(card.locator("p.as-edited")).to_have_text("Arguments it ran with, as edited by bob:")
    expect(card.locator("pre.args")).to_contain_text("4242")
    card.locator("button.edit").click()
    expect(card.locator("textarea.edit-args")).to_have_value('{\n  "n": 4242\n}')


def test_the_timeline_shows_the_arguments_an_edited_call_ran_with(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The session's timeline showed an in-doubt call that ran as bob edited it with the
    model's arguments (its approval card, `show` and the webhook card with bob's): it shows
    bob's, says whose, as the API's views say it (`as_edited`), and what the model proposed."""
    from playwright.sync_api import expect

    from tickwork.api.sessions import waiting_view

    session_id, call_id = _in_doubt_as_edited(stack)
    waiting = waiting_view(stack.deployment.client.load(session_id))
    assert [c["as_edited"] for c in waiting["calls"]] == ["as edited by bob"]

    log_in(page, stack, "alice", f"#/sessions/{session_id}")

    shown = page.locator(f'#timeline .tcall[data-call="{call_id}"]')
    expect(shown.locator("p.as-edited")).to_have_text("Arguments it ran with, as edited by bob:")
    expect(shown.locator("pre.args")).to_contain_text("4242")
    expect(shown.locator("pre.proposed")).not_to_contain_text("4242")


def test_a_fork_of_a_fork_beside_its_parent_names_the_forks_before_it(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """What a fork of a fork changed showed its own patch only, though it runs under the
    patches of the forks before it: the page names them, each a link to what it changed."""
    from playwright.sync_api import expect

    parent = stack.submit(ECHO, prefix="chain-root")
    stack.wait(parent, Status.COMPLETED)
    made = []
    for forked_from, instruction in ((parent, "try A"), (None, "try B")):
        answer = stack.http("olga").post(
            f"/api/v1/sessions/{forked_from or made[-1]}/fork",
            json={"from_step": 1, "append_instruction": instruction},
        )
        assert answer.status_code == 201, answer.text
        made.append(answer.json()["id"])
    first, second = made
    log_in(page, stack, "alice", f"#/sessions/{second}/compare")
    expect(page.locator("#fork-patch dd").first).to_have_text("try B")
    earlier = page.locator("#earlier-patches")
    expect(earlier).to_contain_text(f"{first} from step 1 of {parent}")
    earlier.locator("a").click()
    expect(page).to_have_url(f"{stack.url}/#/sessions/{first}/compare")
    expect(page.locator("#fork-patch dd").first).to_have_text("try A")
    expect(page.locator("#earlier-patches")).to_have_count(0)
