"""Finished cards (issue 22, "the webhook card"): with TICKWORK_WEBHOOK_EVENTS naming
`finished`, a session that completes, fails or is cancelled posts one card, from the
outbox (its closing event, saved with the tick), on SQLite and Postgres, with a repair's
outcome; retried under one idempotency key; off by default; never for old ends."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.values import Status
from tickwork.store import deliveries, open_store
from tickwork.store.schema import events
from tickwork.worker.config.settings import WebhookSettings, read_settings
from tickwork.worker.observers.webhooks import sign
from tickwork.worker.tick.dispatcher import Dispatched, dispatch_once

from tests.conftest import Clock
from tests.worker.test_dispatcher import Receiver, hooks
from tests.worker.ticking import DANGER, Ticks
from tickwork.client import Tickwork

FINISHED = "approval_requested,finished"
WRITE = {"name": "run_command", "arguments": {"command": "printf 'fixed\\n' >> fixed.txt"}}
#: outcome -> (the model's replies, the test command), as tests/api/test_outcomes.py
REPAIRS: dict[str, tuple[list[dict[str, Any]], str]] = {
    "repaired": (
        [{"content": "fix", "tool_calls": [WRITE]}, {"content": "done"}],
        "test -f fixed.txt",
    ),
    "tests_failing": (
        [{"content": "try", "tool_calls": [WRITE]}, {"content": "gave up"}],
        "test -f missing.txt",
    ),
}


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime.now(UTC))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def repair(ticks: Ticks, outcome: str) -> str:
    """A repair session run to its end, ending with `outcome`."""
    replies, test_command = REPAIRS[outcome]
    project = ticks.tmp / f"project-{uuid.uuid4().hex[:6]}"
    project.mkdir()
    (project / "README").write_text("a project\n")
    script = ticks.tmp / f"{outcome}-{uuid.uuid4().hex[:6]}.json"
    script.write_text(json.dumps(replies))
    head = ticks.client.submit(
        "repair",
        {"workspace": str(project), "test_command": test_command},
        model=f"scripted:{script}",
        session_id=f"{outcome}-{uuid.uuid4().hex[:8]}",
    )
    ended = ticks.run(head.id)
    assert ended.status is Status.COMPLETED, ended.error_message
    assert ended.result["outcome"] == outcome, ended.result
    return head.id


@pytest.mark.parametrize("outcome", sorted(REPAIRS))
def test_a_finished_repair_posts_one_signed_card_with_its_outcome(
    ticks: Ticks, receiver: Receiver, outcome: str
) -> None:
    session_id = repair(ticks, outcome)
    settings = hooks(receiver, webhook_events=FINISHED)
    assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=1)
    assert dispatch_once(ticks.rt, settings) == Dispatched()
    [(headers, card, body)] = receiver.got
    head = ticks.store.get(session_id)
    assert card["type"] == "tickwork.finished"
    assert card["id"] == headers["idempotency-key"] == f"{session_id}:{head.version}"
    assert headers["x-tickwork-signature"] == sign("k", body)
    session = card["session"]
    assert (session["id"], session["kind"], session["status"]) == (
        session_id,
        "repair",
        "completed",
    )
    assert session["outcome"] == outcome
    assert (session["steps"], session["tokens"], session["cost_usd"]) == (
        head.step,
        head.tokens,
        head.cost_usd,
    )
    assert session["steps"] >= 2
    assert card["error"] is None
    base = f"https://tickwork.example/api/v1/sessions/{session_id}"
    assert card["links"] == {
        "page": f"https://tickwork.example/#/sessions/{session_id}",
        "session": base,
        "patch": f"{base}/patch",
    }
    state = deliveries.state(
        ticks.store.engine, session_id, head.version, kinds=deliveries.FINISHED
    )
    assert state is not None and state["delivered_at"] is not None and state["attempts"] == 1


def test_finished_cards_are_off_by_default(ticks: Ticks, receiver: Receiver) -> None:
    repair(ticks, "repaired")
    settings = hooks(receiver)
    assert settings.webhook_events == "approval_requested"
    assert dispatch_once(ticks.rt, settings) == Dispatched()
    assert receiver.got == []


def test_a_failing_receiver_gets_the_finished_card_again_under_the_same_key(
    ticks: Ticks, clock: Clock
) -> None:
    receiver = Receiver([500, 503])
    try:
        session_id = repair(ticks, "tests_failing")
        settings = hooks(receiver, webhook_events=FINISHED)
        assert dispatch_once(ticks.rt, settings) == Dispatched(retried=1)
        clock.advance(1.1)
        assert dispatch_once(ticks.rt, settings) == Dispatched(retried=1)
        clock.advance(2.1)
        assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=1)
        clock.advance(60)
        assert dispatch_once(ticks.rt, settings) == Dispatched()
    finally:
        receiver.close()
    keys = [h["idempotency-key"] for h, _, _ in receiver.got]
    assert keys == [f"{session_id}:{ticks.store.get(session_id).version}"] * 3
    assert [c["session"]["outcome"] for _, c, _ in receiver.got] == ["tests_failing"] * 3


def test_an_end_older_than_the_max_age_is_not_sent(
    ticks: Ticks, receiver: Receiver, clock: Clock
) -> None:
    """Turning finished cards on does not flood the receiver with every session that ever
    finished: only the ends younger than TICKWORK_WEBHOOK_MAX_AGE_S go out."""
    old = repair(ticks, "repaired")
    clock.advance(3600)
    young = repair(ticks, "tests_failing")
    clock.advance(60)
    settings = hooks(receiver, webhook_events=FINISHED, webhook_max_age_s=1800)
    assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=1)
    assert [c["session"]["id"] for _, c, _ in receiver.got] == [young]
    assert old != young


def test_a_failed_and_a_cancelled_session_post_their_cards(
    ticks: Ticks, receiver: Receiver, clock: Clock
) -> None:
    script = ticks.tmp / "loop.json"
    echo = {"content": "again", "tool_calls": [{"name": "echo", "arguments": {"text": "x"}}]}
    script.write_text(json.dumps([echo, echo, {"content": "done"}]))
    failed = ticks.client.submit(
        "tests.jobs:TEST", {}, model=f"scripted:{script}", budgets={"max_steps": 1}
    ).id
    assert ticks.run(failed).status is Status.FAILED
    waiting = ticks.submit(DANGER, prefix="cancel")
    assert ticks.run(waiting).status is Status.WAITING_APPROVAL
    settings = hooks(receiver, webhook_events=FINISHED)
    assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=2)
    ticks.store.request_cancel(waiting, now=clock(), by="alice")
    assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=1)
    cards = {c["session"]["id"]: c for _, c, _ in receiver.got if c["type"] == "tickwork.finished"}
    assert set(cards) == {failed, waiting}
    assert cards[failed]["session"]["status"] == "failed"
    assert cards[failed]["session"]["outcome"] is None  # not a repair, and not completed
    assert cards[failed]["error"]["code"] == "BUDGET_STEPS"
    assert cards[failed]["error"]["message"] == ticks.store.get(failed).error_message
    assert cards[failed]["links"]["patch"] is None  # this kind makes no files
    assert cards[waiting]["session"]["status"] == "cancelled"
    approvals = [c for _, c, _ in receiver.got if c["type"] == "tickwork.approval_requested"]
    assert [c["session"]["id"] for c in approvals] == [waiting]
    for card in [*cards.values(), *approvals]:  # as every view gives a date
        assert card["at"].endswith("Z") and "+00:00" not in json.dumps(card), card


def test_finished_cards_alone_send_no_approval_card(ticks: Ticks, receiver: Receiver) -> None:
    ticks.run(ticks.submit(DANGER))
    settings = hooks(receiver, webhook_events="finished")
    assert dispatch_once(ticks.rt, settings) == Dispatched()
    assert receiver.got == []


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("finshed", "unknown 'finshed'"),
        ("approval_requested,completed", "unknown 'completed'"),
        (" , ", "none given"),
    ],
)
def test_a_bad_events_setting_is_refused_naming_the_choices(
    monkeypatch: pytest.MonkeyPatch, value: str, said: str
) -> None:
    monkeypatch.setenv("TICKWORK_WEBHOOK_EVENTS", value)
    with pytest.raises(ConfigurationError) as refused:
        read_settings(WebhookSettings)
    message = str(refused.value)
    assert "TICKWORK_WEBHOOK_EVENTS" in message and said in message, message
    assert "approval_requested, finished" in message, message


def test_the_events_setting_accepts_either_order_and_spaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TICKWORK_WEBHOOK_EVENTS", " finished , approval_requested")
    settings = read_settings(WebhookSettings)
    assert settings.sends_finished and settings.sends_approvals
    monkeypatch.setenv("TICKWORK_WEBHOOK_MAX_AGE_S", "0")
    with pytest.raises(ConfigurationError, match="TICKWORK_WEBHOOK_MAX_AGE_S"):
        read_settings(WebhookSettings)


def test_the_finished_events_query_reads_its_partial_index(ticks: Ticks, clock: Clock) -> None:
    """The look for new ends reads `ix_tickwork_events_finished`, not the whole events
    table: 20,000 other events and 40 ends, the planner's statistics up to date."""
    session_id = ticks.submit(DANGER)
    rows = [
        {"session_id": session_id, "version": n, "kind": "step_recorded", "at": clock(), "data": {}}
        for n in range(20_000)
    ] + [
        {"session_id": session_id, "version": n, "kind": "completed", "at": clock(), "data": {}}
        for n in range(40)
    ]
    engine = ticks.store.engine
    with engine.begin() as conn:
        conn.execute(events.insert(), rows)
        conn.execute(text("ANALYZE"))
    query = deliveries.new_finished(clock() - timedelta(hours=1))
    compiled = query.compile(engine, compile_kwargs={"literal_binds": True})
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            plan = conn.execute(text(f"EXPLAIN QUERY PLAN {compiled}")).all()
            shown = " ".join(str(r[-1]) for r in plan)
        else:
            plan = conn.execute(text(f"EXPLAIN {compiled}")).all()
            shown = " ".join(str(r[0]) for r in plan)
        assert len(conn.execute(query).all()) == 40
    assert "ix_tickwork_events_finished" in shown, shown
    assert "Seq Scan on tickwork_events" not in shown and "SCAN tickwork_events" not in shown, shown


