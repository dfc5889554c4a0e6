"""Honest outcomes (issue 22): a repair for each outcome (repaired, tests_failing,
tests_not_run through a test command not found, no_changes) run by a real worker, each seen
in `tickwork ls` (its column and `--outcome`), `show`, `watch`, the API's JSON (a session,
the list and its `?outcome=` filter), the `completed` event, the metric and the page; and a
session without an outcome (another kind) shown as `-` everywhere, never an error."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import Status

from tests.api.conftest import Stack, until
from tests.api.test_metrics import samples, value
from tests.api.test_page import browser, log_in, page  # noqa: F401 (fixtures)
from tests.api.test_sessions import ECHO
from tests.e2e.conftest import Cli

pytestmark = pytest.mark.parametrize("stack", ["production"], indirect=True)

WRITE = {"name": "run_command", "arguments": {"command": "printf 'fixed\\n' >> fixed.txt"}}
#: outcome -> (the model's replies, the test command)
CASES: dict[str, tuple[list[dict[str, Any]], str]] = {
    "repaired": (
        [{"content": "fix", "tool_calls": [WRITE]}, {"content": "done"}],
        "test -f fixed.txt",
    ),
    "tests_failing": (
        [{"content": "try", "tool_calls": [WRITE]}, {"content": "gave up"}],
        "test -f missing.txt",
    ),
    "tests_not_run": (
        [{"content": "try", "tool_calls": [WRITE]}, {"content": "done"}],
        "no-such-test-runner-xyz -q",
    ),
    "no_changes": ([{"content": "nothing to do"}], "true"),
}
OUTCOMES = sorted(CASES)
#: how the page shows no outcome (an en dash, as for other missing values)
NONE = "\u2013"


@pytest.fixture
def finished(stack: Stack, tmp_path: Path) -> dict[str, str]:
    """outcome -> the id of a completed repair session that has it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "README").write_text("a project\n")
    tag = uuid.uuid4().hex[:8]
    ids = {}
    for outcome, (replies, test_command) in CASES.items():
        head = stack.deployment.client.submit(
            "repair",
            {"workspace": str(project), "test_command": test_command},
            model=stack.deployment.script(replies, name=f"{outcome}-{tag}"),
            session_id=f"{outcome}-{tag}",
        )
        ids[outcome] = head.id
    for session_id in ids.values():
        head = stack.wait(session_id, Status.COMPLETED, Status.FAILED)
        assert head["status"] == "completed", head
    return ids


def _cli(stack: Stack) -> Cli:
    return Cli({**stack.deployment.env(), "COLUMNS": "250"}, stack.deployment.tmp)


def test_each_outcome_is_recorded_and_seen_in_the_api_ls_show_and_events(
    stack: Stack, finished: dict[str, str]
) -> None:
    http = stack.http("sam")
    other = stack.submit(ECHO, prefix="echo")  # another kind: no outcome
    stack.wait(other, Status.COMPLETED)
    for outcome, session_id in finished.items():
        head = http.get(f"/api/v1/sessions/{session_id}").json()["head"]
        assert head["outcome"] == outcome, head["result"]
        assert head["result"]["outcome"] == outcome
        listed = http.get("/api/v1/sessions", params={"outcome": outcome, "limit": 500}).json()
        assert session_id in [h["id"] for h in listed]
        assert {h["outcome"] for h in listed} == {outcome}
        assert not {i for o, i in finished.items() if o != outcome} & {h["id"] for h in listed}
        events = http.get(f"/api/v1/sessions/{session_id}/events").json()["events"]
        (completed,) = [e for e in events if e["kind"] == "completed"]
        assert completed["data"]["outcome"] == outcome
    not_run = http.get(f"/api/v1/sessions/{finished['tests_not_run']}").json()["head"]
    assert not_run["result"]["tests"]["exit_code"] == 127
    assert "could not find" in not_run["result"]["tests"]["not_run"]
    assert http.get(f"/api/v1/sessions/{other}").json()["head"]["outcome"] is None
    everyone = http.get("/api/v1/sessions", params={"limit": 500}).json()
    assert {h["id"]: h["outcome"] for h in everyone}[other] is None

    bad = http.get("/api/v1/sessions", params={"outcome": "fixed"})
    assert bad.status_code == 422, bad.text
    assert all(o in bad.json()["message"] for o in OUTCOMES), bad.json()

    cli = _cli(stack)
    table = cli.inline("ls", "--limit", "500").stdout
    assert "OUTCOME" in table
    for outcome, session_id in finished.items():
        (row,) = [line for line in table.splitlines() if session_id in line]
        assert re.search(rf"\bcompleted\s+{outcome}\b", row), row
        only = cli.inline("ls", "--outcome", outcome, "--limit", "500", "--json").json()
        assert session_id in [h["id"] for h in only]
        assert {h["outcome"] for h in only} == {outcome}
        shown = cli.inline("show", session_id).stdout
        assert re.search(rf"^outcome\s+{outcome}\s*$", shown, re.MULTILINE), shown
        assert cli.inline("show", session_id, "--json").json()["head"]["outcome"] == outcome
        watched = cli.inline("watch", session_id).stdout
        assert f"session {session_id} is completed: {outcome}" in watched
        assert f"outcome={outcome}" in watched  # the completed event's line
    (row,) = [line for line in table.splitlines() if other in line]
    assert re.search(r"\bcompleted\s+-\s", row), row
    assert re.search(r"^outcome\s+-\s*$", cli.inline("show", other).stdout, re.MULTILINE)
    refused = cli.inline("ls", "--outcome", "fixed", ok=False)
    line = refused.error(2, "--outcome", "fixed")
    assert all(o in line for o in OUTCOMES), line


