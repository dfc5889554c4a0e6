"""The tick's report and its observers: what `advance` returns and who hears of it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tickwork.fsm.values import Status
from tickwork.worker.observers.report import Observers, Outcome, Phase, TickReport
from tickwork.worker.observers.tracing import available
from tickwork.worker.tick.advance import advance

from tests.test_layers import ROOT, imports
from tests.worker.ticking import DANGER, KIND, Ticks


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def test_each_tick_reports_its_phase_outcome_model_call_and_tool_call(ticks: Ticks) -> None:
    heard: list[TickReport] = []
    ticks.rt.observers.add(heard.append)
    replies = [
        {"content": "look", "tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]},
        {"content": "done"},
    ]
    session_id = ticks.submit(replies)
    assert ticks.run(session_id).status is Status.COMPLETED
    assert heard == ticks.reports  # what advance returns is what the observers got
    think, execute, last = heard
    assert (think.phase, think.outcome, think.version) == (Phase.THINK, Outcome.SAVED, 0)
    assert think.model is not None and think.model.outcome == "ok"
    assert think.model.usage.prompt_tokens > 0 and think.model.spec.startswith("scripted:")
    assert think.model.started_ns <= think.model.ended_ns
    assert think.started_ns <= think.model.started_ns and think.model.ended_ns <= think.ended_ns
    assert think.tool is None and think.status is Status.EXECUTING and think.waiting == ()
    assert (execute.phase, execute.version, execute.model) == (Phase.EXECUTE, 1, None)
    assert execute.tool is not None
    assert (execute.tool.call_id, execute.tool.name) == ("s1c0", "echo")
    assert execute.tool.arguments == {"text": "hi"} and not execute.tool.is_error
    assert last.status is Status.COMPLETED and last.head is not None
    for report in heard:
        assert report.claim_s > 0 and report.save_s > 0 and report.seconds > 0
        assert report.change is not None and report.claimed is not None


def test_a_tick_that_requests_approval_names_the_waiting_calls(ticks: Ticks) -> None:
    session_id = ticks.submit(DANGER)
    assert ticks.run(session_id).status is Status.WAITING_APPROVAL
    assert ticks.reports[-1].waiting == ("s1c0",)
    assert all(r.waiting == () for r in ticks.reports[:-1])


def test_a_duplicate_tick_is_reported_dropped_with_no_phase(ticks: Ticks) -> None:
    session_id = ticks.submit([{"content": "done"}])
    ticks.run(session_id)
    report = advance(ticks.rt, session_id, 0)
    assert (report.outcome, report.phase, report.claimed, report.change) == (
        Outcome.DROPPED,
        Phase.NONE,
        None,
        None,
    )


def test_an_observer_that_raises_breaks_neither_the_tick_nor_the_others(
    ticks: Ticks, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[str] = []

    def broken(report: TickReport) -> None:
        raise RuntimeError("observer bug")

    ticks.rt.observers.add(broken)
    ticks.rt.observers.add(lambda r: heard.append(r.outcome.value))
    session_id = ticks.submit([{"content": "done"}])
    with caplog.at_level(logging.ERROR, logger="tickwork.observers"):
        assert ticks.run(session_id).status is Status.COMPLETED
    assert heard == ["saved"]
    assert any("observer" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_tick_that_raises_is_reported_as_an_error_and_raises_on(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: list[TickReport] = []
    ticks.rt.observers.add(heard.append)
    session_id = ticks.submit([{"content": "done"}])

    def away(*_: object, **__: object) -> None:
        raise ConnectionError("database away")

    monkeypatch.setattr(ticks.store, "claim", away)
    with pytest.raises(ConnectionError):
        advance(ticks.rt, session_id, 0)
    assert [(r.outcome, r.error) for r in heard] == [(Outcome.ERROR, "ConnectionError")]


def test_observers_are_called_in_order_and_can_be_removed() -> None:
    heard: list[int] = []
    hooks = Observers()
    first = hooks.add(lambda r: heard.append(1))
    hooks.add(lambda r: heard.append(2))
    report = TickReport("s", 0, Phase.NONE, Outcome.DROPPED, started_ns=0, ended_ns=1)
    hooks.notify(report)
    hooks.remove(first)
    hooks.notify(report)
    assert heard == [1, 2, 2]


def test_the_tick_imports_none_of_its_observers() -> None:
    tick = ("advance.py", "frame.py", "agent.py", "graphs.py", "files.py")
    found = {t for name in tick for _, t in imports(ROOT / "worker" / "tick" / name)}
    assert not found & {
        "tickwork.worker.observers.metrics",
        "tickwork.worker.observers.webhooks",
        "tickwork.worker.tick.dispatcher",
        "tickwork.worker.observers.tracing",
    }
    assert "tickwork.worker.observers.report" in found


def test_install_registers_metrics_and_what_the_settings_turn_on(
    ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tickwork.worker.observers.metrics import TickMetrics
    from tickwork.worker.tick.admission import Admitter
    from tickwork.worker.tick.dispatcher import Dispatcher
    from tickwork.worker.tick.wiring import install

    for name in ("TICKWORK_WEBHOOK_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "TICKWORK_OTEL_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    bare = ticks.runtime()
    install(bare)
    assert len(bare.observers) == 2 and bare.background == []
    monkeypatch.setenv("TICKWORK_WEBHOOK_URL", "http://127.0.0.1:9/hook")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    full = ticks.runtime()
    install(full)
    kinds = [type(h).__name__ for h in full.observers._hooks]
    try:
        assert kinds[:3] == [TickMetrics.__name__, Admitter.__name__, Dispatcher.__name__]
        assert kinds[3:] == (["SessionTracer"] if available() else [])
    finally:
        for background in full.background:
            background.stop()


def test_without_the_otel_extra_tickwork_runs_and_config_says_tracing_is_off(
    tmp_path: Path,
) -> None:
    hidden = (
        "import sys, runpy; "
        "sys.modules['opentelemetry.sdk'] = sys.modules['opentelemetry.exporter'] = None; "
        "sys.argv = ['tickwork', 'config', '--json']; "
        "runpy.run_module('tickwork', run_name='__main__')"
    )
    env = {
        **os.environ,
        "TICKWORK_STATE_DIR": str(tmp_path / "state"),
        "TICKWORK_OTEL_ENABLED": "true",
    }
    done = subprocess.run(
        [sys.executable, "-c", hidden], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tracing"].startswith("off (the otel extra is not installed")


def _report(tenant: str, status: Status = Status.COMPLETED) -> TickReport:
    from datetime import UTC, datetime

    from tickwork.fsm.values import Head

    at = datetime(2026, 1, 1, tzinfo=UTC)
    head = Head(
        id=f"s-{tenant}", kind="agent", created_at=at, updated_at=at, model="m", tenant=tenant
    )
    report = TickReport(session_id=head.id, version=0, phase=Phase.THINK, claimed=head)
    return report.close(Outcome.SAVED)


def test_per_session_counters_carry_each_tenants_label_and_stay_bounded() -> None:
    from prometheus_client import REGISTRY
    from tickwork.worker.models import Providers
    from tickwork.worker.observers.metrics import TenantLabels, TickMetrics

    def ticks(tenant: str) -> float:
        labels = {"phase": "think", "outcome": "saved", "tenant": tenant}
        return REGISTRY.get_sample_value("tickwork_ticks_total", labels) or 0.0

    def tenants_seen() -> set[str]:
        family = next(f for f in REGISTRY.collect() if f.name == "tickwork_ticks")
        return {s.labels["tenant"] for s in family.samples}

    listed = frozenset({"obs-acme"})
    observe = TickMetrics(Providers(), TenantLabels(lambda: listed, cap=2))
    before = {t: ticks(t) for t in ("obs-acme", "obs-beta", "other")}
    observe(_report("obs-acme"))
    observe(_report("obs-acme"))
    observe(_report("obs-beta"))
    assert ticks("obs-acme") - before["obs-acme"] == 2
    assert ticks("obs-beta") - before["obs-beta"] == 1

    # a flood of tenants the file does not name: one more by name (cap 2 with obs-beta),
    # then all `other`; a listed tenant keeps its own label whatever came first
    flood = [f"obs-flood-{i:03d}" for i in range(50)]
    for tenant in flood:
        observe(_report(tenant))
    observe(_report("obs-acme"))
    named = tenants_seen() & {*flood, "obs-beta"}
    assert len(named) == 2 and "obs-beta" in named
    assert ticks("other") - before["other"] == 49
    assert ticks("obs-acme") - before["obs-acme"] == 3
    # the label a tenant got first stays (a counter's series keeps its name)
    first = next(iter(named - {"obs-beta"}))
    observe(_report(first))
    assert ticks(first) == 2


def test_model_counters_are_labelled_by_the_priced_spec_and_stay_bounded() -> None:
    """A model server chooses the name in its reply: one answering with a new name each
    time must not make a new series each time, nor move the cost off the spec it is billed
    as. Past the cap, new models count as `other`."""
    from prometheus_client import REGISTRY
    from tickwork.fsm.values import Usage
    from tickwork.worker.models import Providers
    from tickwork.worker.observers.metrics import ModelLabels, TickMetrics
    from tickwork.worker.observers.report import ModelCall

    def calls(model: str) -> float:
        labels = {"model": model, "outcome": "ok", "tenant": "obs-models"}
        return REGISTRY.get_sample_value("tickwork_model_calls_total", labels) or 0.0

    def models_seen() -> set[str]:
        family = next(f for f in REGISTRY.collect() if f.name == "tickwork_model_calls")
        return {s.labels["model"] for s in family.samples if s.labels["tenant"] == "obs-models"}

    observe = TickMetrics(Providers())
    observe.models = ModelLabels(Providers(), cap=2)

    def tick(spec: str, answered: str) -> None:
        report = _report("obs-models")
        report.model = ModelCall(
            spec=spec,
            started_ns=0,
            ended_ns=1,
            outcome="ok",
            usage=Usage(prompt_tokens=1, completion_tokens=1),
            response_model=answered,
        )
        observe(report)

    for i in range(20):
        tick("openai:obs-priced", f"obs-served-{i}")
    assert calls("openai:obs-priced") == 20
    assert models_seen() == {"openai:obs-priced"}

    tick("openai:obs-second", "x")
    for i in range(5):
        tick(f"openai:obs-flood-{i}", "x")
    tick("openai:obs-priced", "x")
    assert models_seen() == {"openai:obs-priced", "openai:obs-second", "other"}
    assert calls("other") == 5
    assert calls("openai:obs-priced") == 21


def test_a_tick_dropped_before_its_claim_counts_under_tenant_none() -> None:
    from prometheus_client import REGISTRY
    from tickwork.worker.models import Providers
    from tickwork.worker.observers.metrics import TickMetrics

    labels = {"phase": "none", "outcome": "dropped", "tenant": "none"}
    before = REGISTRY.get_sample_value("tickwork_ticks_total", labels) or 0.0
    TickMetrics(Providers())(TickReport(session_id="gone", version=3).close(Outcome.DROPPED))
    assert REGISTRY.get_sample_value("tickwork_ticks_total", labels) == before + 1


def test_an_end_admits_at_once_only_what_it_freed_room_for(
    database_url: str, tmp_path: Path
) -> None:
    """A keyless end of a tenant without a limit frees no room a queued session waits for:
    the Admitter asks the store nothing; an end of a key admits the key's next at once."""
    from sqlalchemy import event
    from tickwork.worker.tick.admission import Admitter

    ticks = Ticks(database_url, tmp_path)
    try:
        admitter = ticks.rt.observers.add(Admitter(ticks.rt))
        script = tmp_path / "done.json"
        script.write_text(json.dumps([{"content": "done"}]))

        def submit(key: str | None) -> str:
            return ticks.client.submit(KIND, {}, model=f"scripted:{script}", concurrency_key=key).id

        plain, first, second = submit(None), submit("repo"), submit("repo")
        assert ticks.store.get(second).status is Status.QUEUED
        asked: list[str] = []

        def count(*args: object) -> None:
            asked.append(str(args[2]))

        ticks.run(plain)
        ended = ticks.reports[-1]
        event.listen(ticks.store.engine, "before_cursor_execute", count)
        try:
            admitter(ended)
        finally:
            event.remove(ticks.store.engine, "before_cursor_execute", count)
        assert ended.status is Status.COMPLETED and asked == []
        assert ticks.store.get(second).status is Status.QUEUED

        ticks.run(first)
        assert ticks.store.get(second).status is Status.READY
    finally:
        ticks.close()
