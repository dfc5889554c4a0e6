"""The graph job kind without a worker: its input is its first state, edits and hand-given
updates are checked against the schema, a session of another version is refused clearly,
and a cancel still ends it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tickwork.fsm import graph_machine
from tickwork.fsm.budgets import TenantDay
from tickwork.fsm.errors import GraphVersionMismatch, InvalidInput
from tickwork.fsm.values import ErrorCode, Head, Status
from tickwork.worker.jobs import Jobs
from tickwork.worker.tick.graphs import check_version, node_key

from tests.graphs import REFUND, REFUND_V2
from tickwork.cli_sessions import version_note

NOW = datetime(2026, 1, 1, tzinfo=UTC)
FIRST = {"order_id": "A-1", "amount": 10, "ledger": "/tmp/x"}


def head(kind: object = REFUND, **fields: object) -> Head:
    config = REFUND.prepare(FIRST)
    base = dict(
        id="r1", kind="refund", created_at=NOW, updated_at=NOW, model="scripted:x", config=config
    )
    return Head(**{**base, **fields})  # type: ignore[arg-type]


def test_the_input_is_the_first_state_checked_against_the_schema() -> None:
    config = REFUND.prepare(FIRST)
    assert config["graph"] == {"name": "refund", "version": "1"}
    assert config["initial_state"]["amount"] == 10.0 and config["initial_state"]["note"] == ""
    assert REFUND.prepare({"state": FIRST})["initial_state"] == config["initial_state"]
    with pytest.raises(InvalidInput, match="colour not in the state of graph 'refund'"):
        REFUND.prepare({**FIRST, "colour": "red"})
    with pytest.raises(InvalidInput, match="amount: Input should be a valid number"):
        REFUND.prepare({**FIRST, "amount": "lots"})
    with pytest.raises(InvalidInput, match="order_id: Field required"):
        REFUND.prepare({"amount": 1, "ledger": "x"})


def test_edits_and_hand_given_updates_are_checked() -> None:
    h = head()
    assert REFUND.validate_patch(h, {"amount": 5}, by="the edit") == {"amount": 5}
    with pytest.raises(InvalidInput, match="the edit of graph 'refund' gives size"):
        REFUND.validate_patch(h, {"size": 5}, by="the edit")
    REFUND.validate_output(h, "refund", '{"payment_id": "p-1"}')
    with pytest.raises(InvalidInput, match="is not a JSON object"):
        REFUND.validate_output(h, "refund", "[1]")
    # nested deeper than the parser goes: refused as JSON that does not parse (the API's
    # 422), not a RecursionError (its 500)
    with pytest.raises(InvalidInput, match="is not JSON"):
        REFUND.validate_output(h, "refund", "[" * 100_000 + "]" * 100_000)


def test_a_session_of_another_version_is_refused_naming_both() -> None:
    h = head()
    assert check_version(REFUND, h) is REFUND.graph
    with pytest.raises(GraphVersionMismatch) as refused:
        check_version(REFUND_V2, h)
    assert str(refused.value).startswith(
        "session r1 runs graph 'refund' version '1'; this worker has 'refund' version '2'"
    )


def test_a_cancel_ends_a_graph_session_at_its_next_tick() -> None:
    assert REFUND.graph is not None
    cancelled = graph_machine.start(head(cancel_requested=True), REFUND.graph, now=NOW)
    assert cancelled.head.status is Status.CANCELLED and cancelled.step is None
    running = graph_machine.start(head(), REFUND.graph, now=NOW)
    assert running.step is not None
    stopped = graph_machine.start_node(
        running.head.model_copy(update={"cancel_requested": True}),
        running.step.calls,
        {},
        idempotent=True,
        now=NOW,
    )
    assert not isinstance(stopped, (graph_machine.RunNode, graph_machine.Decided))
    assert stopped.head.status is Status.CANCELLED
    assert stopped.observations[0].content == "not run: session cancelled"


def test_the_idempotency_key_names_the_session_step_and_node() -> None:
    assert node_key("s", 3, "refund") == "s:3:refund"


def test_a_graph_session_stops_before_its_next_node_once_its_tenant_s_day_is_spent() -> None:
    """The tenant's max_usd_per_day is checked with the budgets before each next node, as
    before each THINK of an agent (the session's own cost budget is none)."""
    h = head(budgets={"max_cost_usd": 0})
    day = TenantDay(tenant="default", quota_usd=1.0, spent_usd=1.0, day=NOW)

    stopped = graph_machine.start(h, REFUND.graph, now=NOW, day=day)

    assert stopped.head.status is Status.FAILED
    assert stopped.head.error_code is ErrorCode.BUDGET_COST
    assert "tenant default's quota `max_usd_per_day` of $1 is spent" in (
        stopped.head.error_message or ""
    )
    room = day.model_copy(update={"spent_usd": 0.5})
    assert graph_machine.start(h, REFUND.graph, now=NOW, day=room).head.status is not Status.FAILED


def test_show_says_why_a_session_of_another_graph_version_does_not_move() -> None:
    """A version 1 session approved while only version 2 workers ran read `executing` in
    `show`, a lease held and nothing else: the refusal was in the worker's log alone."""
    waiting = head(status=Status.READY)
    said = version_note(Jobs(["tests.graphs:REFUND_V2"]), waiting)
    assert said is not None and said.startswith(
        "session r1 runs graph 'refund' version '1'; this process has version '2'."
    ), said
    assert "`tickwork runbook graph version`" in said
    assert version_note(Jobs(["tests.graphs:REFUND"]), waiting) is None  # same version
    assert version_note(Jobs(["tests.graphs:REFUND_V2"]), head(status=Status.COMPLETED)) is None
    assert version_note(Jobs([]), waiting) is None  # a kind this process does not have