def test_a_patch_that_changes_tests_is_flagged_and_a_missing_runner_did_not_run(
    stack: Stack, tmp_path: Path
) -> None:
    """Passing tests the patch rewrote may say more of the tests than of the code: the
    result lists them and `show` says so; a `python -m RUNNER` whose runner is not
    installed never ran the tests (not `tests_failing`)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "README").write_text("a project\n")
    tag = uuid.uuid4().hex[:8]
    cheat = {
        "name": "run_command",
        "arguments": {"command": "mkdir -p tests && echo 'def test_a(): pass' >> tests/test_a.py"},
    }
    sessions = {
        "cheat": ([{"content": "fix", "tool_calls": [cheat]}, {"content": "done"}], "true"),
        "no-runner": (
            [{"content": "fix", "tool_calls": [WRITE]}, {"content": "done"}],
            "python3 -m no_such_runner_xyz -q",
        ),
    }
    for name, (replies, test_command) in sessions.items():
        stack.deployment.client.submit(
            "repair",
            {"workspace": str(project), "test_command": test_command},
            model=stack.deployment.script(replies, name=f"{name}-{tag}"),
            session_id=f"{name}-{tag}",
        )
    cli = _cli(stack)

    cheated = stack.wait(f"cheat-{tag}", Status.COMPLETED, Status.FAILED)
    assert cheated["result"]["outcome"] == "repaired", cheated
    assert cheated["result"]["tests_changed"] == ["tests/test_a.py"]
    shown = cli.inline("show", f"cheat-{tag}").stdout
    assert "the patch changes tests (tests/test_a.py)" in shown, shown
    assert "final tests: `true` exit 0, passed" in shown, shown

    unrun = stack.wait(f"no-runner-{tag}", Status.COMPLETED, Status.FAILED)
    assert unrun["result"]["outcome"] == "tests_not_run", unrun["result"]
    assert "no_such_runner_xyz is not installed" in unrun["result"]["tests"]["not_run"]
    assert "tests_changed" not in unrun["result"]
    shown = cli.inline("show", f"no-runner-{tag}").stdout
    assert "did not run: the test runner no_such_runner_xyz is not installed" in shown, shown


def test_a_test_run_that_found_no_test_is_not_a_pass(stack: Stack, tmp_path: Path) -> None:
    """Before Python 3.12 unittest exits 0 when it finds no test (a tests/ folder without
    `__init__.py`): the repair read `repaired` with nothing tested. A run of no test, by
    unittest or pytest (exit 5), is `tests_not_run`, saying why."""
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_mod.py").write_text("def test_f():\n    assert False\n")
    tag = uuid.uuid4().hex[:8]
    commands = {
        "unittest": "python3 -m unittest -q",
        "pytest": "printf 'no tests ran in 0.01s\\n'; exit 5",
    }
    for name, command in commands.items():
        stack.deployment.client.submit(
            "repair",
            {"workspace": str(project), "test_command": command},
            model=stack.deployment.script(
                [{"content": "fix", "tool_calls": [WRITE]}, {"content": "done"}],
                name=f"{name}-{tag}",
            ),
            session_id=f"{name}-{tag}",
        )
    cli = _cli(stack)
    for name in commands:
        done = stack.wait(f"{name}-{tag}", Status.COMPLETED, Status.FAILED)
        tests = done["result"]["tests"]
        assert done["result"]["outcome"] == "tests_not_run", tests
        assert tests["passed"] is False and "found no test to run" in tests["not_run"], tests
        shown = cli.inline("show", f"{name}-{tag}").stdout
        assert "did not run: the test runner found no test to run" in shown, shown


def test_a_session_with_no_patch_says_so_in_the_cli_and_the_api(
    stack: Stack, finished: dict[str, str]
) -> None:
    http = stack.http("sam")
    empty = finished["no_changes"]
    answer = http.get(f"/api/v1/sessions/{empty}/patch")
    assert answer.status_code == 404, answer.text
    assert answer.json()["code"] == "no_patch"
    assert "changed no files" in answer.json()["message"]
    patch = http.get(f"/api/v1/sessions/{finished['repaired']}/patch")
    assert patch.status_code == 200 and patch.headers["content-type"].startswith("text/x-diff")
    assert "+++ b/fixed.txt" in patch.text and "+fixed" in patch.text

    cli = _cli(stack)
    cli.inline("patch", empty, ok=False).error(1, empty, "has no patch", "no_changes")
    assert "+fixed" in cli.inline("patch", finished["repaired"]).stdout
    other = stack.submit(ECHO, prefix="echo")
    stack.wait(other, Status.COMPLETED)
    cli.inline("patch", other, ok=False).error(1, other, "has no patch")
    assert http.get(f"/api/v1/sessions/{other}/patch").json()["code"] == "no_patch"


@pytest.fixture
def counted(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The metrics before the sessions of `finished` ran (ask for it first)."""
    return samples(stack.http().get("/metrics").text)


