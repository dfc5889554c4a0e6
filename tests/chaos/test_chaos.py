"""The CI-sized chaos run: 20 sessions and 4 session trees, 30 seconds of SIGKILLs, Redis and
Postgres restarted.

The full run (200 sessions, 2 minutes) is `python -m ops.chaos.run`; its figures are in
ops/chaos/RESULTS.md. Both restart private servers of their own, never the shared ones.
"""

from __future__ import annotations

import pytest

from ops.chaos.harness import CI_PLAN, run
from ops.chaos.plan import CI_RABBITMQ_PLAN
from ops.chaos.services import ServiceUnavailable, find_binary
from tests.services import missing, rabbitmq_url

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_nothing_is_lost_under_kills_and_restarts(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        find_binary("initdb")
        find_binary("redis-server")
    except ServiceUnavailable as exc:
        missing("a private Postgres and Redis for the chaos run", exc)
    workdir = tmp_path_factory.mktemp("chaos")
    report = run(CI_PLAN, workdir=workdir)
    with capsys.disabled():
        print(f"\nchaos run ({workdir}):\n{report.text()}")
    assert report.ok, "broken invariants:\n" + "\n".join(
        f"{f.name}: {f.value}" for f in report.broken
    )
    figures = {f.name: f.value for f in report.figures}
    assert figures["workers killed with SIGKILL"] >= 5
    assert figures["trees: children completed"] == "12/12"  # 4 roots of 3, all and each
    assert figures["Redis restarts (seconds down)"].startswith("1 ")
    assert figures["Postgres restarts (seconds down)"].startswith("1 ")


def test_nothing_is_lost_under_kills_on_rabbitmq(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """Workers SIGKILLed mid-run with their deliveries unacknowledged on RabbitMQ (quorum
    queues), and Postgres restarted; RabbitMQ is the machine's own and is not restarted."""
    broker = rabbitmq_url()
    try:
        find_binary("initdb")
    except ServiceUnavailable as exc:
        missing("a private Postgres for the chaos run", exc)
    workdir = tmp_path_factory.mktemp("chaos-rabbitmq")
    report = run(CI_RABBITMQ_PLAN, workdir=workdir, broker_url=broker)
    with capsys.disabled():
        print(f"\nchaos run on RabbitMQ ({workdir}):\n{report.text()}")
    assert report.ok, "broken invariants:\n" + "\n".join(
        f"{f.name}: {f.value}" for f in report.broken
    )
    figures = {f.name: f.value for f in report.figures}
    assert figures["workers killed with SIGKILL"] >= 3
    assert figures["trees: children completed"] == "6/6"  # 2 roots of 3, all and each
    assert figures["broker (shared, never restarted)"].startswith("amqp://")
    assert figures["Postgres restarts (seconds down)"].startswith("1 ")
