"""Issue 27: the EXECUTE tick of an idempotent tool is started by its claim, in the claim's
transaction (one commit less a step); a tool that may not run twice keeps its own start.
A call the claim started but that did not run behaves as any started idempotent call: the
next tick runs it again (`rerun`), and a tick that fails the session first closes it as
not run, as its runner's deadline and cancel do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm import graph_machine
from tickwork.fsm.errors import BlobMissing
from tickwork.fsm.values import CallState, ErrorCode, EventKind, Status
from tickwork.worker.observers.report import Outcome
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.files import TickFiles

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


@pytest.mark.parametrize("broke", ["files unseen past the deadline", "an internal error"])
def test_a_call_the_claim_started_reads_not_run_when_a_later_tick_fails_the_session(
    ticks: Ticks, clock: Clock, monkeypatch: pytest.MonkeyPatch, broke: str
) -> None:
    """Its tick was lost before it ran; the next one ran it again but failed the session
    before it started (its files not found once the deadline had passed, or a bug): it read
    "interrupted; it may or may not have run", though it runs again from the start and no
    attempt of it was saved, as a cancel or the deadline that its runner sees say."""
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
    head = ticks.store.get(session_id)

    def fails(*_: Any, **__: Any) -> None:
        if broke == "an internal error":
            raise PermissionError("workspaces: permission denied")
        clock.advance((head.created_at - clock()).total_seconds() + head.budgets.deadline_s + 1)
        raise BlobMissing("blob abc is not in the artifact store; was it pruned?")

    monkeypatch.setattr(TickFiles, "open", fails)
    advance(ticks.rt, session_id, head.version)

    head = ticks.store.get(session_id)
    code = ErrorCode.INTERNAL if broke == "an internal error" else ErrorCode.DEADLINE
    assert (head.status, head.error_code) == (Status.FAILED, code)
    observed = ticks.store.load(session_id).observation("s1c0")
    assert observed is not None and observed.content == "not run: the session failed"


def test_a_graph_node_found_started_reads_not_run_when_a_later_tick_fails_the_session(
    ticks: Ticks, clock: Clock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The graph's runner says whether its node may run twice, as the agent's does."""
    unused = tmp_path / "none.json"
    unused.write_text("[]")
    session_id = ticks.client.submit("tests.graphs:COUNTER", {}, model=f"scripted:{unused}").id
    head = ticks.store.get(session_id)
    advance(ticks.rt, session_id, head.version)  # the first node chosen
    head = ticks.store.get(session_id)
    assert head.status is Status.EXECUTING
    lost = ticks.store.claim(
        session_id, head.version, owner="dead", now=clock(), lease_s=ticks.rt.leases.lease_s
    )
    assert lost is not None
    ticks.store.start_call(session_id, head.version, lost.calls[0], owner="dead", now=clock())
    clock.advance(ticks.rt.leases.lease_s + 1)

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(graph_machine, "start_node", broken)
    advance(ticks.rt, session_id, head.version)

    head = ticks.store.get(session_id)
    assert (head.status, head.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    observed = ticks.store.load(session_id).observation("s1c0")
    assert observed is not None and observed.content == "not run: the session failed"
