"""Fencing (issue 24): a worker whose lease renewal fails kills its running command at once,
so the command never runs on two workers at the same time."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tickwork.fsm.values import Status
from tickwork.store import Store, open_store
from tickwork.store.migrate import upgrade
from tickwork.worker.config.settings import Settings
from tickwork.worker.jobs import Jobs
from tickwork.worker.observers.report import Outcome, TickReport
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.runtime import Leases, Runtime, utc_now

from tickwork.client import Tickwork
from tickwork.testing import until

KIND = "tests.jobs:FILES"
#: a command that runs until it is killed, leaving a trace of each beat
BEATING = "while :; do date +%s%N >> beat; sleep 0.05; done"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    url = f"sqlite:///{tmp_path / 'fencing.db'}"
    upgrade(url)
    # a short lease: renewed every 0.5 s, so a refused renewal shows soon
    return Settings(database_url=url, state_dir=tmp_path / "state", lease_s=1.5, stop_poll_s=0.2)


@pytest.fixture
def store(settings: Settings) -> Store:
    store = open_store(settings.db_url)
    yield store  # type: ignore[misc]
    store.engine.dispose()


def _beats(root: Path) -> int:
    """How many beats the command wrote in its working copy (0 before its first)."""
    return sum(len(p.read_text().split()) for p in root.glob("sessions/*/files/beat"))


def test_a_command_is_killed_once_its_lease_passed_to_another_worker(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("x = 1\n")
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {
                    "content": "run",
                    "tool_calls": [
                        {"name": "run_command", "arguments": {"command": BEATING, "timeout_s": 300}}
                    ],
                },
                {"content": "done"},
            ]
        )
    )
    client = Tickwork(settings, store=store)
    client.publish = lambda *_: None  # type: ignore[method-assign]
    session_id = client.submit(
        KIND, {"workspace": str(project), "test_command": "true"}, model=f"scripted:{script}"
    ).id
    rt = Runtime(settings=settings, store=store, jobs=Jobs(), publish_tick=lambda *_: None)
    try:
        assert advance(rt, session_id, store.get(session_id).version).outcome is Outcome.SAVED
        head = store.get(session_id)
        assert head.status is Status.EXECUTING
        reports: list[TickReport] = []
        ticking = threading.Thread(
            target=lambda: reports.append(advance(rt, session_id, head.version)), daemon=True
        )
        ticking.start()
        root = settings.workspaces_path
        until(lambda: _beats(root) > 2, timeout=60, what="the command beating")

        # another worker takes the session over, as it would once this one stalled past its
        # lease: the claim says the lease ran out
        later = utc_now().replace(year=utc_now().year + 1)
        taken = store.claim(session_id, head.version, owner="other", now=later, lease_s=600)
        assert taken is not None

        # the next renewal is refused and the command's sandbox is killed: the tick ends
        # (its save is refused too) long before the command's own 300 s timeout
        ticking.join(30)
        assert not ticking.is_alive(), "the command kept running after its lease was lost"
        assert reports[0].outcome is Outcome.LOST
        beats = _beats(root)
        time.sleep(0.5)  # ten beats' time: a command still running would have written more
        assert _beats(root) == beats
    finally:
        rt.close()


def test_a_lease_not_renewed_for_its_length_is_lost(store: Store) -> None:
    """A worker stalled (SIGSTOP, a frozen VM) past its lease: its own clock tells it the
    lease may be another worker's, before any renewal has been tried."""
    leases = Leases(store, lease_s=1.5, clock=utc_now)
    try:
        with leases.hold("s", 3, "me"):
            assert leases.lost("s", 3) is None
            leases._renewed[("s", 3)] = time.monotonic() - 2.0  # the last renewal, 2 s ago
            lost = leases.lost("s", 3)
            assert lost is not None and "not renewed for 2s" in lost
        assert leases.lost("s", 3) is None  # a call outside a tick is not fenced
    finally:
        leases.close()  # its renewal thread, which would go on with the store closed


class Recording:
    """The store, noting the lease each claim and renewal asks for."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.leases: list[tuple[str, float]] = []

    def claim(self, *args: object, lease_s: float, **kw: object) -> object:
        self.leases.append(("claim", lease_s))
        return self._store.claim(*args, lease_s=lease_s, **kw)  # type: ignore[arg-type]

    def renew_leases(self, *args: object, lease_s: float, **kw: object) -> object:
        self.leases.append(("renew", lease_s))
        return self._store.renew_leases(*args, lease_s=lease_s, **kw)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_the_claim_and_the_renewals_take_the_same_lease(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "done"}]))
    client = Tickwork(settings, store=store)
    client.publish = lambda *_: None  # type: ignore[method-assign]
    head = client.submit("tests.jobs:TEST", {}, model=f"scripted:{script}")
    recording = Recording(store)
    rt = Runtime(settings=settings, store=recording, jobs=Jobs(), publish_tick=lambda *_: None)  # type: ignore[arg-type]
    assert rt.leases.lease_s == settings.lease_s
    # the leases own the duration: a change there is what the claim takes too
    rt.leases.lease_s = 4.0
    with rt.leases.hold(head.id, 0, "someone"):
        rt.leases.renew_all()
    assert advance(rt, head.id, 0).outcome is Outcome.SAVED
    # the background renewal may run as well, under load: each renewal asks for 4 s too
    assert {kind for kind, _ in recording.leases} == {"claim", "renew"}
    assert {lease for _, lease in recording.leases} == {4.0}


def test_a_worker_process_reaps_its_watchdog_at_its_exit() -> None:
    """The watchdog started by a process's first fenced command is stopped and reaped when
    that process exits: Python's end found it still running (`subprocess N is still
    running`, and its pipe unclosed) at the exit of every worker and test run that ran one."""
    code = (
        "import os\n"
        "from tickwork.worker.sandbox.fence import WATCHDOG\n"
        "WATCHDOG.tell(os.getpid(), None)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (ran.returncode, ran.stderr) == (0, "")
