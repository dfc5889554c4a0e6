"""The page in headless Chromium, against Postgres + Redis: log in with a token, approve a
waiting call and watch the session move on, reject with feedback, review a file write as a
diff and an adoption as the child's patch, open a dead letter. Skipped locally without
Chromium and Playwright; failed in CI."""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import Status

from tests.api.conftest import TOKEN, Stack
from tests.api.test_adoption_previews import adopting
from tests.api.test_dead_letters import BROKEN
from tests.api.test_sessions import ECHO
from tests.services import IN_CI

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: a file to save the charted page to, to look at it (TICKWORK_TEST_SCREENSHOT)
SCREENSHOT = os.environ.get("TICKWORK_TEST_SCREENSHOT")
#: how long the page may take to show what a worker did
SHOWN_MS = 30_000
#: how often the approvals queue reloads itself (core.js REFRESH_MS)
REFRESH_MS = 5_000

# the page is tested against the production shape only: Postgres + Redis
pytestmark = pytest.mark.parametrize("stack", ["production"], indirect=True)


def unavailable(what: str) -> None:
    message = f"browser tests need {what}"
    if IN_CI:
        pytest.fail(f"CI=true: {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright for Python: pip install -e '.[test]' (never `playwright install`)")
    if not CHROMIUM.exists():
        unavailable(f"Chromium at {CHROMIUM}: apt-get install -y chromium chromium-driver")
    from playwright.sync_api import expect

    # expect()'s own wait (5 s by default) is not the context's: as generous, on a busy machine
    expect.set_options(timeout=SHOWN_MS)
    with sync_playwright() as playwright:
        found = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield found
        found.close()


