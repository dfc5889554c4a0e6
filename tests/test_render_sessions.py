"""`tickwork ls`: what its NOTE column says of a session, rendered from the heads the
store and the API list."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from tickwork import render

NOT_RUN = (
    "the shell could not find or execute the test command (exit 127): is it installed in "
    "the session's environment?"
)


def head(**fields: Any) -> dict[str, Any]:
    return {
        "id": "s1",
        "status": "completed",
        "outcome": "tests_not_run",
        "step": 2,
        "tokens": 10,
        "cost_usd": 0.0,
        "created_at": "2026-12-06T03:50:00+00:00",
        "kind": "repair",
        "tenant": "default",
        "error_code": None,
        "error_message": None,
        "awaiting": [],
        "result": {"tests": {"exit_code": 127, "passed": False, "not_run": NOT_RUN}},
        **fields,
    }


def listed(*heads: dict[str, Any]) -> str:
    console = Console(width=2000, record=True)
    console.print(render.sessions_table(heads))
    return console.export_text()


def test_a_repair_whose_tests_did_not_run_says_why_in_ls() -> None:
    """`tickwork ls` showed a completed `tests_not_run` repair with an empty NOTE: a user
    who scanned the list for why (a runner not installed, no test collected) had to open
    each with `show`."""
    (row,) = [line for line in listed(head()).splitlines() if line.startswith(" s1 ")]
    assert "tests did not run: the shell could not find or execute" in row, row


def test_other_outcomes_and_a_head_without_a_result_have_no_such_note() -> None:
    failing = head(
        id="s2", outcome="tests_failing", result={"tests": {"exit_code": 1, "passed": False}}
    )
    bare = head(id="s3", outcome=None, kind="echo", result=None)
    text = listed(failing, bare)
    assert "did not run" not in text


def test_a_repair_whose_tests_passed_before_any_change_too_says_so_in_ls() -> None:
    """`tickwork ls` (and `ls --outcome repaired`) showed a patch that only edited a comment
    of an unbroken project as `completed  repaired` with an empty NOTE: only `show` said the
    tests passed before any change too. The outcome stays `repaired` (clients filter on
    it); the note says it."""
    before = {"step": 1, "call_id": "s1c0", "passed": True, "failing": []}
    passed = {"exit_code": 0, "passed": True}
    idle = head(outcome="repaired", result={"tests": passed, "tests_before": before})
    mended = head(
        id="s2",
        outcome="repaired",
        result={"tests": passed, "tests_before": {**before, "passed": False}},
    )
    unknown = head(id="s3", outcome="repaired", result={"tests": passed})  # no run before
    broke = head(
        id="s4",
        outcome="tests_failing",
        result={"tests": {"exit_code": 1, "passed": False}, "tests_before": before},
    )
    text = listed(idle, mended, unknown, broke)
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith(" s")}
    note = "tests passed before any change too: the patch repaired no failing test"
    assert "repaired" in rows["s1"] and note in rows["s1"], rows["s1"]
    assert [s for s in ("s2", "s3", "s4") if "passed before" in rows[s]] == []


def test_a_repair_that_changed_nothing_while_its_tests_fail_says_so_in_ls() -> None:
    """A repair whose one patch was rejected ended `completed  no_changes` with an empty
    NOTE, though its final tests failed: `no_changes` comes before `tests_failing`."""
    failing = {"exit_code": 1, "passed": False, "failing": ["t.py::a", "t.py::b"]}
    rejected = head(outcome="no_changes", result={"tests": failing})
    idle = head(id="s2", outcome="no_changes", result={"tests": {"exit_code": 0, "passed": True}})
    rows = {
        line.split()[0]: line
        for line in listed(rejected, idle).splitlines()
        if line.startswith(" s")
    }
    assert "tests still fail (2 failing): the session changed nothing" in rows["s1"], rows
    assert "still fail" not in rows["s2"]


def test_a_repair_whose_tests_still_fail_says_whether_they_failed_before_in_ls() -> None:
    """toolz's repair ended `completed  tests_failing` with an empty NOTE, though its patch
    mended the test it was about and the one left failing had failed before any change
    too (`show` said so; a `no_changes` one had a note): the note says how many fail and
    whether the patch may have caused them."""

    def failing(sid: str, count: int, of: int) -> dict[str, Any]:
        found = {"count": count, "of": of, "tests": []}
        result = {"tests": {"exit_code": 1, "passed": False}, "failed_before": found}
        return head(id=sid, outcome="tests_failing", result=result)

    text = listed(failing("s1", 1, 1), failing("s2", 0, 2), failing("s3", 1, 3))
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith(" s")}
    assert "tests still fail (1 failing), it failed before any change too" in rows["s1"]
    assert "tests still fail (2 failing), none of which failed before any change" in rows["s2"]
    assert "tests still fail (3 failing), 1 of which failed before any change too" in rows["s3"]
    bare = head(id="s4", outcome="tests_failing", result={"tests": {"passed": False}})
    assert "still fail" not in listed(bare)


PATCH = (
    "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    " def average(numbers):\n-    return sum(numbers) / (len(numbers) + 1)\n"
    "+    return sum(numbers) / len(numbers)\n"
)


def printed(*renderables: Any) -> str:
    console = render.Terminal(width=200, record=True, file=io.StringIO())
    for renderable in renderables:
        console.print(renderable)
    return console.export_text()


def test_a_patch_is_printed_as_it_is_without_padding() -> None:
    """`tickwork show`, `watch` and the demo printed a patch with every line padded with
    spaces to the console's width (200 columns in a pipe) and a blank line after it, so a
    patch copied from the output (`tickwork show ID > review.txt`) no longer applied."""
    done = head(outcome="repaired", result={"outcome": "repaired", "patch": PATCH})
    text = printed(*render.outcome({**done, "final_answer": None}, []))
    assert f"patch:\n{PATCH}" in text, text
    assert not [line for line in text.splitlines() if line.endswith(" ")], text
    shown = printed(render.diff(PATCH))
    assert shown == PATCH, shown


def test_a_model_retry_reads_as_a_sentence() -> None:
    """`watch` and the demo printed a retry as `attempt=1 delay_s=0.9352889818389376
    error=...`: sixteen digits of a delay, and the keys of the event's JSON."""
    said = render.summary(
        "model_retry",
        {"attempt": 2, "delay_s": 1.9976982963612175, "error": "POST ... failed: ConnectError"},
    )
    assert said == "attempt 2 failed, retry in 2.0 s: POST ... failed: ConnectError"
    billed = {"attempt": 1, "delay_s": 0.5, "error": "empty reply", "tokens": 40, "cost_usd": 0.1}
    assert render.summary("model_retry", billed) == (
        "attempt 1 failed, retry in 0.5 s: empty reply · 40 tokens · $0.1000"
    )


