"""A model provider from TICKWORK_IMPORTS runs a session through a real worker (SQLite)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from tickwork.fsm.errors import InvalidModelSpec
from tickwork.fsm.values import Status
from tickwork.store.migrate import upgrade

from tests.tasks.conftest import TEST_KIND, Deployment, _settings


@pytest.fixture
def canned(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    settings = _settings("embedded", tmp_path, request, imports=["tests.providers:CANNED"])
    settings.state_dir.mkdir(parents=True)
    upgrade(settings.db_url)
    d = Deployment("embedded", settings, tmp_path)
    yield d
    d.close()


def calls(outcome: str) -> float:
    labels = {"model": "canned", "outcome": outcome, "tenant": "default"}
    return REGISTRY.get_sample_value("tickwork_model_calls_total", labels) or 0.0


def test_an_imported_provider_runs_a_session_priced_and_labelled(canned: Deployment) -> None:
    before = calls("ok")
    head = canned.client.submit(
        TEST_KIND, {"sink": str(canned.sink)}, model="canned:hello", budgets={"max_cost_usd": 5}
    )
    with canned.worker():
        head = canned.client.wait(head.id, timeout=60)

    assert head.status is Status.COMPLETED, head
    assert head.final_answer == "hello"
    step = canned.client.load(head.id).steps[0]
    # 1000 prompt tokens at $10 and 100 completion tokens at $100 per million
    assert step.cost_usd == pytest.approx(0.02)
    assert calls("ok") == before + 1


def test_the_submitting_client_checks_the_spec_by_the_provider(canned: Deployment) -> None:
    with pytest.raises(InvalidModelSpec, match="one word"):
        canned.client.submit(TEST_KIND, {}, model="canned:two-words")
    with pytest.raises(InvalidModelSpec) as refused:
        canned.client.submit(TEST_KIND, {}, model="nope:x")

    assert "canned:WORD (answers WORD)" in str(refused.value)
    assert canned.client.store.list_sessions() == []