def test_the_core_store_on_postgres_posts_the_finished_card_too(
    clean_postgres_url: str, tmp_path: Path, clock: Clock, receiver: Receiver
) -> None:
    """The other save path on Postgres (SQLAlchemy Core's, not the one-statement save)."""
    ticks = Ticks(clean_postgres_url, tmp_path, clock)
    try:
        ticks.store.engine.dispose()
        ticks.store = open_store(clean_postgres_url, core=True)
        assert type(ticks.store).__name__ == "CoreStore"
        ticks.client = Tickwork(ticks.settings, store=ticks.store)
        ticks.client.publish = lambda *_: None  # type: ignore[method-assign]
        ticks.rt.close()
        ticks.rt = ticks.runtime(clock)
        session_id = repair(ticks, "repaired")
        settings = hooks(receiver, webhook_events=FINISHED)
        assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=1)
    finally:
        ticks.close()
    [(_, card, _)] = receiver.got
    assert (card["session"]["id"], card["session"]["outcome"]) == (session_id, "repaired")


def test_a_card_taken_young_is_tried_to_its_attempts_however_old_it_gets(
    ticks: Ticks, clock: Clock
) -> None:
    receiver = Receiver([500])
    try:
        session_id = repair(ticks, "repaired")
        settings = hooks(receiver, webhook_events=FINISHED, webhook_max_age_s=5)
        assert dispatch_once(ticks.rt, settings) == Dispatched(retried=1)
        clock.advance(30)  # now older than the max age
        assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=1)
    finally:
        receiver.close()
    assert [c["session"]["id"] for _, c, _ in receiver.got] == [session_id] * 2