def test_a_stored_reason_names_the_flags_on_the_command_line_and_the_fields_in_it() -> None:
    """A session's stored reason said "fork it ... with a later --deadline" to API callers
    and the page too. It is stored naming the field (`deadline_s`); `ls`, `show`, `watch`
    and `dlq` print it with the flag that gives it, and leave other backticked words."""
    stored = (
        "waited for a decision on s1c0 past its deadline, `deadline_s` is 60; fork it from "
        "step 0 with a later deadline (`deadline_s`) to be asked again (`kind`)"
    )
    said = (
        "past its deadline, --deadline is 60; fork it from step 0 with a later deadline "
        "(--deadline) to be asked again (`kind`)"
    )
    short = "fork it with a later deadline (`deadline_s`)"  # ls clips a long note
    failed = head(status="failed", outcome=None, error_code="DEADLINE", error_message=short)
    assert "DEADLINE: fork it with a later deadline (--deadline)" in listed(failed)
    assert said in render.summary("failed", {"error_code": "DEADLINE", "message": stored})
    letter = {"id": 1, "at": "2026-12-06T03:50:00+00:00", "code": "DEADLINE", "message": stored}
    console = Console(width=2000, record=True)
    console.print(
        render.dead_letter_header({**letter, "error_signature": "x", "resolved_at": None})
    )
    assert said in console.export_text()
    context = "fork it with a larger window (`context_window`) or have the node send less"
    assert render.summary("failed", {"error_code": "CONTEXT", "message": context}) == (
        "CONTEXT: fork it with a larger window (--context-window) or have the node send less"
    )


def test_a_cost_below_a_hundredth_of_a_cent_does_not_read_as_nothing() -> None:
    """`tickwork ls`, `show` and `watch` printed a session of a cheap model that had spent
    $0.00003 as `$0.0000`, as one that had spent nothing."""
    cheap = head(cost_usd=0.00003)
    (row,) = [line for line in listed(cheap).splitlines() if line.startswith(" s1 ")]
    assert "<$0.0001" in row and "$0.0000" not in row, row
    (row,) = [line for line in listed(head()).splitlines() if line.startswith(" s1 ")]
    assert "$0.0000" in row, row  # nothing spent
    called = {"step": 1, "model": "m", "prompt_tokens": 20, "completion_tokens": 2}
    said = render.summary("model_called", {**called, "cost_usd": 0.000004, "latency_ms": 9})
    assert said == "step 1 · m · 22 tokens · <$0.0001 · 9 ms", said


