"""Prometheus metrics: the API's /metrics (its own, the workers' and the store's) and a
worker's own /metrics server, in multiprocess mode."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine
from tickwork.fsm.values import Status
from tickwork.store import open_store
from tickwork.worker.config.settings import Settings
from tickwork.worker.observers.metrics import StoreCollector

from tests.api.conftest import TOKENS, Server, Stack, until
from tests.api.test_dead_letters import BROKEN
from tests.api.test_sessions import ECHO
from tests.ports import free_port
from tests.tasks.conftest import TEST_KIND, Deployment, stop
from tickwork.api import ApiSettings, make_api


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The samples of `name` with these labels, added up over any others (as a dashboard's
    `sum by` the labels it knows: the per-session families gained `tenant`)."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in found.items() if n == name and wanted <= set(got))


def test_the_api_exposes_ticks_usage_store_gauges_and_requests(stack: Stack) -> None:
    done = stack.submit(ECHO)
    stack.wait(done, Status.COMPLETED)
    broken = stack.submit(BROKEN)
    stack.wait(broken, Status.FAILED)
    waiting = stack.waiting()
    answer = stack.http().get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    found = samples(answer.text)
    assert value(found, "tickwork_store_up") == 1
    assert value(found, "tickwork_sessions", status="completed") >= 1
    assert value(found, "tickwork_sessions", status="waiting_approval") >= 1
    assert value(found, "tickwork_approvals_waiting") >= 1
    assert value(found, "tickwork_approval_oldest_wait_seconds") > 0
    assert value(found, "tickwork_dead_letters", code="MODEL_ERROR", resolved="false") >= 1
    assert value(found, "tickwork_ticks_total", phase="think", outcome="saved") >= 2
    assert value(found, "tickwork_ticks_total", phase="execute", outcome="saved") >= 1
    assert value(found, "tickwork_tick_duration_seconds_count", phase="think", outcome="saved") >= 2
    assert value(found, "tickwork_model_tokens_total", model="scripted", type="prompt") > 0
    assert value(found, "tickwork_model_calls_total", model="scripted", outcome="failed") >= 1
    assert value(found, "tickwork_approvals_requested_total") >= 1
    assert value(found, "tickwork_relay_passes_total") >= 1
    assert (
        value(
            found,
            "tickwork_api_requests_total",
            method="POST",
            route="/api/v1/sessions",
            status="201",
        )
        >= 3
    )
    assert ("tickwork_outbox_rows", ()) in found
    assert ("tickwork_runnable_stalest_seconds", ()) in found
    # a decision through the API is counted with its wait
    fingerprint = stack.fingerprint(waiting)
    stack.http("alice").post(
        f"/api/v1/sessions/{waiting}/calls/s1c0/decision",
        json={"kind": "approve", "fingerprint": fingerprint},
    )
    after = samples(stack.http().get("/metrics").text)
    assert value(after, "tickwork_decisions_total", kind="approve") >= 1
    assert value(after, "tickwork_approval_decision_wait_seconds_count") >= 1


def test_a_store_that_does_not_answer_is_reported_not_raised() -> None:
    engine = create_engine("sqlite:////nonexistent/dir/x.db")
    families = {f.name: f for f in StoreCollector(open_store(engine)).collect()}
    assert families["tickwork_store_up"].samples[0].value == 0
    engine.dispose()


@pytest.mark.slow
def test_a_worker_serves_its_metrics_and_the_api_adds_up_every_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tickwork.store.migrate import upgrade

    settings = Settings(
        state_dir=tmp_path / "state",
        queue=f"metrics.{uuid.uuid4().hex[:8]}",
        imports=[TEST_KIND],
        relay_period_s=0.25,
        relay_after_s=1.5,
    )
    settings.state_dir.mkdir()
    upgrade(settings.db_url)
    folder = tmp_path / "prometheus"
    folder.mkdir()
    port = free_port()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    monkeypatch.setenv("TICKWORK_METRICS_PORT", str(port))
    monkeypatch.setenv("TICKWORK_METRICS_ADDR", "127.0.0.1")
    deployment = Deployment("embedded", settings, tmp_path)
    worker = deployment.spawn()
    try:
        url = f"http://127.0.0.1:{port}/metrics"

        def serving() -> bool:
            try:
                return httpx.get(url, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        until(serving, timeout=60, what="the worker's /metrics")
        session_id = deployment.submit(ECHO)
        assert deployment.client.wait(session_id, timeout=60).status is Status.COMPLETED
        # a tick is counted once its save is committed: the session's end may be read
        # before its last tick is counted
        from_worker = until(
            lambda: (
                (got := samples(httpx.get(url, timeout=5).text))
                and value(got, "tickwork_ticks_total", phase="think", outcome="saved") >= 2
                and got
            ),
            timeout=30,
            what="the last tick counted",
        )
        assert value(from_worker, "tickwork_ticks_total", phase="think", outcome="saved") == 2
        assert value(from_worker, "tickwork_ticks_total", phase="execute", outcome="saved") == 1
        # the relay runs every 0.25 s from the worker's start; the session may finish sooner
        until(
            lambda: (
                value(samples(httpx.get(url, timeout=5).text), "tickwork_relay_passes_total") >= 1
            ),
            timeout=30,
            what="a relay pass counted",
        )
        api = make_api(
            settings,
            ApiSettings(api_tokens=TOKENS),  # type: ignore[arg-type]
            multiproc_dir=str(folder),
        )
        with Server(api) as server:
            from_api = samples(httpx.get(f"{server.url}/metrics", timeout=10).text)
        assert value(from_api, "tickwork_ticks_total", phase="think", outcome="saved") == 2
        assert value(from_api, "tickwork_sessions", status="completed") == 1
    finally:
        stop(worker)
        deployment.close()


def test_made_up_methods_add_no_series(stack: Stack) -> None:
    def series() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
        text = stack.http().get("/metrics").text
        assert "BREW" not in text
        return {k for k in samples(text) if k[0].startswith("tickwork_api_request")}

    def made_up(rounds: int) -> None:
        for _ in range(rounds):
            for path in ("/api/v1/sessions", "/healthz", "/nowhere"):
                stack.http().request(f"BREW{uuid.uuid4().hex[:6].upper()}", path)

    made_up(1)
    first = series()
    made_up(10)
    assert series() == first  # ten more made-up methods: not one new series
    methods = {dict(labels).get("method") for _, labels in first} - {None}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "OTHER"}
    assert "OTHER" in methods


def test_the_schema_and_the_page_files_are_counted_by_their_route(stack: Stack) -> None:
    """`unmatched` is a request no route took (a mistyped URL, a scan), not the OpenAPI
    schema or the page's files: those are counted under their path, a folder's once."""
    client = stack.http()

    def counts() -> dict[tuple[str, str], float]:
        found = samples(client.get("/metrics").text)
        return {
            (dict(labels)["route"], dict(labels)["status"]): v
            for (name, labels), v in found.items()
            if name == "tickwork_api_requests_total" and dict(labels)["method"] == "GET"
        }

    before = counts()
    assert client.get("/api/v1/openapi.json").status_code == 200
    for name in ("app.js", "app.css", "favicon.svg"):
        assert client.get(f"/static/{name}").status_code == 200
    assert client.get("/static/nothing-here.js").status_code == 404
    assert client.get("/nowhere").status_code == 404
    after = counts()

    def more(route: str, status: str) -> float:
        return after.get((route, status), 0) - before.get((route, status), 0)

    assert more("/api/v1/openapi.json", "200") == 1
    assert more("/static", "200") == 3
    assert more("/static", "404") == 1
    assert more("unmatched", "404") == 1
    assert more("unmatched", "200") == 0
