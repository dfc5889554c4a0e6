"""tickwork.cli.explain: the one `error:` line and exit code an exception becomes."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from tickwork.fsm.errors import API_LISTING, SessionNotFound

from tickwork import render
from tickwork.cli import REFUSED, explain, fail


def test_session_not_found_carries_its_id_and_each_surface_says_its_own_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TICKWORK_DATABASE_URL", raising=False)
    monkeypatch.setenv("TICKWORK_STATE_DIR", str(tmp_path))
    error = SessionNotFound.of("s9")
    assert error.session_id == "s9"
    # the API's message (and the library's) names both ways to list sessions
    assert error.message == f"no session 's9'; list sessions with `tickwork ls` ({API_LISTING})"
    message, code = explain(error)
    assert code == REFUSED
    assert message == (
        f"no session 's9'; list sessions with `tickwork ls` (looked in {tmp_path}/tickwork.db: "
        "run commands from the folder you submitted from, or set TICKWORK_STATE_DIR)"
    )


def test_a_session_not_found_without_an_id_is_said_as_it_was_raised() -> None:
    message, code = explain(SessionNotFound("no session in the archive's index"))
    assert (message, code) == ("no session in the archive's index", REFUSED)
    copied = pickle.loads(pickle.dumps(SessionNotFound.of("s9")))
    assert (copied.message, copied.session_id) == (SessionNotFound.of("s9").message, "s9")


def test_the_lines_on_stderr_obey_no_control_character(capsys: pytest.CaptureFixture[str]) -> None:
    """An error or a note can quote what others wrote (a file's name in a shared workspace,
    a server's message): an escape sequence there must not reach the terminal, as none
    does from `show` (render.Terminal)."""
    named = "pkg/\x1b]52;c;ZXZpbA==\x07x.py \x1b[1A\x1b[2K\u202egnp.py"
    fail(f"cannot read {named}", 1)
    render.note(f"left out: {named}")
    said = capsys.readouterr().err
    assert "\x1b" not in said and "\x07" not in said and "\u202e" not in said
    assert said == (
        "error: cannot read pkg/]52;c;ZXZpbA==x.py [1A[2Kgnp.py\n"
        "note: left out: pkg/]52;c;ZXZpbA==x.py [1A[2Kgnp.py\n"
    )


def test_json_output_escapes_what_a_terminal_would_obey(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--json` writes non-ASCII text as it is; JSON escapes C0 controls itself, but not the
    C1 CSI (U+009B, a terminal's ESC [) or the bidirectional overrides a model may write:
    escaped too, and the document reads back the same."""
    from tickwork import views

    thought = "fine\u009b2J\u009b1A \u202egnp.exe café"
    views.emit({"thought": thought})
    printed = capsys.readouterr().out
    assert "\u009b" not in printed and "\u202e" not in printed and "café" in printed
    assert "\\u009b2J" in printed and "\\u202e" in printed
    assert json.loads(printed) == {"thought": thought}


def test_an_approval_request_line_agrees_with_its_number_of_calls() -> None:
    """`watch` printed "s1c0 need a decision" for one call (found by an outside run)."""
    from tickwork import render

    def line(calls: list[str]) -> str:
        event = {
            "at": "2026-12-05T18:00:00Z",
            "kind": "approval_requested",
            "data": {"step": 1, "calls": calls},
        }
        return render.event_line(event).plain

    assert "step 1: s1c0 needs a decision" in line(["s1c0"])
    assert "step 1: s1c0, s1c1 need a decision" in line(["s1c0", "s1c1"])


def test_a_failure_line_keeps_its_message_s_first_line_not_the_setup_log() -> None:
    """`watch` of a session whose environment's setup failed printed its whole setup log
    with the `failed` event, again with `dead_lettered`, and a third time under the outcome
    (77 lines for toolz's 25); each event's line now keeps the message's first line, which
    says what failed and what to do, and counts the rest."""
    from tickwork import render

    first = "the environment's setup failed (environment f57d1def3899): setup stopped"
    log = "\n".join(f"$ command {i}\nexit code: 0" for i in range(10))
    for kind in ("failed", "dead_lettered"):
        event = {
            "at": "2026-12-08T00:58:07Z",
            "kind": kind,
            "data": {"error_code": "ENV_SETUP", "message": f"{first}\n{log}"},
        }
        shown = render.event_line(event).plain
        assert "\n" not in shown and "$ command" not in shown, shown
        assert shown.endswith(f"ENV_SETUP: {first} (+20 more lines: `tickwork show`)"), shown
    one = {"at": None, "kind": "failed", "data": {"error_code": "LOOP", "message": "looped"}}
    assert render.event_line(one).plain.endswith("LOOP: looped")


def test_a_rejection_line_shows_its_feedback_obeying_no_control_character(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`watch` showed a rejection's comment but not its feedback, the reason the model
    reads; both come out without what a terminal would obey."""
    event = {
        "at": "2026-12-05T18:00:00Z",
        "kind": "approval_decided",
        "data": {
            "call_id": "s1c2",
            "decision": "reject",
            "approver": "carol",
            "comment": "see\x1b[2K ticket",
            "feedback": "not c\x1b[1A\u202e",
        },
    }
    render.show(render.event_line(event))
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\u202e" not in printed
    assert "s1c2: reject by carol: not c[1A (see[2K ticket)" in printed


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        (["ls", "--status"], "tickwork ls"),
        (["dlq", "ls", "--code"], "tickwork dlq ls"),
        (["fork", "s1", "--from-step"], "tickwork fork"),
        (["--server", "http://127.0.0.1:9", "submit", "repair", "--model"], "tickwork submit"),
    ],
)
def test_an_option_without_its_value_points_to_its_command_s_help(
    argv: list[str], where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tickwork ls --status` said "Option '--status' requires an argument. (see `tickwork
    --help`)": click raises that error without its command, and the top help does not
    list the option."""
    from tickwork.cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"requires an argument. (see `{where} --help`)" in line, line


def test_an_archived_sessions_refusal_from_a_server_names_the_commands_only() -> None:
    """`--server`: the API's 404 for an archived session names what is served of it for
    both (`tickwork patch`, and the API's routes); the command line says its commands."""
    from tickwork.fsm.errors import SessionArchived

    from tickwork.remote.errors import RemoteError

    said = SessionArchived.of("a1b2c3").message
    refused = RemoteError(said, code="session_not_found", status=404, details={"archived": True})
    message, code = explain(refused)
    assert code == REFUSED
    assert message == (
        "session 'a1b2c3' is archived: the server serves only its patch and forks "
        "(`tickwork patch`, `tickwork fork`)"
    )


def test_a_refusal_by_the_settings_keeps_its_words_raised_here_answered_or_stored() -> None:
    """One predicate (`flags.by_settings`) says a setting's refusal keeps its words, however
    it reaches the command line: raised here, answered by a server, or stored on a session
    the tick failed; any other refusal names the flag."""
    from tickwork.fsm.errors import InvalidGraph

    from tickwork.remote.errors import RemoteError

    words = "roles file r.toml: `system_prompt` must be non-empty text"
    assert explain(InvalidGraph(words))[0] == words
    for code in ("configuration_error", "invalid_graph", "missing_credentials"):
        assert explain(RemoteError(words, code=code, status=422))[0] == words
    assert render.reason_said(f"MissingCredentials: {words}") == f"MissingCredentials: {words}"
    flagged = "--system-prompt must be non-empty text"
    assert explain(RemoteError(words, code="invalid_input", status=422))[0].endswith(flagged)
    assert render.reason_said(f"BUDGET: {words}").endswith(flagged)
