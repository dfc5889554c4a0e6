"""An archived session on the page, in headless Chromium: retention moved it out of the live
tables, so the API serves only its patch and its forks (a 404 with `archived: true` for the
rest). The page says it is archived, shows its patch, and forks it; a fork beside an
archived parent shows both patches.

The session is written and archived through the store, dated long ago, so the pass archives
it and none of the other tests' sessions."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import Status
from tickwork.store.dead_letters import Closing
from tickwork.store.migrate import upgrade
from tickwork.store.retention import Policy, archive_pass
from tickwork.store.schema import sessions
from tickwork.worker.config.settings import Settings
from tickwork.worker.config.stores import build_store

from tests.api.conftest import Stack
from tests.api.test_dead_letters import BROKEN
from tests.api.test_page import browser, log_in, page  # noqa: F401 (fixtures)
from tests.api.test_page_actions import looked_at
from tickwork.testing.store_ticks import Clock, new_session, reply, think

pytestmark = pytest.mark.parametrize("stack", ["production"], indirect=True)


def an_archived_session(stack: Stack, tmp_path: Path, *, forks: int = 0) -> list[str]:
    """A repair of one step, completed and archived (no workspace: the API says it has no
    patch), and `forks` forks of it from step 1, completed and archived too: their ids, the
    session's first. Their steps are taken in a store of their own, and each stored
    completed, with no tick: the stack's worker would claim a runnable one first."""
    client = stack.deployment.client
    store, clock = client.store, Clock()
    session_id = f"archived-{uuid.uuid4().hex[:8]}"
    made = new_session(session_id, now=clock())
    sams = made.head.model_copy(update={"submitted_by": "sam"})
    aside = Settings(state_dir=tmp_path / f"aside-{session_id}")
    aside.state_dir.mkdir(parents=True)
    upgrade(aside.db_url)
    own = build_store(aside)
    made_ids = [session_id] + [f"{session_id}-fork-{n}" for n in range(forks)]
    try:
        own.create(made.model_copy(update={"head": sams}), now=clock())
        assert think(own, session_id, reply(content="done"), now=clock()).status.terminal
        for fork_id in made_ids[1:]:
            own.fork(
                session_id, new_id=fork_id, from_step=1, patch=ForkPatch(), by="olga", now=clock()
            )
            assert think(own, fork_id, reply(content="again"), now=clock()).status.terminal
        for made_id in made_ids:
            store.create(own.load(made_id), now=clock())
    finally:
        own.close()
    assert store.get(session_id).status is Status.COMPLETED
    policy = Policy(completed_s=60)
    archive_pass(store.engine, store.load, client.archive, policy, now=clock.advance(61))
    assert all(store.retention.entry(made_id) is not None for made_id in made_ids)
    return made_ids