def test_many_dispatchers_at_once_post_each_finished_card_once(
    ticks: Ticks, receiver: Receiver
) -> None:
    ended = [ticks.submit([{"content": "done"}], prefix="end") for _ in range(3)]
    for session_id in ended:
        assert ticks.run(session_id).status is Status.COMPLETED
    settings = hooks(receiver, webhook_events=FINISHED)
    start = threading.Barrier(4)
    done: list[Dispatched] = []

    def one() -> None:
        start.wait()
        done.append(dispatch_once(ticks.runtime(ticks.rt.clock), settings))  # type: ignore[arg-type]

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(d.delivered for d in done) == 3 and len(receiver.got) == 3
    assert sorted(c["session"]["id"] for _, c, _ in receiver.got) == sorted(ended)
    assert {c["session"]["outcome"] for _, c, _ in receiver.got} == {None}  # not repairs


def test_a_repair_whose_setup_failed_posts_the_outcome_the_api_shows(
    ticks: Ticks, receiver: Receiver
) -> None:
    """An ENV_SETUP failure records `tests_not_run` (the API, `ls`, `show`); its card said
    null, as for any failed session."""
    project = ticks.tmp / f"project-{uuid.uuid4().hex[:6]}"
    project.mkdir()
    (project / "README").write_text("a project\n")
    script = ticks.tmp / "never.json"
    script.write_text(json.dumps([{"content": "never asked"}]))
    head = ticks.client.submit(
        "repair",
        {"workspace": str(project), "test_command": "true", "setup": ["exit 3"]},
        model=f"scripted:{script}",
    )
    ended = ticks.run(head.id)
    assert ended.status is Status.FAILED and ended.result["outcome"] == "tests_not_run"
    assert dispatch_once(ticks.rt, hooks(receiver, webhook_events=FINISHED)).delivered == 1
    [(_, card, _)] = receiver.got
    assert card["session"]["status"] == "failed"
    assert card["session"]["outcome"] == "tests_not_run"
    assert card["error"]["code"] == "ENV_SETUP"


