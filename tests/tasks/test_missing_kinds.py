"""A session whose job kind a worker cannot have (docs/DESIGN.md section 12): a worker
started before the deploy that added the kind, or one whose path lacks the kind's module,
refuses the tick without touching the session, says so in one line, and a worker that has
the kind runs it whole."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import pytest
from tickwork.fsm.values import EventKind, Status

from tests.tasks.conftest import Deployment, stop, until
from tickwork import Tickwork, render, views

#: the log line of a refusal, after the session's id
REFUSED = "this worker cannot run it"
LEFT = "The tick is refused and the session left as it is for a worker that has the kind"


def untouched(deployment: Deployment, session_id: str, reason: str) -> None:
    """Left as it was, but for one `tick_refused` event (each refusing worker records it
    once), which `show` tells: who refused its tick, and why."""
    head = deployment.client.get(session_id)
    assert (head.status, head.version, head.step) == (Status.READY, 0, 0), head
    whole = deployment.client.load(session_id)
    # the relay's words on a lease (a stopped refusing worker's, taken over) change nothing
    relay = (EventKind.TAKEN_OVER, EventKind.LEASE_EXPIRED)
    kinds = [e.kind for e in whole.events if e.kind not in relay]
    assert kinds == [EventKind.CREATED, EventKind.TICK_REFUSED], whole.events
    (refusal,) = views.session(whole)["refused"]
    assert reason in refusal["reason"] and refusal["worker"], refusal
    console = render.Terminal(width=400, record=True, file=io.StringIO())
    console.print(render.timeline(views.session(whole)))
    shown = console.export_text()
    assert f"not run: its tick was refused by 1 worker ({refusal['worker']} at " in shown, shown


def test_a_worker_started_before_a_graph_kind_was_deployed_leaves_its_sessions(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    deployed = deployment.settings.model_copy(update={"imports": ["tests.graphs:REFUND"]})
    deployment.client.close()
    deployment.client = Tickwork(deployed)  # the submitting side has the new kind
    ledger = deployment.tmp / "ledger.jsonl"
    first = {"order_id": "A-1", "amount": 42.5, "reason": "broken", "ledger": str(ledger)}
    note = [{"content": "Dear customer, your refund is on its way."}]
    session_id = deployment.client.submit("refund", first, model=deployment.script(note)).id
    refusal = (
        f"session {session_id} of job kind 'refund': {REFUSED}: TICKWORK_IMPORTS here names "
        "no kind 'refund'; this worker's kinds: repair."
    )

    # deployment.settings names no kind: the worker started before the deploy
    with caplog.at_level("WARNING", logger="tickwork.tick"), deployment.worker():
        until(
            lambda: caplog.text.count(refusal) >= 2,
            timeout=60,
            what="the refusal, and the relay offering the refused tick again",
        )
        untouched(deployment, session_id, "TICKWORK_IMPORTS here names no kind 'refund'")
    assert LEFT in caplog.text and "start one whose TICKWORK_IMPORTS names the kind" in caplog.text
    assert "give module:attr" not in caplog.text  # the submitter's hint, not the worker's
    assert "INTERNAL" not in caplog.text and "Traceback" not in caplog.text

    deployment.settings = deployed  # a worker started after the deploy
    with deployment.worker():
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.WAITING_APPROVAL and head.awaiting == ("s3c0",), head


def test_a_kind_whose_module_a_worker_cannot_import_is_run_by_one_that_can(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"deployed_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "deployed"
    folder.mkdir()
    (folder / f"{module}.py").write_text("from tests.jobs import TEST as KIND\n")
    monkeypatch.syspath_prepend(str(folder))  # on this process's path, not the spawned one's
    replies = [
        {"content": "pay", "tool_calls": [{"name": "effect", "arguments": {"value": "v0"}}]},
        {"content": "all done"},
    ]
    kind = f"{module}:KIND"
    session_id = deployment.client.submit(
        kind, {"sink": str(deployment.sink)}, model=deployment.script(replies)
    ).id
    refusal = (
        f"session {session_id} of job kind {kind!r}: {REFUSED}: cannot import {module!r} for "
        f"{kind!r}: No module named {module!r}; Python looks for {module!r} in the installed "
        "packages and PYTHONPATH, not in the working directory: install it, or set PYTHONPATH "
        f"to the folder that holds it, for this command and for the workers. {LEFT}"
    )

    elsewhere = deployment.spawn()  # its PYTHONPATH lacks the folder

    def logged() -> str:
        return "".join(p.read_text() for p in deployment.tmp.glob("worker-*.log"))

    try:
        until(lambda: logged().count(refusal) >= 2, timeout=60, what="the refusal, twice")
        untouched(deployment, session_id, f"cannot import {module!r} for {kind!r}")
    finally:
        stop(elsewhere)
    assert "INTERNAL" not in logged() and "Traceback" not in logged()
    assert deployment.sink_lines("effect.log") == []

    with deployment.worker():  # this process has the module
        head = deployment.client.wait(session_id, timeout=60)
    assert head.status is Status.COMPLETED and head.final_answer == "all done", head
    assert [line.split()[1] for line in deployment.sink_lines("effect.log")] == ["v0"]


def test_a_worker_restarted_without_the_kind_is_one_refusing_worker_not_two(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal named the worker's process (`node:pid`): the same Celery node restarted
    (or its other processes) was one more worker refusing in `show`. It names the node."""
    module = f"deployed_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "deployed"
    folder.mkdir()
    (folder / f"{module}.py").write_text("from tests.jobs import TEST as KIND\n")
    monkeypatch.syspath_prepend(str(folder))  # the submitter has it, the workers do not
    kind = f"{module}:KIND"
    session_id = deployment.client.submit(
        kind, {"sink": str(deployment.sink)}, model=deployment.script([{"content": "done"}])
    ).id

    for _ in range(2):  # a worker, then the same worker restarted: another process
        logs = set(deployment.tmp.glob("worker-*.log"))
        worker = deployment.spawn("--hostname", "lacks@box")
        try:
            (log,) = set(deployment.tmp.glob("worker-*.log")) - logs
            until(
                lambda log=log: f"session {session_id} of job kind" in log.read_text(),
                timeout=60,
                what="the refusal",
            )
        finally:
            stop(worker)

    untouched(deployment, session_id, f"cannot import {module!r} for {kind!r}")
    (refusal,) = views.session(deployment.client.load(session_id))["refused"]
    assert refusal["worker"] == "lacks@box", refusal
