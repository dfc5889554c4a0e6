"""A session submitted where no worker runs (none started, or one started in another
folder: the embedded default's state is the folder's) stood `ready` in `show` and `watch`
without a word; both now ask whether a worker runs when none holds a sign of life on the
session's database, and say nothing while one does."""

from __future__ import annotations

import time
from pathlib import Path

from tests.e2e.conftest import TEST_KIND, Cli, Deployment, stop
from tickwork.cli_sessions import STILL_S
from tickwork.testing import until

ASKED = "no worker holds a sign of life on its database"


def test_show_and_watch_ask_whether_a_worker_runs_only_while_none_does(
    deployment: Deployment, cli: Cli, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    # the one reply takes longer than the test (a loaded machine's CLI calls took 30 s): the
    # session stays `ready` while a worker's THINK waits, until `stop` ends the worker
    script.write_text('[{"content": "done", "delay_s": 600}]')
    submitted = cli("submit", TEST_KIND, "--input", "{}", "--model", f"scripted:{script}")
    session_id = submitted.stdout.strip()
    time.sleep(STILL_S)  # the session must have stood still first

    shown = cli("show", session_id)
    assert f"session {session_id} is ready, and {ASKED}" in " ".join(shown.stdout.split())
    assert "is one running?" in shown.stdout
    watched = cli("watch", session_id, "--timeout", "1", ok=False)
    assert watched.code == 1, watched
    assert ASKED in " ".join(watched.stdout.split()), watched
    assert cli("show", session_id, "--json").json()["head"]["status"] == "ready"

    worker = cli.start("worker", "--pool", "solo", "--no-dead-letters")[0]
    try:
        until(
            lambda: cli("show", session_id, "--json").json()["lease"] is not None,
            timeout=60,
            what="the worker to take the session's tick",
        )
        time.sleep(STILL_S)  # standing still again, now in a worker's hands
        shown = cli("show", session_id)
        assert cli("show", session_id, "--json").json()["head"]["status"] == "ready"
    finally:
        stop(worker)
    assert ASKED not in " ".join(shown.stdout.split()), shown
