"""A client opened where there is no database: it refuses to read, as the CLI does, and a
submit makes the database whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.fsm.errors import NoDatabase, SessionFinished
from tickwork.fsm.values import Status
from tickwork.worker.config.settings import Settings

from tickwork import Tickwork
from tickwork.testing import embedded_settings, running_worker, write_script


def test_a_client_opened_where_there_is_no_database_makes_no_empty_one(tmp_path: Path) -> None:
    """It made an empty SQLite file, after which every command said "no tickwork schema"."""
    settings = Settings(state_dir=tmp_path / "state")
    client = Tickwork(settings)
    with pytest.raises(NoDatabase, match=r"no tickwork database at .*`tickwork submit`"):
        client.sessions()
    assert not settings.state_dir.exists()
    client.close()
    # a submit makes it whole, as `tickwork submit` does
    client = Tickwork(settings)
    model = write_script([{"content": "done"}], tmp_path)
    head = client.submit("tests.jobs:TEST", {"sink": str(tmp_path)}, model=model)
    assert [h.id for h in client.sessions()] == [head.id]
    client.close()


def test_a_wait_for_a_status_a_finished_session_will_never_have_ends_at_once(
    tmp_path: Path,
) -> None:
    """Waiting for `failed` on a completed session polled the whole timeout, then asked
    whether a worker ran; it says at once what the session is and what was waited for."""
    settings = embedded_settings(tmp_path)
    client = Tickwork(settings)
    model = write_script([{"content": "done"}], tmp_path)
    head = client.submit("tests.jobs:TEST", {"sink": str(tmp_path)}, model=model)
    with running_worker(settings):
        assert client.wait(head.id, until="completed").status is Status.COMPLETED
    with pytest.raises(SessionFinished) as ended:
        client.wait(head.id, until=["failed", "cancelled"], timeout=30)
    assert str(ended.value) == (
        f"session {head.id} has finished: it is completed and will never be cancelled or "
        "failed (fork it to go on)"
    )
    client.close()
