"""A client opened where there is no database: it refuses to read, as the CLI does, and a
submit makes the database whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.fsm.errors import NoDatabase
from tickwork.worker.config.settings import Settings

from tickwork import Tickwork
from tickwork.testing import write_script


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
