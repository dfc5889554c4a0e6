"""The webhook dispatcher on SQLite and Postgres: the approval card goes from the outbox
(the saved `approval_requested` event) to a loopback receiver, retried with backoff, at
least once, never twice in the normal path, with one idempotency key across attempts."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import Decision, DecisionKind, Status
from tickwork.store import deliveries
from tickwork.worker.config.settings import WebhookSettings
from tickwork.worker.observers.webhooks import Attempt, backoff, post, sign
from tickwork.worker.tick.dispatcher import Dispatched, Dispatcher, dispatch_once

from tests.conftest import Clock
from tests.e2e.conftest import Cli
from tests.worker.ticking import DANGER, Ticks
from tickwork import cli_webhooks


class Receiver:
    """Answers each POST with the next status of `statuses` (then 200), with `location` as
    its `Location` if given, keeping each request's headers and card."""

    def __init__(self, statuses: list[int] | None = None, location: str = "") -> None:
        self.statuses = list(statuses or [])
        self.got: list[tuple[dict[str, str], dict[str, Any], bytes]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.got.append(
                        ({k.lower(): v for k, v in self.headers.items()}, json.loads(body), body)
                    )
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/secret-path"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime.now(UTC))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def hooks(receiver: Receiver, **kw: Any) -> WebhookSettings:
    values: dict[str, Any] = dict(
        webhook_url=receiver.url,
        webhook_secret="k",
        webhook_attempts=4,
        webhook_backoff_s=1.0,
        webhook_timeout_s=2.0,
        public_url="https://tickwork.example",
    )
    return WebhookSettings(**(values | kw))


def waiting(ticks: Ticks) -> str:
    session_id = ticks.submit(DANGER)
    assert ticks.run(session_id).status is Status.WAITING_APPROVAL
    return session_id


def test_the_card_of_a_saved_wait_is_posted_once_signed_with_its_idempotency_key(
    ticks: Ticks, receiver: Receiver
) -> None:
    session_id = waiting(ticks)  # no observer ran: the card is in the store alone
    settings = hooks(receiver)
    assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=1)
    assert dispatch_once(ticks.rt, settings) == Dispatched()
    [(headers, card, body)] = receiver.got
    assert card["id"] == f"{session_id}:{ticks.store.get(session_id).version}"
    assert headers["idempotency-key"] == headers["x-tickwork-delivery"] == card["id"]
    assert headers["x-tickwork-signature"] == sign("k", body)
    assert card["type"] == "tickwork.approval_requested"
    assert [c["call_id"] for c in card["calls"]] == ["s1c0"]
    assert card["calls"][0]["arguments"] == '{"value": "prod-db"}'
    assert card["links"]["page"] == f"https://tickwork.example/#/approvals/{session_id}"
    state = deliveries.state(ticks.store.engine, session_id, ticks.store.get(session_id).version)
    assert state is not None and state["delivered_at"] is not None and state["attempts"] == 1


def test_a_500_is_retried_with_backoff_under_the_same_idempotency_key(
    ticks: Ticks, clock: Clock
) -> None:
    receiver = Receiver([500, 500])
    try:
        session_id = waiting(ticks)
        settings = hooks(receiver)
        assert dispatch_once(ticks.rt, settings) == Dispatched(retried=1)
        clock.advance(0.5)  # the first pause is 1 s: not yet
        assert dispatch_once(ticks.rt, settings) == Dispatched()
        clock.advance(0.6)
        assert dispatch_once(ticks.rt, settings) == Dispatched(retried=1)
        clock.advance(1.5)  # the second pause is 2 s
        assert dispatch_once(ticks.rt, settings) == Dispatched()
        clock.advance(0.6)
        assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=1)
    finally:
        receiver.close()
    keys = [h["idempotency-key"] for h, _, _ in receiver.got]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0].startswith(session_id + ":")
    assert [c["id"] for _, c, _ in receiver.got] == keys


