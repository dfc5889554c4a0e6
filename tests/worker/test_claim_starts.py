"""Issue 27: the EXECUTE tick of an idempotent tool is started by its claim, in the claim's
transaction (one commit less a step); a tool that may not run twice keeps its own start.
A call the claim started but that did not run behaves as any started idempotent call: the
next tick runs it again (`rerun`)."""

from __future__ import annotations

from typing import Any

import pytest
from tickwork.fsm.values import CallState, EventKind, Status
from tickwork.worker.observers.report import Outcome
from tickwork.worker.tick.advance import advance

from tests.conftest import Clock
from tests.worker.ticking import Ticks


def _one_call(name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"content": "act", "tool_calls": [{"name": name, "arguments": arguments}]},
        {"content": "done"},
    ]


def _started(ticks: Ticks, session_id: str) -> list[dict[str, Any]]:
    events = ticks.store.events_after(session_id)
    return [e.data for _, e in events if e.kind is EventKind.TOOL_STARTED]


def _think(ticks: Ticks, session_id: str) -> int:
    """The THINK tick; the version the EXECUTE tick claims."""
    advance(ticks.rt, session_id, ticks.store.get(session_id).version)
    head = ticks.store.get(session_id)
    assert head.status is Status.EXECUTING
    return head.version


def test_only_the_call_of_a_tool_that_may_not_run_twice_is_started_apart(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = ticks.submit(
        [
            {
                "content": "act",
                "tool_calls": [
                    {"name": "echo", "arguments": {"text": "hi"}},
                    {"name": "effect", "arguments": {"value": "once"}},
                ],
            },
            {"content": "done"},
        ]
    )
    apart: list[str] = []
    start_call = ticks.store.start_call

    def counted(*args: Any, **kwargs: Any) -> None:
        apart.append(args[2].call_id)
        start_call(*args, **kwargs)

    monkeypatch.setattr(ticks.store, "start_call", counted)

    assert ticks.run(session_id).status is Status.COMPLETED

    assert apart == ["s1c1"]
    assert _started(ticks, session_id) == [
        {"call_id": "s1c0", "name": "echo", "rerun": False},
        {"call_id": "s1c1", "name": "effect", "rerun": False},
    ]
    session = ticks.store.load(session_id)
    assert [session.observation(c).content for c in ("s1c0", "s1c1")] == ["hi", "did once"]  # type: ignore[union-attr]


def test_a_call_the_claim_started_whose_arguments_are_refused_gets_the_error(
    ticks: Ticks,
) -> None:
    session_id = ticks.submit(_one_call("echo", {"words": "hi"}))

    assert ticks.run(session_id).status is Status.COMPLETED

    session = ticks.store.load(session_id)
    observed = session.observation("s1c0")
    assert observed is not None and observed.is_error and "text" in observed.content
    assert session.call("s1c0").state is CallState.DONE  # type: ignore[union-attr]
    assert [d["rerun"] for d in _started(ticks, session_id)] == [False]


def test_a_call_the_claim_started_and_its_worker_left_runs_again(
    ticks: Ticks, clock: Clock
) -> None:
    session_id = ticks.submit(_one_call("idem_effect", {"value": "x"}))
    version = _think(ticks, session_id)
    dead = ticks.store.claim(
        session_id,
        version,
        owner="dead",
        now=clock(),
        lease_s=ticks.rt.leases.lease_s,
        idempotent=ticks.rt.jobs.idempotent,
    )
    assert dead is not None and dead.started == "s1c0"

    clock.advance(ticks.rt.leases.lease_s + 1)
    assert ticks.run(session_id).status is Status.COMPLETED

    assert [d["rerun"] for d in _started(ticks, session_id)] == [False, True]
    assert ticks.store.load(session_id).observation("s1c0").content == "stored x"  # type: ignore[union-attr]


def test_a_call_the_claim_started_does_not_run_once_the_lease_is_lost(
    ticks: Ticks, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = ticks.submit(_one_call("idem_effect", {"value": "x"}))
    version = _think(ticks, session_id)
    monkeypatch.setattr(ticks.rt.leases, "lost", lambda *_: "taken over")

    report = advance(ticks.rt, session_id, version)

    assert report.outcome is Outcome.LOST
    session = ticks.store.load(session_id)
    assert session.call("s1c0").state is CallState.STARTED  # type: ignore[union-attr]
    assert session.observation("s1c0") is None
    monkeypatch.undo()
    clock.advance(ticks.rt.leases.lease_s + 1)
    assert ticks.run(session_id).status is Status.COMPLETED
    assert [d["rerun"] for d in _started(ticks, session_id)] == [False, True]
