"""The preview of a waiting call: what it would write when it runs."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwork.fsm.values import CallState, Decision, DecisionKind, ToolCall

from tickwork.api.previews import preview

PROPOSED = {"path": "notes.txt", "content": "hello\n"}
EDITED = {"path": "sub/notes2.txt", "content": "edited\n"}


def in_doubt() -> ToolCall:
    return ToolCall(
        call_id="s1c0",
        step=1,
        index=0,
        name="write_file",
        arguments=PROPOSED,
        raw_arguments='{"path": "notes.txt", "content": "hello\\n"}',
        fingerprint="f" * 64,
        state=CallState.IN_DOUBT,
        needs_approval=True,
    )


def decided(kind: DecisionKind, arguments: dict[str, str] | None) -> Decision:
    at = datetime(2026, 12, 7, tzinfo=UTC)
    return Decision(
        call_id="s1c0",
        kind=kind,
        approver="alice",
        at=at,
        fingerprint="f" * 64,
        arguments=arguments,
    )


def test_an_in_doubt_call_that_ran_edited_is_previewed_as_edited() -> None:
    shown = preview(in_doubt(), decision=decided(DecisionKind.EDIT, EDITED))
    assert shown is not None
    assert shown["path"] == "sub/notes2.txt" and "+edited" in shown["diff"]
    assert shown["note"].startswith("as edited by alice, ")


def test_an_in_doubt_call_approved_as_proposed_is_previewed_as_proposed() -> None:
    for decision in (None, decided(DecisionKind.APPROVE, None)):
        shown = preview(in_doubt(), decision=decision)
        assert shown is not None
        assert shown["path"] == "notes.txt" and "+hello" in shown["diff"]
        assert "edited" not in shown["note"]


def test_an_in_doubt_call_run_again_as_edited_does_not_name_its_approver_as_the_editor() -> None:
    """alice edited it, it went in doubt, bob ran it again (his approval carries her edit)
    and it went in doubt again: the preview said `as edited by bob`."""
    again = decided(DecisionKind.APPROVE, EDITED).model_copy(update={"approver": "bob"})
    shown = preview(in_doubt(), decision=again)
    assert shown is not None and shown["path"] == "sub/notes2.txt"
    assert shown["note"].startswith("as edited, run again by bob, "), shown["note"]


def test_a_write_outside_the_session_s_files_says_the_tool_refuses_it() -> None:
    """A scripted `write_file` of `/etc/evil` waited for approval with the note "the path
    is outside the session's files; shown against an empty file", as if approving it
    wrote /etc/evil: the tool refuses such a path when it runs, approved or not. A
    home-relative one (`~/x`) was shown as a new file of the session."""
    for path in ("/etc/evil", "../evil.py", "a/../../evil.py", "~/evil.py"):
        call = in_doubt().model_copy(
            update={
                "arguments": {"path": path, "content": "x\n"},
                "state": CallState.AWAITING_APPROVAL,
            }
        )
        shown = preview(call, read=lambda name: None)
        assert shown is not None
        note = shown["note"]
        assert note.startswith("the tool refuses this path when the call runs, approved or not")
        assert "writes nothing" in note and repr(path) in note, note
    inside = in_doubt().model_copy(update={"arguments": {"path": "a/../b.py", "content": ""}})
    assert preview(inside, read=lambda name: None)["note"] == "new file"
