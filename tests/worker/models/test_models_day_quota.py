"""A tenant's `max_usd_per_day` holds while its sessions run, not only at submit: a session
whose own cost budget is none (0) or huge stops when its tenant's day is spent, with a
message naming the quota and when it resets, and is dead-lettered as other exhausted
budgets are (docs/OPERATIONS.md, "Tenants and quotas"). Real ticks on SQLite and Postgres,
an OpenAI-compatible server on loopback billing at a configured price."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update
from tickwork.fsm.budgets import TenantDay
from tickwork.fsm.errors import QuotaExceeded
from tickwork.fsm.values import ErrorCode, Head, Status
from tickwork.store.schema import sessions

from .test_models_caps import PRICE, WANTS, GreedyServer, _usd
from .test_models_ticks import KIND, Ticks

QUOTA = 1.0
#: a graph of one node that calls the model
ASK = "tests.graphs:ASK"
#: a graph of one node that calls the model twice
ASK_MORE = "tests.graphs:ASK_MORE"
LOOPS_ALLOWED = {"max_consecutive_repeats": 100}


@pytest.fixture
def team_ticks(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Ticks]:
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"team-a": {"max_usd_per_day": QUOTA}}), encoding="utf-8")
    monkeypatch.setenv("TICKWORK_TENANTS_FILE", str(tenants))
    monkeypatch.setenv("TICKWORK_IMPORTS", json.dumps([KIND, ASK, ASK_MORE]))
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


@pytest.mark.parametrize("own_budget", [0, 1e9], ids=["no_cost_budget", "huge_cost_budget"])
def test_a_session_stops_when_its_tenant_s_day_is_spent(
    team_ticks: Ticks, monkeypatch: pytest.MonkeyPatch, own_budget: float
) -> None:
    server = GreedyServer(honest=True)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    try:
        head = team_ticks.client.submit(
            KIND,
            {},
            model="openai:local",
            price=PRICE,
            tenant="team-a",
            # the server calls the same tool each time: only money may stop it here
            budgets={"max_cost_usd": own_budget, **LOOPS_ALLOWED},
        )
        done = team_ticks.run(head.id)

        assert done.status is Status.FAILED and done.error_code is ErrorCode.BUDGET_COST
        message = done.error_message or ""
        assert "team-a" in message and "max_usd_per_day" in message, message
        tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
        assert f"resets at {tomorrow}T00:00:00Z" in message, message
        # the day's quota, not the session's budget, bounded it: within the last call's
        # prompt of the quota (each call's answer capped at what the day had left)
        assert QUOTA / 2 < done.cost_usd <= QUOTA + _usd(server.billed[-1][0], 0) + 1e-9
        for cap in server.caps:
            assert cap is not None and _usd(0, cap) <= QUOTA
        letter = team_ticks.store.dead_letter(head.id)
        assert letter.code == ErrorCode.BUDGET_COST.value

        # another session of the tenant is refused at submit, or, with what little the day
        # has left (the last answer was cut at a whole token, after an estimated prompt),
        # stopped at it: the tenant's day stays within the quota but for the prompts
        try:
            second = team_ticks.client.submit(
                KIND,
                {},
                model="openai:local",
                price=PRICE,
                tenant="team-a",
                budgets={"max_cost_usd": 0, **LOOPS_ALLOWED},
            )
        except QuotaExceeded as refused:
            assert refused.quota == "max_usd_per_day"
        else:
            stopped = team_ticks.run(second.id)
            assert stopped.error_code is ErrorCode.BUDGET_COST
            assert "max_usd_per_day" in (stopped.error_message or "")
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        day = team_ticks.store.day_spent("team-a", day=today)
        assert day == pytest.approx(sum(_usd(p, c) for p, c in server.billed))
        assert day <= QUOTA + _usd(sum(p for p, _ in server.billed), 0)
        calls = len(server.billed)

        # another tenant is not held by team-a's day
        other = team_ticks.client.submit(
            KIND,
            {},
            model="openai:local",
            price=PRICE,
            tenant="team-b",
            budgets={"max_cost_usd": 0.5, **LOOPS_ALLOWED},
        )
        own = team_ticks.run(other.id)
        assert own.error_code is ErrorCode.BUDGET_COST  # its own budget's
        assert "max_usd_per_day" not in (own.error_message or "")
        assert own.cost_usd > 0.4 and len(server.billed) > calls
    finally:
        server.close()


def _graph_of_team_a(ticks: Ticks, graph: str, *, others_spent: float) -> Head:
    """A session of `graph` of team-a without a cost budget of its own, and after it
    another session of the tenant that has spent `others_spent` of the day."""
    head = ticks.client.submit(
        graph,
        {"size": 1},
        model="openai:local",
        price=PRICE,
        tenant="team-a",
        budgets={"max_cost_usd": 0},
    )
    other = ticks.client.submit(KIND, {}, model="openai:local", price=PRICE, tenant="team-a")
    with ticks.store.engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(
            update(sessions).where(sessions.c.id == other.id).values(cost_usd=others_spent)
        )
    return head


def test_a_graph_session_stops_before_its_node_once_its_tenant_s_day_is_spent(
    team_ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = GreedyServer(honest=True)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    try:
        # another session of the tenant's day spends it all after this one was submitted
        graph = _graph_of_team_a(team_ticks, ASK, others_spent=QUOTA)

        done = team_ticks.run(graph.id)

        assert done.status is Status.FAILED and done.error_code is ErrorCode.BUDGET_COST
        assert "tenant team-a's quota `max_usd_per_day` of $1 is spent" in (
            done.error_message or ""
        )
        assert server.billed == []  # its node never called the model
        assert team_ticks.store.dead_letter(graph.id).code == ErrorCode.BUDGET_COST.value
    finally:
        server.close()


def test_a_graph_node_reads_its_tenant_s_day_once_and_caps_each_call_by_what_it_left(
    team_ticks: Ticks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's model calls are capped by what its tenant's day has left, the node's earlier
    calls counted; the day (a database read) was read before each of them and once more for
    the node's run: it is read once a tick, however many calls its node makes."""
    server = GreedyServer(honest=True)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    read: list[int] = []  # the version of the session each read was for: one a tick
    tenant_day = team_ticks.rt.tenant_day

    def counted(head: Head) -> TenantDay | None:
        read.append(head.version)
        return tenant_day(head)

    monkeypatch.setattr(team_ticks.rt, "tenant_day", counted)
    try:
        # another session of the tenant spent half its day
        graph = _graph_of_team_a(team_ticks, ASK_MORE, others_spent=QUOTA / 2)

        done = team_ticks.run(graph.id)

        first, second = server.billed
        assert done.cost_usd == pytest.approx(_usd(*first) + _usd(*second))
        # the first call had half the day, and wrote all it wanted; the second what the
        # first left of it
        assert server.caps[0] is not None and _usd(*first) < QUOTA / 2
        assert second[1] == server.caps[1] < WANTS
        assert 0 < _usd(0, second[1]) <= QUOTA / 2 - _usd(*first)
        assert len(read) == len(set(read)) >= 2, read
    finally:
        server.close()
