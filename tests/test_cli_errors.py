"""tickwork.cli.explain: the one `error:` line and exit code an exception becomes."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from tickwork.fsm.errors import API_LISTING, SessionNotFound

from tickwork.cli import REFUSED, explain


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