def test_completed_sessions_are_counted_by_outcome(
    stack: Stack,
    counted: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    finished: dict[str, str],
) -> None:
    before = counted
    other = stack.submit(ECHO, prefix="echo")
    stack.wait(other, Status.COMPLETED)
    name = "tickwork_sessions_completed_total"

    def grown(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], outcome: str) -> float:
        return value(found, name, outcome=outcome) - value(before, name, outcome=outcome)

    # a session is counted once its end is committed: the end may be read before the count
    after = until(
        lambda: (
            (got := samples(stack.http().get("/metrics").text))
            and all(grown(got, outcome) >= 1 for outcome in [*finished, "none"])
            and got
        ),
        timeout=30,
        what=f"each of {[*finished, 'none']} counted once more",
    )
    labels = {dict(k[1]).get("outcome") for k in after if k[0] == name}
    assert labels <= {*OUTCOMES, "none"}


def test_the_page_shows_each_outcome_in_the_list_and_the_session(
    page: Any,  # noqa: F811
    stack: Stack,
    finished: dict[str, str],
) -> None:
    from playwright.sync_api import expect

    other = stack.submit(ECHO, prefix="echo")
    stack.wait(other, Status.COMPLETED)
    log_in(page, stack, "alice", "#/sessions")
    for outcome, session_id in finished.items():
        page.goto(f"{stack.url}/#/sessions?outcome={outcome}")
        row = page.locator(f'#sessions tr[data-session="{session_id}"]')
        expect(row.locator("td.outcome .badge")).to_have_attribute("data-outcome", outcome)
        expect(row.locator("td.outcome")).to_have_text(outcome.replace("_", " "))
        expect(page.locator("#outcome-filter")).to_have_value(outcome)
        for wrong in set(finished.values()) - {session_id}:
            expect(page.locator(f'#sessions tr[data-session="{wrong}"]')).to_have_count(0)
        page.goto(f"{stack.url}/#/sessions/{session_id}")
        expect(page.locator("#outcome .badge")).to_have_attribute("data-outcome", outcome)
    page.goto(f"{stack.url}/#/sessions")
    expect(page.locator(f'#sessions tr[data-session="{other}"] td.outcome')).to_have_text(NONE)
    page.goto(f"{stack.url}/#/sessions/{other}")
    expect(page.locator("#outcome")).to_have_text(f"Outcome: {NONE}")


def test_the_api_refuses_the_demos_flag(stack: Stack, tmp_path: Path) -> None:
    stack.deployment.settings.workspace_roots = [tmp_path]  # the API takes paths under these
    body = {
        "kind": "repair",
        "input": {"workspace": str(tmp_path), "test_command": "true", "demo_unconfined": True},
        "model": stack.deployment.script([{"content": "done"}]),
    }
    try:
        in_input = stack.http("sam").post("/api/v1/sessions", json=body)
        clean = {**body, "input": {"workspace": str(tmp_path), "test_command": "true"}}
        beside = stack.http("sam").post(
            "/api/v1/sessions", json={**clean, "config": {"demo_unconfined": True}}
        )
    finally:
        stack.deployment.settings.workspace_roots = []
    assert in_input.status_code == 422, in_input.text
    assert "unknown key(s) demo_unconfined" in in_input.json()["message"]
    assert beside.status_code == 422, beside.text
    assert "config" in beside.text
