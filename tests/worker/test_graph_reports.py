"""A graph session's ticks tell the observers what an agent's do: the node run as the tick's
tool call, the node's model calls as its model call; metrics and traces count them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tickwork.fsm.errors import ClaimLost, StoreUnavailable
from tickwork.fsm.values import Status
from tickwork.worker.observers.metrics import MODEL_CALLS, MODEL_TOKENS, TickMetrics
from tickwork.worker.observers.report import Outcome, Phase, TickReport
from tickwork.worker.tick.advance import advance

from tests.worker.ticking import Ticks

REFUND = "tests.graphs:REFUND"
#: the note the draft node's model call writes
NOTE = [
    {
        "content": "Sorry about that; your refund is on its way.",
        "usage": {"prompt_tokens": 40, "completion_tokens": 12},
    }
]


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def refund_over_the_limit(ticks: Ticks, tmp_path: Path) -> str:
    """A refund the checks refuse: draft (a model call), check, report, END; no person."""
    script = tmp_path / "note.json"
    script.write_text(json.dumps(NOTE))
    head = ticks.client.submit(
        REFUND,
        {"order_id": "A-1", "amount": 900, "ledger": str(tmp_path / "ledger.jsonl")},
        model=f"scripted:{script}",
    )
    return head.id


def by_node(reports: list[TickReport]) -> dict[str, TickReport]:
    return {r.tool.name: r for r in reports if r.tool is not None}


def test_a_node_tick_reports_its_node_and_its_model_calls(ticks: Ticks, tmp_path: Path) -> None:
    session_id = refund_over_the_limit(ticks, tmp_path)
    assert ticks.run(session_id).status is Status.COMPLETED
    assert {r.phase for r in ticks.reports} == {Phase.NODE}
    nodes = by_node(ticks.reports)
    assert list(nodes) == ["draft", "check", "report"]

    draft = nodes["draft"]
    assert draft.tool is not None and not draft.tool.is_error
    assert draft.tool.call_id == "s1c0"
    assert draft.tool.arguments["order_id"] == "A-1"  # the state the node ran on
    assert draft.tool.started_ns <= draft.tool.ended_ns
    assert draft.model is not None
    assert (draft.model.outcome, draft.model.calls) == ("ok", 1)
    assert draft.model.spec.startswith("scripted:") and draft.model.usage.prompt_tokens > 0
    assert draft.started_ns <= draft.model.started_ns <= draft.model.ended_ns <= draft.ended_ns
    # the same use as the node's step is charged with
    session = ticks.client.load(session_id)
    assert session.steps[0].usage == draft.model.usage

    # a node that calls no model reports none; the tick that chose the first node ran none
    assert nodes["check"].model is None and nodes["report"].model is None
    assert ticks.reports[0].tool is None and ticks.reports[0].model is None


def test_a_node_that_raises_is_reported_as_a_failed_call(ticks: Ticks, tmp_path: Path) -> None:
    script = tmp_path / "broken.json"
    script.write_text(json.dumps([{"error": {"transient": False, "message": "401 no key"}}]))
    head = ticks.client.submit(
        REFUND,
        {"order_id": "A-2", "amount": 10, "ledger": str(tmp_path / "ledger.jsonl")},
        model=f"scripted:{script}",
    )
    assert ticks.run(head.id).status is Status.FAILED
    draft = by_node(ticks.reports)["draft"]
    assert draft.tool is not None and draft.tool.is_error
    assert draft.model is not None and draft.model.outcome == "failed" and draft.model.error


def test_the_metrics_count_a_nodes_model_calls_and_no_others(ticks: Ticks, tmp_path: Path) -> None:
    ticks.rt.observers.add(TickMetrics(ticks.rt.providers))
    session_id = refund_over_the_limit(ticks, tmp_path)
    label = ticks.rt.providers.label(ticks.client.get(session_id).model)

    def calls() -> float:
        return MODEL_CALLS.labels(label, "ok", "default")._value.get()

    def prompt_tokens() -> float:
        return MODEL_TOKENS.labels(label, "prompt", "default")._value.get()

    before = calls(), prompt_tokens()
    assert ticks.run(session_id).status is Status.COMPLETED
    # four ticks, one model call (draft's): no tick is counted as a call it did not make
    assert calls() - before[0] == 1
    assert prompt_tokens() - before[1] == 40


def test_a_node_tick_is_traced_with_its_chat_and_its_node(ticks: Ticks, tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from tickwork.worker.observers.tracing import SessionTracer

    exporter = InMemorySpanExporter()
    ticks.rt.observers.add(
        SessionTracer(
            exporter,
            masker=ticks.rt.masker,
            heads=ticks.store.get,
            capture_content=False,
            batch=False,
        )
    )
    session_id = refund_over_the_limit(ticks, tmp_path)
    assert ticks.run(session_id).status is Status.COMPLETED
    names = [s.name for s in exporter.get_finished_spans()]
    assert names.count("tick node") == 4
    assert sum(n.startswith("chat ") for n in names) == 1
    assert {"execute_tool draft", "execute_tool check", "execute_tool report"} <= set(names)


@pytest.mark.parametrize("error", [StoreUnavailable("the database went away"), ClaimLost("taken")])
def test_a_store_failure_around_a_node_leaves_the_tick_to_run_again(
    ticks: Ticks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """The frame's own store calls (the start of the node's call) failing is not the node
    failing: nothing is saved and nothing dead-lettered, so when the lease runs out the
    relay runs the tick again."""
    session_id = refund_over_the_limit(ticks, tmp_path)
    first = ticks.store.get(session_id)
    advance(ticks.rt, session_id, first.version)  # chooses the first node
    head = ticks.store.get(session_id)

    def refused(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(ticks.rt.store, "start_call", refused)
    if isinstance(error, ClaimLost):
        assert advance(ticks.rt, session_id, head.version).outcome is Outcome.LOST
    else:
        with pytest.raises(StoreUnavailable):
            advance(ticks.rt, session_id, head.version)
    after = ticks.store.get(session_id)
    assert after.status is head.status and after.version == head.version
    assert ticks.store.dead_letters() == []