def test_an_operator_opens_an_archived_session_reads_its_patch_and_forks_it(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    [old] = an_archived_session(stack, tmp_path)
    log_in(page, stack, "olga", f"#/sessions/{old}")
    expect(page.locator("#status")).to_have_attribute("data-status", "archived")
    notice = page.locator("#archived")
    expect(notice).to_contain_text(f"Session {old} is archived")
    expect(notice).to_contain_text(f"tickwork show {old}")  # where its steps are read back
    expect(page.locator("#view-error")).to_have_count(0)
    # what the API serves of it: its patch (none: the API's reason), and its fork
    expect(page.locator("#patch p.no-patch")).to_contain_text(
        "has no patch: a repair job has no files"
    )
    form = page.locator("form#fork")
    expect(form.locator("h3")).to_have_text("Fork this archived session")
    expect(page.locator("#fork-model")).to_have_attribute("placeholder", "the original's")
    expect(page.locator("#fork-priority")).to_have_attribute("placeholder", "the original's")

    looked_at(page, "archived-session", tmp_path)

    # its steps are not served: a step past its last is the API's to refuse, beside the form
    page.fill("#fork-step", "2")
    form.locator("button[type=submit]").click()
    expect(page.locator("#fork-error")).to_have_text(
        f"session {old} has steps 1..1; choose `from_step` between 0 and 1, not 2"
    )
    expect(page.locator("#fork-step")).to_have_attribute("aria-invalid", "true")
    page.fill("#fork-step", "1")
    page.fill("#fork-instruction", "once more, from the archive")
    page.fill("#fork-model", stack.deployment.script([{"content": "done again"}]))
    form.locator("button[type=submit]").click()
    page.wait_for_url(lambda url: "#/sessions/" in url and old not in url)
    fork = page.url.rsplit("/", 1)[-1]
    view = stack.http("olga").get(f"/api/v1/sessions/{fork}").json()
    assert view["head"]["parent_id"] == old and view["head"]["fork_step"] == 1
    assert view["forked_from"]["patch"]["append_instruction"] == "once more, from the archive"

    # the fork beside its archived parent: what the fork changed, and both patches
    page.goto(f"{stack.url}/#/sessions/{fork}/compare")
    expect(page.locator("#parent-archived")).to_contain_text(f"The parent {old} is archived")
    expect(page.locator("#parent-error")).to_have_count(0)
    expect(page.locator("#fork-patch dd").first).to_have_text("once more, from the archive")
    patches = page.locator("#compare-patches")
    expect(patches.locator(f'.side.parent[data-session="{old}"] .no-patch')).to_contain_text(
        "has no patch: a repair job has no files"
    )
    expect(patches.locator(f'.side.fork[data-session="{fork}"]')).to_have_count(1)
    looked_at(page, "fork-beside-archived-parent", tmp_path)
    page.click(f'#parent-archived a[href="#/sessions/{old}"]')
    expect(page.locator("#forks")).to_contain_text(f"Forks (1): {fork} from step 1")


def test_an_approver_is_told_an_archived_session_is_archived_but_not_offered_its_fork(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    [old] = an_archived_session(stack, tmp_path)
    log_in(page, stack, "alice", f"#/sessions/{old}")
    expect(page.locator("#archived")).to_contain_text(f"Session {old} is archived")
    expect(page.locator("#patch p.no-patch")).to_contain_text(
        "has no patch: a repair job has no files"
    )
    expect(page.locator("form#fork")).to_have_count(0)
    expect(page.locator("#fork-refused")).to_have_text("Forking it needs the operator role.")


def test_an_archived_sessions_forks_live_or_archived_are_listed_and_each_opens(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    """The page listed a session's forks from the session listing, which holds live
    sessions only: an archived fork was not there. They come from the session's forks
    (live or archived, for a live or an archived session), an archived one saying so and
    opening on its own page, also from the address of a fork beside its parent."""
    from playwright.sync_api import expect

    old, gone = an_archived_session(stack, tmp_path, forks=1)
    live = stack.http("olga").post(
        f"/api/v1/sessions/{old}/fork",
        json={"from_step": 1, "model": stack.deployment.script([{"content": "done again"}])},
    )
    assert live.status_code == 201, live.text
    fork = live.json()["id"]
    log_in(page, stack, "olga", f"#/sessions/{old}")
    expect(page.locator("#status")).to_have_attribute("data-status", "archived")
    forks = page.locator("#forks")
    expect(forks).to_contain_text("Forks (2): ")
    expect(forks).to_contain_text(f"{gone} from step 1, completed, archived")
    expect(forks.locator(f'a[data-fork="{fork}"]')).to_have_attribute(
        "href", f"#/sessions/{fork}/compare"
    )
    forks.locator(f'a[data-fork="{gone}"][data-archived="true"]').click()
    expect(page).to_have_url(f"{stack.url}/#/sessions/{gone}")
    expect(page.locator("#status")).to_have_attribute("data-status", "archived")
    expect(page.locator("#archived")).to_contain_text(f"Session {gone} is archived")
    # beside its parent: an archived fork's steps are not served, so its own page instead
    page.goto(f"{stack.url}/#/sessions/{gone}/compare")
    expect(page.locator("#archived")).to_contain_text(f"Session {gone} is archived")
    expect(page.locator("#view-error")).to_have_count(0)

    # a dead letter's address of one says where it went
    page.goto(f"{stack.url}/#/dead-letters/{old}")
    expect(page.locator("#letter-archived")).to_contain_text(f"Session {old} is archived")
    expect(page.locator("#view-error")).to_have_count(0)
    page.click(f'#letter-archived a[href="#/sessions/{old}"]')
    expect(page.locator("#status")).to_have_attribute("data-status", "archived")


def test_a_dead_letter_listed_before_its_session_was_archived_still_opens(
    page: Any,  # noqa: F811
    stack: Stack,
) -> None:
    """The list linked each dead letter by its number, `#/dead-letters/7`; once retention
    archived its session (with the letter), that address answered only "no dead letter has
    id or session id '7'". The list links it by its session's id, which says where it went
    and links the session's page; an address by its number says where to look."""
    from playwright.sync_api import expect

    session_id = stack.submit(BROKEN, prefix="dead")
    assert stack.wait(session_id)["status"] == "failed"
    client, clock = stack.deployment.client, Clock()
    store = client.store
    letter = store.close_dead_letter(
        session_id, state=Closing.DISMISSED, by="olga", reason="seen to", now=clock()
    )
    log_in(page, stack, "olga", "#/dead-letters")
    link = page.locator(f'#dead-letters tr[data-id="{letter.id}"] td.key a')
    expect(link).to_have_text(f"#{letter.id}")

    # failed and dismissed long ago (by this clock): the pass archives it, no other test's
    with store.engine.begin() as conn:
        conn.execute(update(sessions).where(sessions.c.id == session_id).values(updated_at=clock()))
    archive_pass(
        store.engine, store.load, client.archive, Policy(failed_s=60), now=clock.advance(61)
    )
    assert store.retention.entry(session_id) is not None
    link.click()
    expect(page.locator("#letter-archived")).to_contain_text(f"Session {session_id} is archived")
    expect(page.locator("#view-error")).to_have_count(0)
    page.click(f'#letter-archived a[href="#/sessions/{session_id}"]')
    expect(page.locator("#status")).to_have_attribute("data-status", "archived")

    page.goto(f"{stack.url}/#/dead-letters/{letter.id}")
    gone = page.locator("#letter-gone")
    expect(gone).to_contain_text("retention archived its session with it")
    expect(gone).to_contain_text("#/dead-letters/SESSION_ID")
    expect(page.locator("#view-error")).to_have_count(0)


def test_the_sessions_list_lists_the_archived_ones_when_asked(
    page: Any,  # noqa: F811
    stack: Stack,
    tmp_path: Path,
) -> None:
    """The list held live sessions only and the API had no way to list the archived ones:
    the page could only say to open one by its whole id. **archived** lists them from the
    archive's index (`GET /sessions?archived=true`), with the filters it answers, each
    opening on its page; the address keeps it."""
    from playwright.sync_api import expect

    old, gone = an_archived_session(stack, tmp_path, forks=1)
    log_in(page, stack, "olga", "#/sessions")
    expect(page.locator("#archived-note")).to_contain_text("listed with archived ticked")
    expect(page.locator(f'#sessions tr[data-session="{old}"]')).to_have_count(0)
    page.check("#archived-filter")
    expect(page).to_have_url(f"{stack.url}/#/sessions?archived=1")
    rows = page.locator("#archived-sessions")
    expect(rows.locator(f'tr[data-session="{old}"]')).to_contain_text("completed")
    # who submitted it, as the live list says (the index kept it; the rows did not carry it)
    expect(rows.locator(f'tr[data-session="{old}"] td.submitter')).to_have_text("sam")
    fork = rows.locator(f'tr[data-session="{gone}"]')
    expect(fork.locator(f'a[href="#/sessions/{old}"]')).to_have_count(1)  # forked from it
    expect(page.locator("#outcome-filter")).to_be_hidden()  # the index keeps no outcome
    expect(page.locator("#parent-filter")).to_be_hidden()
    looked_at(page, "archived-sessions", tmp_path)

    page.select_option("#status-filter", "failed")
    expect(page).to_have_url(f"{stack.url}/#/sessions?status=failed&archived=1")
    expect(rows.locator(f'tr[data-session="{old}"]')).to_have_count(0)
    page.select_option("#status-filter", "completed")
    rows.locator(f'tr[data-session="{old}"] td a').first.click()
    expect(page.locator("#status")).to_have_attribute("data-status", "archived")
    expect(page.locator("#archived")).to_contain_text(f"Session {old} is archived")
    page.go_back()
    page.uncheck("#archived-filter")
    expect(page).to_have_url(f"{stack.url}/#/sessions?status=completed")
    expect(page.locator("#archived-note")).to_contain_text("listed with archived ticked")
    expect(page.locator("#outcome-filter")).to_be_visible()