#: a setup log's end as a card keeps it: pip's output, long enough to have been cut
PIP_LOG = "\n".join(
    [f'  "text": {{ "line {n}": "Collecting something-{n} from the index" }}' for n in range(60)]
    + ["Traceback (most recent call last):", "ValueError: invalid pyproject.toml config"]
)


def environment(status: str, **more: Any) -> dict[str, Any]:
    return {"key": "8ec739a5c0cb" + "0" * 52, "status": status, "log": PIP_LOG, **more}


def test_show_prints_no_setup_log_for_an_environment_that_was_built() -> None:
    """`tickwork show` printed the end of a ready environment's build log (64 lines of
    pip's output, starting mid-line) after its `environment:` line; the docs give it a
    line, its log being in `--json` and `tickwork env show`."""
    env = environment("ready", built=True, missing=["pytest"])
    done = head(result={"outcome": "tests_not_run", "environment": env})
    text = printed(*render.outcome({**done, "final_answer": None}, []))
    assert "environment: ready, key 8ec739a5c0cb (`tickwork env show 8ec739a5c0cb`)" in text
    assert "Collecting" not in text and '"text"' not in text, text


def test_show_prints_a_failed_setup_s_last_lines_whole_under_a_heading() -> None:
    """A failed setup's log's end came with no heading, cut at its 4,000th character from
    the end (mid-line): its last lines are shown whole, said to be its end and where the
    rest is."""
    env = environment("failed")
    failed = head(
        status="failed",
        error_code="ENV_SETUP",
        error_message="the environment's setup failed (environment 8ec739a5c0cb): it exited 1",
        result={"outcome": "tests_not_run", "environment": env},
    )
    lines = printed(*render.outcome({**failed, "final_answer": None}, [])).splitlines()
    at = lines.index(
        f"its setup log's last {render.SETUP_LOG_LINES} lines (`tickwork env show "
        "8ec739a5c0cb` has it whole):"
    )
    shown = [ln.rstrip() for ln in lines[at + 1 : at + 1 + render.SETUP_LOG_LINES]]
    assert shown == PIP_LOG.splitlines()[-render.SETUP_LOG_LINES :], shown


def test_a_dead_letters_signature_names_the_flag_as_its_message_does() -> None:
    """`dlq stats` and `dlq show` printed a BUDGET_TOKENS signature as "`max_tokens` is N"
    beside its message's "--max-tokens is 10": the signature now goes through the same
    `reason_said`; a setting's words stay."""
    from tickwork.store.error_signatures import error_signature

    message = "1234 tokens used, `max_tokens` is 10"
    signature = error_signature("BUDGET_TOKENS", message)
    assert "`max_tokens` is N" in signature, signature
    letter = {"id": 1, "at": "2026-12-06T03:50:00+00:00", "code": "BUDGET_TOKENS"}
    shown = printed(
        render.dead_letter_header(
            {**letter, "message": message, "error_signature": signature, "resolved_at": None}
        ),
        *render.stats_tables(
            {"error_signature": [{"value": signature, "count": 1, "latest": letter["at"]}]}
        ),
    )
    assert "--max-tokens is 10" in shown, shown
    assert shown.count("BUDGET_TOKENS: N tokens used, --max-tokens is N") == 2, shown
    assert "`max_tokens`" not in shown, shown
    settings = "INTERNAL: ConfigurationError: role 'fixer' has no `system_prompt`"
    assert render.signature_said(settings) == settings


def test_a_requested_cancel_shows_as_cancelling_in_exactly_the_runnable_statuses() -> None:
    """`(cancelling)` says the cancel waits for the session's next tick: every runnable
    status has one (`Status.runnable`), no other does (a suspended or queued session's
    cancel ends it at once; a finished one has nothing to stop)."""
    from tickwork.fsm.values import Status

    for status in Status:
        shown = render.head_status({"status": status.value, "cancel_requested": True})
        assert ("(cancelling)" in shown.plain) is status.runnable, (status, shown.plain)
    assert not render.cancelling(
        {"status": "a status a newer server has", "cancel_requested": True}
    )


