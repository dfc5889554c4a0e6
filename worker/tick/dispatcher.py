"""The webhook dispatcher: posts the cards of the outbox (`tickwork.store.deliveries`): approval
cards and, with TICKWORK_WEBHOOK_EVENTS naming `finished`, finished cards.

Every worker process with TICKWORK_WEBHOOK_URL set runs one in a thread beside its ticks:
a pass every TICKWORK_RELAY_PERIOD_S, and at once when one of its own ticks reports calls
now waiting for a person (or, with finished cards, a session that ended). Dispatchers of
many workers share the work through the store; a card taken by a worker that died is
taken again after its hold.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tickwork.fsm.errors import SessionNotFound
from tickwork.fsm.values import Decision, Status
from tickwork.fsm.wording import counted
from tickwork.store.deliveries import MOVED_ON, Card
from tickwork.worker.config.process import Loop
from tickwork.worker.config.settings import WebhookSettings
from tickwork.worker.observers.metrics import WEBHOOKS
from tickwork.worker.observers.report import TickReport
from tickwork.worker.observers.webhooks import backoff, card, finished_card, masked_url, post
from tickwork.worker.tick.runtime import CLOSE_WAIT_S, Runtime

log = logging.getLogger("tickwork.webhooks")

#: most cards one pass posts; the rest wait for the next pass
MAX_PER_PASS = 200


@dataclass(frozen=True)
class Dispatched:
    """What one pass did with the cards it took."""

    delivered: int = 0
    retried: int = 0
    failed: int = 0
    #: cards whose session moved on (a decision, a cancel) before they went out
    dropped: int = 0


def hold_s(settings: WebhookSettings) -> float:
    """How long a taken card is this dispatcher's: its POST's timeout and as much again
    (at least 5 s) for the store; a card left by a dead worker waits that long."""
    return settings.webhook_timeout_s + max(settings.webhook_timeout_s, 5.0)


def dispatch_once(
    rt: Runtime, settings: WebhookSettings, *, stopped: threading.Event | None = None
) -> Dispatched:
    """Post the cards due now, one at a time, and record each answer."""
    cards = rt.store.cards
    dropped = cards.drop_moved_on()
    counts = {"delivered": 0, "retried": 0, "failed": 0, "dropped": dropped}
    for _ in range(MAX_PER_PASS):
        if stopped is not None and stopped.is_set():
            break
        now = rt.clock()
        # a wait or an end older than this is not sent when first seen: turning webhooks on
        # sends no card for what happened long before
        since = now - timedelta(seconds=settings.webhook_max_age_s)
        taken = cards.take(
            now=now,
            hold_s=hold_s(settings),
            approvals=settings.sends_approvals,
            approvals_since=since,
            finished_since=since if settings.sends_finished else None,
        )
        if not taken:
            break
        counts[_send(rt, settings, taken[0])] += 1
    for outcome in ("delivered", "failed", "dropped"):
        if counts[outcome]:
            WEBHOOKS.labels(outcome).inc(counts[outcome])
    return Dispatched(**counts)


def _document(rt: Runtime, settings: WebhookSettings, taken: Card) -> dict[str, Any] | None:
    """The card to post for `taken`, or None when its session moved on or is gone."""
    try:
        session = rt.store.load(taken.session_id)
    except SessionNotFound:
        return None
    head = session.head
    if taken.finished:
        document = finished_card(
            head,
            status=taken.kind,
            data=taken.data or {},
            public_url=settings.public_url,
            at=taken.at,
            masker=rt.masker,
        )
    else:
        if head.version < taken.version or head.status is not Status.WAITING_APPROVAL:
            return None
        # the calls still waiting: a person may have decided some since the card was written
        waiting = [cid for cid in taken.calls if cid in head.awaiting] or list(head.awaiting)
        calls = [
            {**c.model_dump(mode="json"), "decision": _dumped(session.decision(cid))}
            for cid in waiting
            if (c := session.call(cid))
        ]
        document = card(head, calls, public_url=settings.public_url, at=taken.at, masker=rt.masker)
    document["id"] = taken.key  # the same on every attempt, whatever happened meanwhile
    return document


def _dumped(decision: Decision | None) -> dict[str, Any] | None:
    # an in-doubt call's card shows the arguments it ran with, an edit's if a person edited
    return decision.model_dump(mode="json") if decision is not None else None


def _send(rt: Runtime, settings: WebhookSettings, taken: Card) -> str:
    cards = rt.store.cards
    document = _document(rt, settings, taken)
    if document is None:
        cards.failed(taken.event_id, error=MOVED_ON, retry_at=None)
        return "dropped"
    attempt = post(
        settings.webhook_url,
        document,
        timeout_s=settings.webhook_timeout_s,
        secret=settings.webhook_secret,
    )
    if attempt.ok:
        cards.delivered(taken.event_id, now=rt.clock())
        return "delivered"
    shown, tries = masked_url(settings.webhook_url), taken.attempts + 1
    if attempt.final:  # a receiver that moved did not refuse the card: it redirected it
        done = "redirected" if attempt.moved else "refused"
        log.warning("webhook %s %s card %s: %s", shown, done, taken.key, attempt.why)
    if attempt.final or tries >= settings.webhook_attempts:
        cards.failed(taken.event_id, error=attempt.why, retry_at=None)
        log.warning(
            "webhook %s: card %s not delivered after %s (%s); once %s, `tickwork runbook "
            "webhook` says how to send it again",
            shown,
            taken.key,
            counted(tries, "attempt"),
            attempt.why,
            "TICKWORK_WEBHOOK_URL points where it moved"
            if attempt.moved
            else "the receiver answers",
        )
        return "failed"
    pause = backoff(tries, first_s=settings.webhook_backoff_s)
    log.info(
        "webhook attempt %d of card %s failed (%s); again in %.2fs",
        tries,
        taken.key,
        attempt.why,
        pause,
    )
    retry_at = rt.clock() + timedelta(seconds=pause)
    cards.failed(taken.event_id, error=attempt.why, retry_at=retry_at)
    return "retried"


class Dispatcher:
    """This process's dispatcher thread: started with the worker, or by the first tick
    that reports calls waiting for a person; woken by such ticks. Stopped (with the worker,
    or its app closed), it is started again by the next worker's start only."""

    def __init__(self, rt: Runtime, settings: WebhookSettings) -> None:
        self.rt, self.settings = rt, settings
        self._loop = self._new_loop()

    def _new_loop(self) -> Loop:
        loop = Loop(
            "webhooks",
            lambda: dispatch_once(self.rt, self.settings, stopped=loop.stopped),
            every_s=self.rt.settings.relay_period_s,
            log=log,
            what="webhook pass",
            at_once=True,
        )
        return loop

    def __call__(self, report: TickReport) -> None:
        """The tick observer: a session started waiting (or ended, when finished cards are
        sent), send its card now."""
        ended = report.status is not None and report.status.terminal
        if report.waiting or (ended and self.settings.sends_finished):
            self.wake()

    def start(self) -> None:
        if self._loop.stopped.is_set():
            self._loop = self._new_loop()
        self._loop.start()

    def wake(self) -> None:
        self._loop.start()
        self._loop.wake()

    def stop(self) -> None:
        """Stop the thread, waiting up to `CLOSE_WAIT_S` for the card being sent."""
        self._loop.stop()
        self._loop.join(CLOSE_WAIT_S)
