"""A tick of a session whose job kind this worker cannot have is refused without touching
it, but a cancel needs no kind: such a session can still be cancelled. A kind this worker
imports but that is no job kind is a broken configuration, and fails the session."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update
from tickwork.fsm.values import ErrorCode, EventKind, Status
from tickwork.store.schema import sessions
from tickwork.worker.observers.report import Outcome
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.runtime import Runtime

from tests.conftest import Clock
from tests.worker.ticking import DANGER, Ticks
from tickwork import views


def _of_kind(ticks: Ticks, kind: str) -> str:
    """A session submitted as a kind this process has, then stored as `kind`."""
    session_id = ticks.submit(DANGER)
    with ticks.store.engine.begin() as conn:
        conn.execute(update(sessions).where(sessions.c.id == session_id).values(kind=kind))
    return session_id


def test_a_session_of_a_kind_this_worker_lacks_is_refused_and_can_still_be_cancelled(
    ticks: Ticks, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    session_id = _of_kind(ticks, "gone_from_this_host:KIND")

    with caplog.at_level("WARNING", logger="tickwork.tick"):
        report = advance(ticks.rt, session_id, 0)

    assert report.outcome is Outcome.DROPPED
    head = ticks.store.get(session_id)
    assert (head.status, head.version, head.step) == (Status.READY, 0, 0)
    [line] = [r.getMessage() for r in caplog.records if r.name == "tickwork.tick"]
    assert line.startswith(
        f"session {session_id} of job kind 'gone_from_this_host:KIND': this worker cannot run "
        "it: cannot import 'gone_from_this_host'"
    )

    ticks.store.request_cancel(session_id, now=clock(), by="ops")  # runnable: flagged
    clock.advance(ticks.settings.lease_s + 1)  # the refused tick's lease runs out
    head = ticks.run(session_id)

    assert head.status is Status.CANCELLED, (head.status, head.error_message)
    assert ticks.store.load(session_id).events[-1].kind is EventKind.CANCELLED


def test_a_refused_tick_is_recorded_once_a_node_and_looked_up_once_a_process(
    ticks: Ticks, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal named the worker process (`node:pid`): the same Celery node refusing from
    its other processes, or after a restart, counted as one more worker in `show`. And each
    tick offered again and refused again locked the session and read its refusals."""
    session_id = _of_kind(ticks, "gone_from_this_host:KIND")
    asked: list[str] = []
    refuse_tick = ticks.store.refuse_tick

    def counted(*args: Any, **kw: Any) -> bool:
        asked.append(kw["worker"])
        return refuse_tick(*args, **kw)

    monkeypatch.setattr(ticks.store, "refuse_tick", counted)

    def refused_by(rt: Runtime, node: str) -> None:
        clock.advance(ticks.settings.lease_s + 1)  # the last refused tick's lease runs out
        assert advance(rt, session_id, 0, node=node).outcome is Outcome.DROPPED

    refused_by(ticks.rt, "lacks@box")
    refused_by(ticks.rt, "lacks@box")  # offered again: this process knows it is recorded
    assert asked == ["lacks@box"]
    refused_by(ticks.runtime(clock), "lacks@box")  # another process of the node: read, not written
    refused_by(ticks.rt, "other@box")
    assert asked == ["lacks@box", "lacks@box", "other@box"]

    refused = views.session(ticks.store.load(session_id))["refused"]
    assert [r["worker"] for r in refused] == ["lacks@box", "other@box"]
    head = ticks.store.get(session_id)
    assert (head.status, head.version, head.step) == (Status.READY, 0, 0)


def test_a_kind_this_worker_s_imports_do_not_name_is_said_as_a_worker_s_not_a_submitter_s(
    ticks: Ticks, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal quoted submit's error ("unknown job kind 'refund'; known: repair; or give
    module:attr (...)"): what to do was a submitter's. It says what this worker lacks, and
    to start a worker that has the kind; the session is left for one."""
    session_id = _of_kind(ticks, "refund")

    with caplog.at_level("WARNING", logger="tickwork.tick"):
        assert advance(ticks.rt, session_id, 0).outcome is Outcome.DROPPED

    [line] = [r.getMessage() for r in caplog.records if r.name == "tickwork.tick"]
    assert f"session {session_id} of job kind 'refund': this worker cannot run it: " in line
    assert "TICKWORK_IMPORTS here names no kind 'refund'; this worker's kinds: " in line
    assert "start one whose TICKWORK_IMPORTS names the kind, with its package installed" in line
    assert "module:attr" not in line
    head = ticks.store.get(session_id)
    assert (head.status, head.version, head.step) == (Status.READY, 0, 0)


def test_a_session_of_a_kind_no_worker_has_fails_at_its_deadline(
    ticks: Ticks, clock: Clock
) -> None:
    """Refused at every offer, it would wait forever: its deadline needs no kind either."""
    session_id = _of_kind(ticks, "gone_from_this_host:KIND")
    assert advance(ticks.rt, session_id, 0).outcome is Outcome.DROPPED

    head = ticks.store.get(session_id)
    clock.advance((head.created_at - clock()).total_seconds() + head.budgets.deadline_s + 1)
    head = ticks.run(session_id)

    assert (head.status, head.error_code) == (Status.FAILED, ErrorCode.DEADLINE)
    assert "no worker that took its tick had its job kind 'gone_from_this_host:KIND'" in (
        head.error_message or ""
    )
    assert ticks.store.dead_letter(session_id).code == "DEADLINE"


def test_a_kind_that_imports_but_is_no_job_kind_fails_the_session(ticks: Ticks) -> None:
    session_id = _of_kind(ticks, "tests.worker.ticking:KIND")  # a str

    head = ticks.run(session_id)

    assert head.status is Status.FAILED and head.error_code is ErrorCode.INTERNAL
    assert "tests.worker.ticking:KIND is a str, not a job kind" in head.error_message