def test_dlq_ls_and_ls_show_what_to_do_after_a_failed_setup() -> None:
    """`dlq ls` cut an ENV_SETUP dead letter's message at 100 characters, inside which
    command stopped the setup: its "Next: ..." (fix the setup, submit again) never showed.
    The listings keep the next step whole and leave the log out."""
    from tickwork.worker.files.environments import _failure

    stopped = "setup stopped at `python -m pip install -r requirements/development.txt` (exit 1)"
    log = "$ python -m pip install -r requirements/development.txt\n" * 30 + stopped
    message = _failure("ab12" * 16, log, auto=False)
    assert "Next: " in message[100:], message
    letter = {
        "id": 7,
        "session_id": "s1",
        "code": "ENV_SETUP",
        "status": "open",
        "at": "2026-12-06T03:50:00+00:00",
        "kind": "repair",
        "last_tool": None,
        "message": message,
        "resolution": None,
    }
    console = render.Terminal(width=2000, record=True, file=io.StringIO())
    console.print(render.dead_letters_table([letter]))
    listed_letter = console.export_text()
    sessions = listed(head(status="failed", error_code="ENV_SETUP", error_message=message))
    for shown in (listed_letter, sessions):
        assert "the environment's setup failed (environment ab12ab12ab12)" in shown, shown
        assert "Next: fix the `--setup` commands and submit the job again" in shown, shown
        assert "the whole log: `tickwork env show ab12ab12ab12`" in shown, shown
        assert "more chars; --json shows all)" in shown, shown
        assert "$ python -m pip" not in shown, shown


def test_a_listing_takes_no_next_step_from_a_reason_s_later_lines() -> None:
    """Only the first line's "Next: ..." is a next step: one in a log or traceback below it
    is not shown in place of what went wrong."""
    reason = "the command failed: " + "x" * 100 + "\nlog: done. Next: step of the log\nmore"
    shown = render.gist(reason, 80)
    assert shown.startswith("the command failed: "), shown
    assert "step of the log" not in shown, shown


def test_ls_shows_a_graph_session_s_graph_version_beside_its_kind() -> None:
    """During a graph upgrade the runbook drains with `tickwork ls --kind G` "until no
    session of the old version is left", but `ls` showed no graph version at all (and
    `--json`'s `version` is the row's): the old sessions could not be told from the new."""
    old = head(
        id="g1",
        kind="pay",
        outcome=None,
        result=None,
        config={"graph": {"name": "pay", "version": "1"}},
    )
    new = head(
        id="g2",
        kind="pay",
        outcome=None,
        result=None,
        config={"graph": {"name": "pay", "version": "2"}},
    )
    rows = {
        line.split()[0]: line for line in listed(old, new).splitlines() if line.startswith(" g")
    }
    assert " pay v1 " in rows["g1"] and " pay v2 " in rows["g2"], rows
    assert " repair v" not in listed(head())


def test_a_graph_node_no_person_decided_on_shows_no_empty_state() -> None:
    """`show` of a graph printed STATE IN `{}` for a node that ran on a full state: only a
    node a person decides on records its state in its call."""
    call = {
        "call_id": "s1c0",
        "name": "check",
        "arguments": {},
        "raw_arguments": "{}",
        "state": "done",
        "observation": None,
        "decision": None,
    }
    console = Console(width=200, record=True)
    console.print(render._calls_table([call], graph=True))
    text = console.export_text()
    assert "{}" not in text and "(not recorded)" in text, text
    console.print(render._calls_table([{**call, "name": "note"}]))  # a tool's call: as it is
    assert "{}" in console.export_text()


def test_a_dead_letter_listed_names_its_first_forks_and_counts_the_rest() -> None:
    forks = [{"fork": f"f{i}", "by": "erin", "at": "2026-12-06T04:00:00+00:00"} for i in range(5)]
    letter = {
        "id": 7,
        "session_id": "s1",
        "code": "BUDGET_STEPS",
        "at": "2026-12-06T03:50:00+00:00",
        "kind": "repair",
        "last_tool": None,
        "message": "1 step made, --max-steps is 1",
        "resolution": {"state": "forked", "fork": "f0", "forks": forks},
    }
    console = render.Terminal(width=200, record=True, file=io.StringIO())
    console.print(render.dead_letters_table([letter]))
    shown = console.export_text()

    assert "→ fork f0 (resolved it)" in shown and "→ fork f2" in shown, shown
    assert "f3" not in shown and "→ and 2 more forks: `tickwork dlq show 7`" in shown, shown