def test_a_card_not_delivered_after_its_attempts_is_given_up(
    ticks: Ticks, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = Receiver([503] * 10)
    try:
        session_id = waiting(ticks)
        settings = hooks(receiver, webhook_attempts=3)
        for _ in range(10):
            dispatch_once(ticks.rt, settings)
            clock.advance(60)
    finally:
        receiver.close()
    assert len(receiver.got) == 3
    state = deliveries.state(ticks.store.engine, session_id, ticks.store.get(session_id).version)
    assert state is not None
    assert (state["attempts"], state["delivered_at"], state["next_attempt_at"]) == (3, None, None)
    assert state["last_error"] == "HTTP 503"
    logged = [r.getMessage() for r in caplog.records if r.name == "tickwork.webhooks"]
    assert any("not delivered after 3 attempts" in m for m in logged), logged
    assert any("`tickwork runbook webhook` says how to send it again" in m for m in logged)
    assert not any("secret-path" in m for m in logged), logged


def test_a_receiver_that_moved_redirected_the_card_it_did_not_refuse_it(
    ticks: Ticks, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A card answered with a 308 was logged `refused card`, as one a 4xx refuses: the
    receiver refused nothing, it moved. The log says it redirected the card, and the log and
    `webhooks ls` where to, that no redirect is followed, and what to set."""
    receiver = Receiver([308], location="https://hooks.example/new/secret-path")
    cli = cli_of(ticks, tmp_path, TICKWORK_WEBHOOK_URL=receiver.url)
    try:
        session_id = waiting(ticks)
        assert dispatch_once(ticks.rt, hooks(receiver)) == Dispatched(failed=1)
    finally:
        receiver.close()
    why = (
        "HTTP 308, a redirect to https://hooks.example/****, not followed: set "
        "TICKWORK_WEBHOOK_URL to the URL it points to"
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "tickwork.webhooks"]
    assert any(f"redirected card {session_id}:" in m and why in m for m in logged), logged
    assert not any("refused" in m or "secret-path" in m for m in logged), logged
    assert any("not delivered after 1 attempt (" in m for m in logged), logged
    assert any("once TICKWORK_WEBHOOK_URL points where it moved" in m for m in logged), logged
    [listed] = cli.inline("webhooks", "ls", "--json").json()
    assert listed["session_id"] == session_id and listed["last_error"] == why
    shown = cli.inline("webhooks", "ls", COLUMNS="400").stdout
    assert why in shown, shown


def runbook_commands() -> list[str]:
    """The commands of ops/RUNBOOK.md's webhook section, in its order."""
    section = (
        (Path(__file__).resolve().parents[2] / "ops" / "RUNBOOK.md")
        .read_text()
        .split("## Webhook cards are not")[1]
    )
    blocks = re.findall(r"```sh\n(.*?)```", section.split("\n## ")[0], flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_runbook_lists_the_cards_given_up_and_sends_them_again(
    ticks: Ticks, clock: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the runbook tells an operator to run once the receiver is back: the cards given
    up are listed with why, and sent again at the next pass; a card whose session moved on
    meanwhile stays unsent."""
    receiver = Receiver([503] * 4)
    cli = cli_of(ticks, tmp_path, TICKWORK_WEBHOOK_URL=receiver.url)  # as the workers have
    listing, sending = runbook_commands()
    assert listing == "tickwork webhooks ls" and sending == "tickwork webhooks resend --all"
    try:
        session_id, moved_on = waiting(ticks), waiting(ticks)
        settings = hooks(receiver, webhook_attempts=2)
        assert cli.inline("webhooks", "ls").stdout == "no webhook card was given up\n"
        for _ in range(4):
            dispatch_once(ticks.rt, settings)
            clock.advance(60)
        assert len(receiver.got) == 4
        ticks.client.cancel(moved_on)
        listed = cli.inline(*listing.split()[1:], "--json").json()
        assert sorted((r["session_id"], r["attempts"], r["last_error"]) for r in listed) == sorted(
            (sid, 2, "HTTP 503") for sid in (session_id, moved_on)
        )
        assert [r["kind"] for r in listed] == ["approval_requested"] * 2
        assert all(r["at"].endswith("Z") for r in listed)  # as every view gives a date
        shown = cli.inline(*listing.split()[1:], session_id, COLUMNS="200").stdout
        assert f"{session_id}:" in shown and moved_on not in shown and "HTTP 503" in shown
        monkeypatch.setattr(cli_webhooks, "SHOWN", 1)  # more given up than it lists
        cut = cli.inline(*listing.split()[1:], "--json", ok=False)
        assert len(cut.json()) == 1 and "more than 1 cards were given up" in cut.stderr
        monkeypatch.undo()

        sent = cli.inline(*sending.split()[1:]).stdout
        assert f"{session_id}:" in sent and f"{moved_on}:" in sent
        assert "if its session still waits (else dropped)" in sent

        assert dispatch_once(ticks.rt, settings) == Dispatched(delivered=1, dropped=1)
        again = cli.inline(*sending.split()[1:], ok=False)
        assert again.code == 1 and "nothing to send again" in again.stderr
    finally:
        receiver.close()
    assert [card["id"].split(":")[0] for _, card, _ in receiver.got[4:]] == [session_id]


def cli_of(ticks: Ticks, tmp_path: Path, **env: str) -> Cli:
    """The CLI of the deployment `ticks` runs, with `env` and no other TICKWORK_ variable."""
    url = ticks.store.engine.url.render_as_string(hide_password=False)
    outer = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    ours = {"TICKWORK_DATABASE_URL": url, "TICKWORK_STATE_DIR": str(tmp_path)}
    return Cli({**outer, **ours, **env}, tmp_path)


def test_resend_with_webhooks_off_here_says_what_it_knows(
    ticks: Ticks, clock: Clock, tmp_path: Path
) -> None:
    """With no webhook URL set where the CLI runs, or the card's kind not in its
    TICKWORK_WEBHOOK_EVENTS, `resend` puts the cards back but does not promise them at the
    next pass: the workers send them, with their own settings, so it says what it knows
    (the setting here) and what to set on the workers if theirs is the same."""
    receiver = Receiver([404])
    try:
        session_id = waiting(ticks)
        assert dispatch_once(ticks.rt, hooks(receiver)) == Dispatched(failed=1)
    finally:
        receiver.close()

    off = cli_of(ticks, tmp_path).inline("webhooks", "resend", "--all", ok=False)
    assert off.code == 0 and off.stdout.startswith(f"{session_id}:")
    assert "next pass, if" not in off.stdout
    assert (
        "put back; TICKWORK_WEBHOOK_URL is not set here: the workers send it at their next "
        "pass if they have it set"
    ) in off.stdout
    assert "webhooks are off" not in off.stdout + off.stderr
    assert "if not, set TICKWORK_WEBHOOK_URL on the workers" in off.stderr

    clock.advance(60)  # put back due now, by the CLI's clock
    assert dispatch_once(ticks.rt, hooks(receiver, webhook_attempts=1)) == Dispatched(failed=1)
    finished_only = cli_of(
        ticks,
        tmp_path,
        TICKWORK_WEBHOOK_URL=receiver.url,
        TICKWORK_WEBHOOK_EVENTS="finished",
    ).inline("webhooks", "resend", session_id, ok=False)
    assert (
        "TICKWORK_WEBHOOK_EVENTS here (finished) does not name approval_requested: the workers "
        "send it at their next pass if theirs names approval_requested"
    ) in finished_only.stdout
    assert "add approval_requested to TICKWORK_WEBHOOK_EVENTS" in finished_only.stderr


def test_ls_pending_lists_the_cards_still_to_be_sent_and_says_when_none_goes_out(
    ticks: Ticks, tmp_path: Path
) -> None:
    """A card put back by `resend` (or retried after a failure) is no longer given up, so
    `webhooks ls` did not list it, and nothing listed it while no worker sent it (webhooks
    off on the workers): `ls --pending` lists the cards still to be sent, soonest first,
    with their next attempt and last error, and says when one is long overdue."""
    receiver = Receiver([404, 503])
    cli = cli_of(ticks, tmp_path)
    try:
        refused, retried = waiting(ticks), waiting(ticks)
        assert cli.inline("webhooks", "ls", "--pending").stdout == (
            "no webhook card is waiting to be sent\n"
        )
        retry_later = hooks(receiver, webhook_backoff_s=600.0)
        assert dispatch_once(ticks.rt, retry_later) == Dispatched(failed=1, retried=1)
    finally:
        receiver.close()
    assert cli.inline("webhooks", "resend", refused, ok=False).code == 0
    listed = cli.inline("webhooks", "ls", "--pending", "--json").json()
    assert [(r["session_id"], r["attempts"], r["last_error"]) for r in listed] == [
        (refused, 0, ""),  # put back: due now, its attempts anew
        (retried, 1, "HTTP 503"),  # due 10 minutes after its failure
    ], listed
    assert all(r["next_attempt_at"].endswith("Z") for r in listed), listed
    assert cli.inline("webhooks", "ls").stdout == "no webhook card was given up\n"
    shown = cli.inline("webhooks", "ls", "--pending", refused[:8], COLUMNS="200")
    assert f"{refused}:" in shown.stdout and retried not in shown.stdout
    assert "NEXT ATTEMPT" in shown.stdout and "no worker sends" not in shown.stderr

    # an hour later no worker has sent it (no TICKWORK_WEBHOOK_URL on them): said so
    with ticks.store.engine.begin() as conn:
        conn.execute(
            deliveries.deliveries.update().values(
                next_attempt_at=datetime.now(UTC) - timedelta(hours=1)
            )
        )
    late = cli.inline("webhooks", "ls", "--pending", ok=False)
    assert (
        "2 cards due since" in late.stderr
        and "If they stay so, no worker sends cards" in late.stderr
    )
    assert "TICKWORK_WEBHOOK_URL" in late.stderr


def test_resend_names_what_to_send(ticks: Ticks, tmp_path: Path) -> None:
    """`webhooks resend` with neither sessions nor --all, or both, says what to give; an id
    naming no session is refused as such; a session with no card given up sends nothing and
    says so."""
    cli = cli_of(ticks, tmp_path)
    neither = cli.inline("webhooks", "resend", ok=False)
    assert neither.code == 2 and "name the sessions whose cards to send again" in neither.stderr
    both = cli.inline("webhooks", "resend", "abc", "--all", ok=False)
    assert both.code == 2 and "not both" in both.stderr
    for command in ("ls", "resend"):  # a mistyped id is no session, not `none given up`
        unknown = cli.inline("webhooks", command, "no-such-session", ok=False)
        assert unknown.code == 1 and "no session 'no-such-session'" in unknown.stderr
    session_id = waiting(ticks)  # its card not given up; named by the start of its id
    listed = cli.inline("webhooks", "ls", session_id[:8], ok=False)
    assert listed.code == 0 and f"no webhook card of {session_id} was given up" in listed.stdout
    none = cli.inline("webhooks", "resend", session_id[:8], ok=False)
    assert none.code == 1 and f"no webhook card of {session_id} was given up" in none.stderr
    long = cli.inline("webhooks", "ls", "x" * 65, ok=False)
    assert long.code == 2 and "not a session id" in long.stderr


def test_many_dispatchers_at_once_post_each_card_once(ticks: Ticks, receiver: Receiver) -> None:
    sessions = [waiting(ticks) for _ in range(3)]
    settings = hooks(receiver)
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
    assert sum(d.delivered for d in done) == 3
    assert sorted(c["session"]["id"] for _, c, _ in receiver.got) == sorted(sessions)


def test_turning_webhooks_on_sends_no_card_for_a_wait_older_than_the_max_age(
    ticks: Ticks, receiver: Receiver, clock: Clock
) -> None:
    """Webhooks turned on for a deployment whose sessions have waited for a person for long:
    the receiver is told of the waits younger than TICKWORK_WEBHOOK_MAX_AGE_S, not flooded
    with one card for every session that ever waited (`tickwork ls --status
    waiting_approval` lists those); a longer max age reaches further back."""
    old = waiting(ticks)
    clock.advance(3600)
    young = waiting(ticks)
    clock.advance(60)
    assert dispatch_once(ticks.rt, hooks(receiver, webhook_max_age_s=1800)) == Dispatched(
        delivered=1
    )
    assert [c["session"]["id"] for _, c, _ in receiver.got] == [young]
    assert ticks.store.cards.given_up(limit=10) == []  # not given up: never sent
    assert dispatch_once(ticks.rt, hooks(receiver, webhook_max_age_s=7200)) == Dispatched(
        delivered=1
    )
    assert [c["session"]["id"] for _, c, _ in receiver.got] == [young, old]


def test_a_card_whose_session_moved_on_is_not_sent(
    ticks: Ticks, receiver: Receiver, clock: Clock
) -> None:
    session_id = waiting(ticks)
    call = ticks.store.load(session_id).call("s1c0")
    assert call is not None
    decision = Decision(
        call_id="s1c0",
        kind=DecisionKind.APPROVE,
        approver="alice",
        at=clock(),
        fingerprint=call.fingerprint,
    )
    ticks.store.decide(session_id, decision, now=clock())
    assert dispatch_once(ticks.rt, hooks(receiver)) == Dispatched()
    assert receiver.got == []


def test_a_card_goes_out_for_the_calls_still_waiting_after_some_were_decided(
    ticks: Ticks, receiver: Receiver, clock: Clock
) -> None:
    """A decision on one of two waiting calls moves the session on but it still waits: its
    card (not yet delivered: the receiver was down) goes out, for the call still waiting,
    under the key it had."""
    two = [
        {
            "content": "two risky calls",
            "tool_calls": [
                {"name": "danger", "arguments": {"value": "a"}},
                {"name": "danger", "arguments": {"value": "b"}},
            ],
        },
        {"content": "done"},
    ]
    session_id = ticks.submit(two)
    assert ticks.run(session_id).status is Status.WAITING_APPROVAL
    key = f"{session_id}:{ticks.store.get(session_id).version}"
    call = ticks.store.load(session_id).call("s1c0")
    assert call is not None
    decision = Decision(
        call_id="s1c0",
        kind=DecisionKind.APPROVE,
        approver="alice",
        at=clock(),
        fingerprint=call.fingerprint,
    )
    head = ticks.store.decide(session_id, decision, now=clock())
    assert head.status is Status.WAITING_APPROVAL and head.awaiting == ("s1c1",)
    assert dispatch_once(ticks.rt, hooks(receiver)) == Dispatched(delivered=1)
    [(headers, card, _)] = receiver.got
    assert headers["idempotency-key"] == card["id"] == key
    assert [c["call_id"] for c in card["calls"]] == ["s1c1"]
    assert dispatch_once(ticks.rt, hooks(receiver)) == Dispatched()


def test_a_dispatcher_is_woken_by_a_tick_that_starts_a_wait(
    ticks: Ticks, receiver: Receiver
) -> None:
    dispatcher = Dispatcher(ticks.rt, hooks(receiver))
    ticks.rt.observers.add(dispatcher)
    try:
        session_id = waiting(ticks)
        deadline = threading.Event()
        for _ in range(100):
            if receiver.got:
                break
            deadline.wait(0.05)
    finally:
        dispatcher.stop()
    assert [c["session"]["id"] for _, c, _ in receiver.got] == [session_id]


def test_no_log_line_shows_the_receivers_path(
    ticks: Ticks, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker logs at INFO, where httpx logs each request's URL: the receiver's path
    (a Slack-style webhook's secret) is not in it, its host is."""
    caplog.set_level(logging.INFO)
    waiting(ticks)
    assert dispatch_once(ticks.rt, hooks(receiver)) == Dispatched(delivered=1)
    requests = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert requests and all("secret-path" not in m for m in requests), requests
    assert any(receiver.url.split("/hook")[0] + "/****" in m for m in requests), requests


def redirected(status: int, location: str) -> Attempt:
    """What `post` makes of a receiver answering `status` with `location`."""

    class Moved(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(status)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Moved)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        return post(f"http://127.0.0.1:{server.server_address[1]}/hook", {"id": "x"}, timeout_s=2)
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_says_where_to_point_the_webhook() -> None:
    """A receiver moved (a 301 or 308 to https): the card is not posted there unasked, why it
    was not delivered says where it moved (masked, as logs show URLs) and what to set, and it
    is not tried again (every try would be answered alike)."""
    for status in (301, 308):
        found = redirected(status, "https://hooks.example/new/secret-path")
        assert (found.ok, found.final) == (False, True)
        assert found.why == (
            f"HTTP {status}, a redirect to https://hooks.example/****, not followed: set "
            "TICKWORK_WEBHOOK_URL to the URL it points to"
        )
        assert found.moved


def test_a_relative_redirect_names_the_receivers_host() -> None:
    """A `Location` of a path (or with no scheme) is where the receiver's own URL leads:
    the message names that host, not `://?/****`."""
    relative = redirected(308, "/new/secret-path")
    assert relative.why.startswith("HTTP 308, a redirect to http://127.0.0.1:")
    assert "/****, not followed: set TICKWORK_WEBHOOK_URL" in relative.why
    assert "://?" not in relative.why
    no_scheme = redirected(301, "//hooks.example/new/secret-path")
    assert no_scheme.why.startswith("HTTP 301, a redirect to http://hooks.example/****, not ")


def test_a_temporary_redirect_is_not_a_new_webhook_url() -> None:
    """A 302 (a proxy sending to its login page, say) is not the receiver's new home: it is
    said to be a temporary redirect, not followed, with no advice to point the webhook
    there, and the card is tried again."""
    for status in (302, 303, 307):
        found = redirected(status, "https://sso.example/login?next=secret")
        assert (found.ok, found.final) == (False, False)
        assert found.why == (
            f"HTTP {status}, a temporary redirect to https://sso.example/****, not followed"
        )


def test_post_says_whether_to_try_again() -> None:
    refusing = Receiver([403])
    try:
        found = post(refusing.url, {"id": "y", "text": "ünïcode"}, timeout_s=2, secret="k")
    finally:
        refusing.close()
    assert (found.ok, found.final, found.why) == (False, True, "HTTP 403")
    headers, card, body = refusing.got[0]
    assert card == {"id": "y", "text": "ünïcode"}
    assert headers["content-type"] == "application/json"
    assert headers["idempotency-key"] == headers["x-tickwork-delivery"] == "y"
    assert headers["x-tickwork-signature"] == sign("k", body)
    dead = Receiver()
    url = dead.url
    dead.close()  # nothing listens there now
    gone = post(url, {"id": "x"}, timeout_s=1)
    assert not gone.ok and not gone.final and "secret-path" not in gone.why
    assert [backoff(n, first_s=1.0) for n in (1, 2, 3, 8)] == [1.0, 2.0, 4.0, 60.0]