def test_show_prints_a_failed_setup_s_log_once(ticks: Ticks) -> None:
    """`tickwork show` of an ENV_SETUP failure printed the setup's log twice: at the end of
    the error's message and again under `environment:`."""
    import io

    from rich.console import Console

    from tickwork import render, views

    project = ticks.tmp / f"project-{uuid.uuid4().hex[:6]}"
    project.mkdir()
    (project / "README").write_text("a project\n")
    script = ticks.tmp / "never.json"
    script.write_text(json.dumps([{"content": "never asked"}]))
    head = ticks.client.submit(
        "repair",
        {
            "workspace": str(project),
            "test_command": "true",
            "setup": ["echo printed-$((40 + 2)); exit 3"],
        },
        model=f"scripted:{script}",
    )
    assert ticks.run(head.id).status is Status.FAILED
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(render.timeline(views.session(ticks.store.load(head.id))))
    shown = console.export_text()
    assert "error: ENV_SETUP: the environment's setup failed" in shown
    assert "setup stopped at" in shown and "environment: failed" in shown
    assert shown.count("printed-42") == 1, shown


def test_both_cards_name_the_session_s_tenant_and_who_submitted_it() -> None:
    """One receiver serves every tenant: each card says whose session it is, which the
    receiver cannot ask the API (another tenant's session is 404 to its token)."""
    from tickwork.worker.config.secrets import Masker
    from tickwork.worker.observers.webhooks import card, finished_card

    from tickwork.testing.store_ticks import new_session

    now = datetime(2026, 12, 1, tzinfo=UTC)
    head = new_session("t-1", now=now).head.model_copy(
        update={"tenant": "team-a", "submitted_by": "ann"}
    )
    asked = card(head, [], public_url="", at=now, masker=Masker([]))
    ended = finished_card(
        head, status="completed", data={}, public_url="", at=now, masker=Masker([])
    )
    for made in (asked, ended):
        assert (made["session"]["tenant"], made["session"]["submitted_by"]) == ("team-a", "ann")


def test_an_in_doubt_call_s_card_shows_the_arguments_it_ran_with_as_edited() -> None:
    """A call run as edited and left in doubt (its worker killed mid-tool) posted a card
    with the model's arguments, while `show` said "as edited": the card shows the edited
    arguments it ran with and who edited them; a call not edited shows the model's."""
    from tickwork.worker.config.secrets import Masker
    from tickwork.worker.observers.webhooks import card

    from tickwork.testing.store_ticks import new_session

    now = datetime(2026, 12, 1, tzinfo=UTC)
    head = new_session("t-2", now=now).head
    model = {"command": "rm -rf build"}
    edit = {
        **{"call_id": "s1c0", "at": now.isoformat(), "fingerprint": "0"},
        **{"kind": "edit", "approver": "bob", "arguments": {"command": "rm -rf build/tmp"}},
    }
    again = {**edit, "kind": "approve", "approver": "carol"}
    calls = [
        {
            "call_id": "s1c0",
            "name": "run_command",
            "arguments": model,
            "fingerprint": "0",
            "state": "in_doubt",
            "decision": edit,
        },
        {
            "call_id": "s1c1",
            "name": "run_command",
            "arguments": model,
            "fingerprint": "1",
            "state": "in_doubt",
            "decision": again,
        },
        {
            "call_id": "s1c2",
            "name": "run_command",
            "arguments": model,
            "fingerprint": "2",
            "state": "in_doubt",
            "decision": None,
        },
    ]
    shown = card(head, calls, public_url="", at=now, masker=Masker([]))["calls"]
    edited = json.dumps(edit["arguments"], sort_keys=True)
    assert [(c["arguments"], c["as_edited"]) for c in shown] == [
        (edited, "as edited by bob"),
        (edited, "as edited, run again by carol"),
        (json.dumps(model, sort_keys=True), None),
    ]