def test_an_edited_call_run_again_shows_the_arguments_it_ran_with() -> None:
    decided = {
        "kind": "approve",
        "approver": "bob",
        "at": "2026-12-07T11:15:26+00:00",
        "comment": "",
        "feedback": "",
        "output": "",
    }
    assert "as edited" not in render.decision_text({**decided, "arguments": None})
    again = render.decision_text({**decided, "arguments": {"command": "echo hi"}})
    assert again.endswith(', as edited: {"command": "echo hi"}')


def test_a_file_write_that_ran_edited_is_shown_as_it_was_written() -> None:
    edited = {"path": "sub/notes2.txt", "content": "edited\n"}
    call = {
        "call_id": "s1c0",
        "name": "write_file",
        "arguments": {"path": "notes.txt", "content": "hello\n"},
        "decision": {"kind": "edit", "approver": "alice", "arguments": edited},
        "as_edited": "as edited by alice",
    }
    console = Console(width=200, record=True, file=io.StringIO())
    for part in render._file_changes([call], {}):
        console.print(part)
    shown = console.export_text()
    assert "the content of sub/notes2.txt as edited by alice, whole" in shown
    assert "edited" in shown.splitlines()[1] and "hello" not in shown


def test_a_file_write_run_again_as_edited_names_who_ran_it_again_not_as_its_editor() -> None:
    edited = {"path": "sub/notes2.txt", "content": "edited\n"}
    call = {
        "call_id": "s1c0",
        "name": "write_file",
        "arguments": {"path": "notes.txt", "content": "hello\n"},
        "decision": {"kind": "approve", "approver": "bob", "arguments": edited},
        "as_edited": "as edited, run again by bob",
    }
    console = Console(width=200, record=True, file=io.StringIO())
    for part in render._file_changes([call], {}):
        console.print(part)
    assert "sub/notes2.txt as edited, run again by bob, whole" in console.export_text()


def test_show_says_who_cancelled_a_session_and_when() -> None:
    asked = {"kind": "cancel_requested", "at": "2026-12-07T11:14:12+00:00", "data": {"by": "carol"}}
    said = render.cancelled_by(head(status="cancelled"), [asked])
    assert said is not None and said.plain == "cancelled by carol at 2026-12-07 11:14:12Z"
    assert render.cancelled_by(head(status="completed"), [asked]) is None
    unnamed = {**asked, "data": {"by": ""}}
    said = render.cancelled_by(head(status="cancelled"), [unnamed])
    assert said is not None and said.plain.startswith("cancelled by someone unnamed at ")


def test_show_says_its_dates_in_utc_with_a_z_as_the_page_and_the_views_do() -> None:
    """`show` printed `2026-12-07 12:14:12` for a date stored as `12:14:12+01:00`, neither
    in UTC nor saying which zone, while the page and `--json` say UTC with a Z."""
    assert render.when("2026-12-07T12:14:12.734+01:00") == "2026-12-07 11:14:12Z"
    assert render.when("2026-12-07T11:14:12Z") == "2026-12-07 11:14:12Z"
    assert render.when("2026-12-07T11:14:12") == "2026-12-07 11:14:12Z"  # naive: UTC


def test_show_names_who_asked_to_cancel_not_the_tick_that_finished_the_cancel() -> None:
    """carol cancelled a session while a worker ran its tick, which then suspended it: the
    worker cancels it at once (`after_commit`), recording a second request by "cancel during
    a tick", which `show` named instead of carol."""
    asked = {"kind": "cancel_requested", "at": "2026-12-07T11:14:12+00:00", "data": {"by": "carol"}}
    finished = {
        "kind": "cancel_requested",
        "at": "2026-12-07T11:14:15+00:00",
        "data": {"by": "cancel during a tick"},
    }
    said = render.cancelled_by(head(status="cancelled"), [asked, finished])
    assert said is not None and said.plain == "cancelled by carol at 2026-12-07 11:14:12Z"


def test_an_in_doubt_call_that_ran_edited_is_offered_to_run_again_as_edited() -> None:
    call = {"call_id": "s1c1", "name": "run_command", "fingerprint": "f" * 64}
    call |= {"state": "in_doubt", "approval_reason": None}
    edit = {"kind": "edit", "approver": "alice", "arguments": {"command": "echo hi"}}
    waits = head(status="waiting_approval", awaiting=["s1c1"], result={}, final_answer=None)
    for decision, said in ((edit, "Run it again as edited: "), (None, "Run it again: ")):
        by = "as edited by alice" if decision else None
        steps = [{"calls": [{**call, "decision": decision, "as_edited": by}]}]
        (line, *_) = render.outcome(waits, steps)
        assert said in line.plain  # type: ignore[union-attr]
