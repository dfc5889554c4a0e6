"""A session's failure message is kept to a bound, whatever failed it: an exception's text
may be any size (a model server's error body, a tick that raised), and the session, its
`failed` and `dead_lettered` events and its dead letter keep its start and its end, with a
note saying how much of the middle was cut; on SQLite and on Postgres."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm import transitions
from tickwork.fsm.values import ErrorCode, EventKind, Status

from tests.worker.ticking import KIND, Ticks

#: 100 KB between a start and an end the message must keep
START, END = "the server said: ", " (request req_end)"
BODY = "x" * 100_000


def _model_error(ticks: Ticks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An agent session whose model answers with a permanent error of 100 KB."""
    script = tmp_path / "error.json"
    error = {"transient": False, "message": START + BODY + END}
    script.write_text(json.dumps([{"error": error}]))
    return ticks.client.submit(KIND, {}, model=f"scripted:{script}").id


def _tick_raised(ticks: Ticks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An agent session whose tick raised an exception of 100 KB: its model client could
    not be made, and said why at length."""

    def raises(*_: Any, **__: Any) -> None:
        raise RuntimeError(START + BODY + END)

    monkeypatch.setattr(ticks.rt, "model", raises)
    return ticks.submit([{"content": "done"}])


@pytest.mark.parametrize(
    ("failing", "code", "begins"),
    [
        (_model_error, ErrorCode.MODEL_ERROR, "permanent error: " + START),
        (_tick_raised, ErrorCode.INTERNAL, "RuntimeError: " + START),
    ],
    ids=["model_error", "tick_raised"],
)
def test_a_100_kb_failure_is_stored_cut_with_a_note_of_the_cut(
    ticks: Ticks,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failing: Any,
    code: ErrorCode,
    begins: str,
) -> None:
    session_id = failing(ticks, tmp_path, monkeypatch)

    done = ticks.run(session_id)

    assert (done.status, done.error_code) == (Status.FAILED, code)
    message = done.error_message
    assert len(message) < transitions.ERROR_CHARS + 100
    assert message.startswith(begins) and END in message[-200:]
    cut = re.search(r"\[\.\.\. (\d+) characters cut from the middle of (\d+) \.\.\.\]", message)
    assert cut is not None
    total = int(cut.group(2))
    assert total > len(BODY) and total - int(cut.group(1)) == transitions.ERROR_CHARS
    session = ticks.store.load(session_id)
    closing = [e for e in session.events if e.kind in (EventKind.FAILED, EventKind.DEAD_LETTERED)]
    assert [e.data["message"] for e in closing] == [message, message]
    assert ticks.store.dead_letter(session_id).message == message


@pytest.mark.parametrize("kind", [KIND, "tests.graphs:ASK"], ids=["agent", "graph_node"])
def test_a_100_kb_transient_error_is_kept_cut_in_its_retry_event(
    ticks: Ticks, tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A server's error body retried: its `model_retry` event keeps it as the failure does,
    not whole (a session retries up to max_model_retries times), and so does the log."""
    script = tmp_path / "retry.json"
    script.write_text(json.dumps([{"error": {"transient": True, "message": START + BODY + END}}]))
    head = ticks.client.submit(
        kind, {}, model=f"scripted:{script}", budgets={"max_model_retries": 1}
    )

    done = ticks.run(head.id)

    assert (done.status, done.error_code) == (Status.FAILED, ErrorCode.MODEL_ERROR)
    session = ticks.store.load(head.id)
    [retry] = [e.data["error"] for e in session.events if e.kind is EventKind.MODEL_RETRY]
    for said in (retry, done.error_message):
        assert len(said) < transitions.ERROR_CHARS + 100
        assert START in said[:100] and END in said[-200:]
        assert "characters cut from the middle of" in said
    # a node's retry is logged too (an agent's is not), with the event's words
    logged = [r.getMessage() for r in caplog.records if START in r.getMessage()]
    assert len(logged) == (kind != KIND)
    assert all(retry in line for line in logged)