@pytest.fixture
def page(browser: Any, stack: Stack) -> Iterator[Any]:
    context = browser.new_context()
    context.set_default_timeout(SHOWN_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    yield opened
    context.close()
    assert errors == [], errors


def log_in(page: Any, stack: Stack, who: str, where: str = "") -> None:
    page.goto(f"{stack.url}/{where}")
    page.fill("#token", TOKEN[who])
    page.click("form#login button[type=submit]")
    page.wait_for_selector(f"#who:has-text('{who}')")


def a_project(tmp_path: Path) -> Path:
    """A project to repair, with one file: `tmp_path`/project."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "README").write_text("a project\n")
    return project


@contextlib.contextmanager
def a_repair(stack: Stack, tmp_path: Path, prefix: str) -> Iterator[tuple[Path, str, str]]:
    """A project to repair under the API's workspace roots (while in the block), the script
    of a model that finds nothing to fix, and a new session id starting with `prefix`."""
    workspace = a_project(tmp_path)
    model = stack.deployment.script([{"content": "nothing to fix"}])
    stack.deployment.settings.workspace_roots = [tmp_path]  # the API takes paths under these
    try:
        yield workspace, model, f"{prefix}-{uuid.uuid4().hex[:8]}"
    finally:
        stack.deployment.settings.workspace_roots = []


def fill_the_repair(
    page: Any, workspace: Path, model: str, session_id: str, *, test_command: str | None = None
) -> None:
    """The submit form's fields of a repair of `workspace` without setup, by `model` (and
    its test command, if given)."""
    page.select_option("#submit-source-kind", "workspace")
    page.fill("#submit-workspace", str(workspace))
    page.select_option("#submit-setup-mode", "none")
    if test_command is not None:
        page.fill("#submit-test-command", test_command)
    page.fill("#submit-model", model)
    page.fill("#submit-id", session_id)


def test_log_in_approve_a_call_and_see_the_session_move_on(page: Any, stack: Stack) -> None:
    from playwright.sync_api import expect

    session_id = stack.waiting()
    page.goto(stack.url)
    page.fill("#token", "not-the-right-token")
    page.click("form#login button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("not valid")
    log_in(page, stack, "alice")
    expect(page.locator("#who")).to_have_text("alice (approver)")

    card = page.locator(f'section.waiting[data-session="{session_id}"] article[data-call="s1c0"]')
    expect(card.locator("pre.args")).to_contain_text('"value": "prod-db"')
    expect(card.locator(".fp")).to_contain_text(stack.fingerprint(session_id)[:12])
    expect(card.locator(".reason")).to_have_text(
        "Needs approval: tool 'danger' always needs a person's approval"
    )
    section = page.locator(f'section.waiting[data-session="{session_id}"]')
    expect(section.locator("p.meta")).to_contain_text("submitted by sam")
    card.locator("button.approve").click()
    expect(card).to_contain_text("Approved s1c0 (danger) as alice")
    card.locator("a.follow").click()

    expect(page.locator("#status")).to_have_attribute("data-status", "completed", timeout=SHOWN_MS)
    expect(page.locator('#events li[data-kind="completed"]')).to_have_count(1)
    expect(page.locator('#events li[data-kind="approval_decided"]')).to_contain_text(
        "approver=alice"
    )
    expect(page.locator('#timeline [data-call="s1c0"] pre.output')).to_have_text(
        "destroyed prod-db"
    )
    decision = stack.deployment.client.load(session_id).decision("s1c0")
    assert decision is not None and decision.approver == "alice"


def test_a_call_decided_by_someone_else_meanwhile_says_who_once_and_closes(
    page: Any, stack: Stack
) -> None:
    from playwright.sync_api import expect

    session_id = stack.waiting()
    log_in(page, stack, "bob")
    card = page.locator(f'section.waiting[data-session="{session_id}"] article[data-call="s1c0"]')
    expect(card.locator("button.approve")).to_be_visible()

    def alice_first(route: Any) -> None:
        # alice decides between bob's click and his request reaching the server
        stack.deployment.client.approve(session_id, "s1c0", approver="alice")
        route.continue_()

    page.route("**/calls/s1c0/decision", alice_first)
    card.locator("button.approve").click()
    error = card.locator("p.error")
    expect(error).to_contain_text("was already decided (approve) by alice")
    assert error.inner_text().count("alice") == 1, error.inner_text()
    # nothing left to decide on it: the card says the decision, not buttons for another
    expect(card.locator("button.approve")).to_have_count(0)
    expect(card.locator("p.decided")).to_contain_text("alice")


def test_a_call_decided_first_by_someone_else_still_says_who_after_the_queue_reloads(
    page: Any, stack: Stack
) -> None:
    """The session waits on another call still: the reload that lists only that one keeps
    the card that said who decided first, and the one decided here, where they were."""
    from playwright.sync_api import expect

    two = [
        {
            "content": "delete both",
            "tool_calls": [
                {"name": "danger", "arguments": {"value": "a"}},
                {"name": "danger", "arguments": {"value": "b"}},
                {"name": "danger", "arguments": {"value": "c"}},
            ],
        },
        {"content": "done"},
    ]
    session_id = stack.waiting(two)
    log_in(page, stack, "bob")
    section = page.locator(f'section.waiting[data-session="{session_id}"]')
    first, second = section.locator('[data-call="s1c0"]'), section.locator('[data-call="s1c1"]')
    expect(first.locator("button.approve")).to_be_visible()

    def alice_first(route: Any) -> None:
        stack.deployment.client.approve(session_id, "s1c0", approver="alice")
        route.continue_()

    page.route("**/calls/s1c0/decision", alice_first)
    first.locator("button.approve").click()
    expect(first.locator("p.error")).to_contain_text("was already decided (approve) by alice")
    second.locator("button.approve").click()
    expect(second).to_contain_text("Approved s1c1 (danger) as bob")
    other = stack.waiting()  # its card shows once the reload is drawn
    page.click("#refresh")
    expect(page.locator(f'section.waiting[data-session="{other}"]')).to_have_count(1)
    expect(section.locator('[data-call="s1c2"] button.approve')).to_be_visible()
    expect(section.locator("article.call")).to_have_count(3)
    expect(first.locator("p.error")).to_contain_text("was already decided (approve) by alice")
    expect(second).to_contain_text("Approved s1c1 (danger) as bob")
    calls = section.locator("article.call").evaluate_all("cs => cs.map(c => c.dataset.call)")
    assert calls == ["s1c0", "s1c1", "s1c2"]


def test_reject_with_feedback_from_the_live_view(page: Any, stack: Stack) -> None:
    from playwright.sync_api import expect

    hostile = '<img src=x onerror="window.pwned=1"> drop it'
    session_id = stack.waiting(
        [
            {
                "content": hostile,
                "tool_calls": [{"name": "danger", "arguments": {"value": hostile}}],
            },
            {"content": "I will not then"},
        ]
    )
    log_in(page, stack, "bob", f"#/sessions/{session_id}")
    expect(page.locator("#status")).to_have_attribute("data-status", "waiting_approval")
    card = page.locator('#waiting article[data-call="s1c0"]')
    expect(card.locator("pre.args")).to_contain_text("<img src=x onerror=")
    expect(page.locator("#timeline blockquote.thought")).to_have_text(hostile)
    card.locator("button.reject").click()
    card.locator("textarea.feedback").fill("use the staging database")
    card.locator("input.comment").fill("ticket OPS-7")
    card.locator("button.confirm-reject").click()

    expect(page.locator("#status")).to_have_attribute("data-status", "completed")
    # the feedback (what the model reads) and the comment (for people) are both shown
    expect(page.locator('#timeline [data-call="s1c0"] p.decided')).to_contain_text(
        "rejected by bob"
    )
    expect(page.locator('#timeline [data-call="s1c0"] p.decided')).to_contain_text(
        ": use the staging database (ticket OPS-7)"
    )
    expect(page.locator('#timeline [data-call="s1c0"] pre.output.error')).to_have_text(
        "rejected by bob: use the staging database"
    )
    expect(page.locator(".answer")).to_have_text("Answer: I will not then")
    assert page.evaluate("window.pwned") is None
    seen = stack.deployment.client.load(session_id).observation("s1c0")
    assert seen is not None and seen.content == "rejected by bob: use the staging database"


def test_a_comment_being_typed_outlives_the_queues_refresh(page: Any, stack: Stack) -> None:
    from playwright.sync_api import expect

    session_id = stack.waiting()
    page.clock.install()  # the queue's refresh timer, run on demand below
    log_in(page, stack, "alice")
    card = page.locator(f'section.waiting[data-session="{session_id}"] article[data-call="s1c0"]')
    expect(card).to_be_visible()
    with page.expect_response("**/api/v1/approvals"):  # idle, the queue reloads itself
        page.clock.run_for(REFRESH_MS + 1000)
    card.locator("input.comment").fill("checked with the DBA: prod-db is a copy")
    # Count the page's own fetches from here on. The installed clock still flows in real
    # time, so on a slow machine the timer may have fired (and fetched) before the comment
    # was typed; the browser's request events of such a fetch can reach the test after it
    # starts listening. A fetch starts synchronously in the timer's callback, so this count
    # is exact once run_for returns.
    page.evaluate(
        """() => {
        window.reloads = [];
        const fetched = window.fetch;
        window.fetch = (url, ...rest) => {
            window.reloads.push(String(url));
            return fetched(url, ...rest);
        };
    }"""
    )
    page.clock.run_for(REFRESH_MS + 1000)
    reloads = page.evaluate("window.reloads")
    assert reloads == [], "the queue was reloaded (and redrawn) over a comment being typed"
    expect(card.locator("input.comment")).to_have_value("checked with the DBA: prod-db is a copy")
    card.locator("button.approve").click()
    expect(card).to_contain_text("Approved s1c0 (danger) as alice")
    decision = stack.deployment.client.load(session_id).decision("s1c0")
    assert decision is not None and decision.comment == "checked with the DBA: prod-db is a copy"


def test_a_file_write_is_reviewed_as_a_diff(page: Any, stack: Stack, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    fixed = "def add(a, b):\n    return a + b\n"
    stack.deployment.settings.workspace_roots = [tmp_path]  # the API takes paths under these
    try:
        answer = _submit_fix(stack, workspace, fixed)
    finally:
        stack.deployment.settings.workspace_roots = []
    assert answer.status_code == 201, answer.text
    session_id = answer.json()["id"]
    assert stack.wait(session_id)["status"] == "waiting_approval"
    (workspace / "calc.py").write_text("changed after the submit: not what the card shows\n")

    log_in(page, stack, "alice")
    waiting = page.locator(f'section.waiting[data-session="{session_id}"]')
    expect(waiting.locator('dl.job dd[data-key="source"]')).to_contain_text(str(workspace))
    expect(waiting.locator('dl.job dd[data-key="test_command"]')).to_have_text("true")
    card = page.locator(f'section.waiting[data-session="{session_id}"] article[data-call="s1c0"]')
    diff = card.locator(".preview pre.diff")
    expect(diff.locator(".line.del")).to_have_text("-    return a - b\n")
    expect(diff.locator(".line.add")).to_have_text("+    return a + b\n")
    expect(card.locator(".preview p.meta")).to_have_text(
        "calc.py: against the session's current file"
    )
    card.locator("button.approve").click()
    expect(card).to_contain_text("Approved s1c0 (write_file)")
    done = stack.wait(session_id, Status.COMPLETED)
    assert done["final_answer"] == "fixed"
    assert "+    return a + b\n" in done["result"]["patch"]  # the submitted folder: untouched


def test_an_adoption_is_reviewed_as_the_childs_patch(
    page: Any, stack: Stack, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    session_id, child = adopting(stack.deployment, tmp_path)
    log_in(page, stack, "alice")
    card = page.locator(f'section.waiting[data-session="{session_id}"] article[data-call="s2c0"]')
    expect(card.locator(".preview p.meta")).to_have_text(
        f"the patch of child 0 ({child.id}, explorer), outcome {child.result['outcome']}"
    )
    diff = card.locator(".preview pre.diff")
    expect(diff.locator(".line.del")).to_have_text("-    return a - b\n")
    expect(diff.locator(".line.add")).to_have_text("+    return a + b\n")
    card.locator("button.approve").click()
    expect(card).to_contain_text("Approved s2c0 (adopt_patch)")
    done = stack.wait(session_id, Status.COMPLETED)
    assert done["result"]["patch"] == child.result["patch"]


def test_an_operator_opens_a_dead_letter_and_forks_it(page: Any, stack: Stack) -> None:
    from playwright.sync_api import expect

    session_id = stack.submit(BROKEN, prefix="dead")
    assert stack.wait(session_id)["status"] == "failed"
    letter = stack.deployment.client.dead_letter(session_id)
    log_in(page, stack, "olga", "#/dead-letters")
    expect(page.locator('table.stats[data-by="code"]')).to_contain_text("MODEL_ERROR")
    row = page.locator(f'#dead-letters tr[data-id="{letter.id}"]')
    expect(row).to_contain_text(session_id)
    row.locator("a").click()
    expect(page.locator("#dead-letter")).to_contain_text(f"Dead letter #{letter.id}")
    expect(page.locator("#dead-letter")).to_contain_text("MODEL_ERROR")
    expect(page.locator("main")).to_contain_text("model says 400 bad request")
    page.fill("#fork-step", "0")
    page.fill("#fork-instruction", "try a different model")
    page.click("form#fork button[type=submit]")
    page.wait_for_url(lambda url: "#/sessions/" in url and session_id not in url)
    expect(page.locator("#status .badge")).to_be_visible()
    resolved = stack.deployment.client.dead_letter(session_id)
    assert resolved.resolved_at is not None and resolved.resolution is not None
    assert resolved.resolution["by"] == "olga"
    fork = resolved.resolution["fork"]
    page.goto(f"{stack.url}/#/dead-letters/{letter.id}")
    closed = page.locator("p.decided")
    expect(closed).to_contain_text(f"forked as {fork} by olga")
    expect(closed.locator(f'a[href="#/sessions/{fork}"]')).to_be_visible()


def test_dead_letters_are_charted_by_cause_and_signature_and_exported(
    page: Any, stack: Stack
) -> None:
    import pyarrow.parquet as pq
    from playwright.sync_api import expect

    broken = stack.submit(BROKEN, prefix="dead")
    over = stack.submit(ECHO, prefix="dead", budgets={"max_steps": 1})
    for session_id in (broken, over):
        assert stack.wait(session_id)["status"] == "failed"
    timeline = stack.http("alice").get("/api/v1/dead-letters/timeline").json()
    stats = stack.http("alice").get("/api/v1/dead-letters/stats").json()
    today = datetime.now(UTC).date().isoformat()
    log_in(page, stack, "alice", "#/dead-letters")

    chart = page.locator("#dl-timeline")
    expect(chart.locator("figcaption")).to_contain_text("per day by cause")
    for code in ("MODEL_ERROR", "BUDGET_STEPS"):
        bar = chart.locator(f'svg rect[data-code="{code}"][data-bucket="{today}"]')
        expect(bar).to_have_count(1)
        shown = {c["code"]: c["counts"][-1] for c in timeline["codes"]}[code]
        assert int(bar.get_attribute("data-count")) >= shown >= 1
        expect(chart.locator(f'ul.legend li[data-code="{code}"]')).to_contain_text(code)
    height = float(chart.locator("svg rect").first.get_attribute("height"))
    assert height > 0

    signatures = page.locator("#dl-signatures")
    expect(signatures.locator("figcaption")).to_contain_text("error signatures")
    top = stats["by"]["error_signature"][:10]
    drawn = signatures.locator("svg g[data-signature]")
    expect(drawn.first).to_be_visible()
    # a session of an earlier test on this stack may dead-letter after `stats` was read
    values = {drawn.nth(i).get_attribute("data-signature") for i in range(drawn.count())}
    assert {t["value"] for t in top} <= values and len(values) <= 10, (top, values)
    first = drawn.first
    assert first.get_attribute("data-signature") == top[0]["value"]
    assert int(first.get_attribute("data-count")) >= top[0]["count"]
    expect(signatures).to_contain_text("MODEL_ERROR: permanent error: model says N bad request")

    # the export as a file, fetched with the token
    with page.expect_download() as saving:
        page.click('#dl-export button[data-format="parquet"]')
    saved = saving.value
    assert saved.suggested_filename == "dead-letters.parquet"
    table = pq.read_table(saved.path())
    assert {broken, over} <= set(table.column("session_id").to_pylist())
    if SCREENSHOT:
        page.screenshot(path=SCREENSHOT, full_page=True)


def test_an_approver_reads_dead_letters_but_only_an_operator_forks(page: Any, stack: Stack) -> None:
    from playwright.sync_api import expect

    session_id = stack.submit(BROKEN, prefix="dead")
    assert stack.wait(session_id)["status"] == "failed"
    letter = stack.deployment.client.dead_letter(session_id)
    log_in(page, stack, "alice", f"#/dead-letters/{letter.id}")
    expect(page.locator("#dead-letter")).to_contain_text(f"Dead letter #{letter.id}")
    expect(page.locator("main")).to_contain_text(
        "Forking, resolving and dismissing need the operator role"
    )
    expect(page.locator("form#fork")).to_have_count(0)
    page.click("#logout")
    expect(page.locator("form#login")).to_be_visible()


def _submit_fix(stack: Stack, workspace: Path, fixed: str) -> Any:
    return stack.http("sam").post(
        "/api/v1/sessions",
        json={
            "kind": "repair",
            "input": {"workspace": str(workspace), "test_command": "true"},
            "model": stack.deployment.script(
                [
                    {
                        "content": "fix the sign",
                        "tool_calls": [
                            {
                                "name": "write_file",
                                "arguments": {"path": "calc.py", "content": fixed},
                            }
                        ],
                    },
                    {"content": "fixed"},
                ]
            ),
        },
    )


def test_the_api_docs_load_nothing_from_elsewhere(page: Any, stack: Stack) -> None:
    from playwright.sync_api import expect

    asked: list[str] = []
    refused: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.on("console", lambda m: refused.append(m.text) if "Content Security" in m.text else None)
    page.goto(f"{stack.url}/api/v1/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("tickwork")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    assert asked and all(url.startswith(stack.url) for url in asked), asked
    assert refused == []


def test_the_page_and_the_docs_ask_for_nothing_they_are_refused(page: Any, stack: Stack) -> None:
    """A browser asks a page for its icon, /favicon.ico unless the page names one; the page
    named none and the server had none, so each visit left a 404 in the browser's console.
    Both pages name an icon the Content-Security-Policy allows, and /favicon.ico is there
    for whatever asks for it anyway."""
    from playwright.sync_api import expect

    asked: list[str] = []
    refused: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.on(
        "response", lambda r: refused.append(f"{r.status} {r.url}") if r.status >= 400 else None
    )
    page.on("console", lambda m: refused.append(m.text) if m.type == "error" else None)
    for where, shown in (("/", "#login"), ("/api/v1/docs", ".swagger-ui .info .title")):
        page.goto(f"{stack.url}{where}")
        expect(page.locator(shown)).to_be_visible()
        assert page.locator("link[rel=icon]").count() == 1, where
        icon = page.locator("link[rel=icon]").get_attribute("href")
        assert icon, where
        got = page.request.get(f"{stack.url}{icon}")
        assert got.ok and got.headers["content-type"].startswith("image/"), (where, icon)
        # the browser loads the icon as an image: its own URL, within img-src
        assert page.evaluate(
            "src => new Promise(done => { const i = new Image(); i.onload = () => done(true);"
            " i.onerror = () => done(false); i.src = src; })",
            icon,
        ), (where, icon)
    got = page.request.get(f"{stack.url}/favicon.ico")
    assert got.ok and got.headers["content-type"].startswith("image/")
    assert all(url.startswith(stack.url) for url in asked), asked
    assert refused == []


def test_an_in_doubt_call_shows_its_earlier_approval_as_history(page: Any, stack: Stack) -> None:
    """alice approved the call, it started, its worker died: the call is in doubt and waits
    for a decision again. The session's timeline showed "approved by alice" under it as if
    that stood; it says the call is in doubt and what to do, alice's approval as earlier,
    as `tickwork show` does."""
    from playwright.sync_api import expect
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
    approval = Decision(
        call_id=call.call_id,
        kind=DecisionKind.APPROVE,
        approver="alice",
        at=clock(),
        fingerprint=call.fingerprint,
        comment="looks safe",
    )
    store.decide(session_id, approval, now=clock())  # stored, not published: no worker runs it
    claimed = claim(store, session_id, now=clock(), owner="dead")
    todo = machine.start_execute(
        claimed.head, claimed.calls, claimed.decisions, idempotent=False, now=clock()
    )
    assert isinstance(todo, RunTool)
    store.start_call(session_id, claimed.head.version, todo.call, owner="dead", now=clock())
    later = claim(store, session_id, now=clock.advance(LEASE_S + 1), owner="w2")
    change = machine.start_execute(
        later.head, later.calls, later.decisions, idempotent=False, now=clock()
    )
    assert isinstance(change, Change)
    store.save(change, version=later.head.version, owner="w2", now=clock())

    log_in(page, stack, "alice", f"#/sessions/{session_id}")

    shown = page.locator(f'#timeline [data-call="{call.call_id}"]')
    expect(shown.locator("p.doubt")).to_contain_text(
        "In doubt: its worker was lost while it ran, so it may have run"
    )
    expect(shown.locator("p.doubt")).to_contain_text("run it again (approve), provide its output")
    earlier = shown.locator("p.decided")
    expect(earlier).to_have_class(re.compile(r"\bearlier\b"))
    expect(earlier).to_contain_text("Earlier: approved by alice")
    expect(earlier).to_contain_text("looks safe")


def test_a_duration_rounds_once_before_it_is_split(page: Any, stack: Stack) -> None:
    """A step of 119.6 s read "1 min 60 s" (the minutes cut, then the seconds rounded), and
    59.96 s read "60.0 s": the duration is rounded once, then split."""
    page.goto(stack.url)
    said = page.evaluate(
        "async (values) => { const { ms } = await import('/static/core.js');"
        " return values.map(ms); }",
        [340, 999.6, 1_234, 59_960, 60_000, 119_600, 185_000],
    )
    assert said == ["340 ms", "1.0 s", "1.2 s", "1 min 0 s", "1 min 0 s", "2 min 0 s", "3 min 5 s"]


def test_a_cost_below_a_hundredth_of_a_cent_reads_as_tickwork_ls_prints_it(
    page: Any, stack: Stack
) -> None:
    """The page listed a session of a cheap model that had spent $0.00003 as `$0.0000`, as
    one that had spent nothing: core.js `usd` reads a cost as `ls` and `show` print it."""
    from tickwork.fsm.wording import usd

    page.goto(stack.url)
    costs = [0, 0.00003, 0.0000001, 0.00009999, 0.0001, 0.0132, 1.23456, 12]
    said = page.evaluate(
        "async (values) => { const { usd } = await import('/static/core.js');"
        " return values.map(usd); }",
        costs,
    )
    assert said == [usd(cost) for cost in costs]
    assert said[:3] == ["$0.0000", "<$0.0001", "<$0.0001"]
