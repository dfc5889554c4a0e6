"""The approval webhook: when a session starts waiting for a person, POST a small JSON card.

Delivery runs in a background thread of the worker with retries and backoff, after the
tick has committed: a slow or dead receiver never blocks a session. A card not
delivered after its attempts is logged and dropped; the session waits regardless, and
the page and `tickwork ls --status waiting_approval` still show it.

Settings (environment): TICKWORK_WEBHOOK_URL (unset: no webhook), TICKWORK_WEBHOOK_SECRET
(signs each card: `X-Tickwork-Signature: sha256=HMAC(secret, body)`),
TICKWORK_WEBHOOK_ATTEMPTS, TICKWORK_WEBHOOK_TIMEOUT_S, TICKWORK_WEBHOOK_BACKOFF_S, and
TICKWORK_PUBLIC_URL (where people reach `tickwork serve`, for the card's links).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import httpx

from fsm.values import EventKind, Head, Status

from .metrics import WEBHOOKS
from .secrets import Masker
from .settings import WebhookSettings

if TYPE_CHECKING:
    from fsm.machine import Change

    from .runtime import Runtime

log = logging.getLogger("tickwork.webhooks")

#: cards waiting for delivery in one process; past this they are dropped with a warning
MAX_QUEUED = 1000
#: the longest pause between two attempts
MAX_BACKOFF_S = 60.0
#: argument text longer than this is cut in the card (the page shows it whole)
MAX_ARGUMENT_CHARS = 4000


def card(
    head: Head,
    calls: list[dict[str, Any]],
    *,
    public_url: str,
    at: datetime,
    masker: Masker,
) -> dict[str, Any]:
    """The JSON card for a session that started waiting for a person; `masker` (the
    runtime's: patterns, secret environment values, URL passwords) masks the arguments."""
    base = public_url.rstrip("/")
    sid = quote(head.id, safe="")
    shown = []
    for call in calls:
        text = json.dumps(call.get("arguments"), ensure_ascii=False, sort_keys=True)
        text = masker.text(text)
        shown.append(
            {
                "call_id": call["call_id"],
                "name": call["name"],
                "arguments": text
                if len(text) <= MAX_ARGUMENT_CHARS
                else text[:MAX_ARGUMENT_CHARS] + " …(cut)",
                "fingerprint": call["fingerprint"],
                "in_doubt": call.get("state") == "in_doubt",
            }
        )
    return {
        "type": "tickwork.approval_requested",
        "id": f"{head.id}:{head.version}",
        "at": at.isoformat(),
        "session": {
            "id": head.id,
            "kind": head.kind,
            "model": head.model,
            "step": head.step,
            "status": head.status.value,
            #: the job let its commands reach the network (the sandbox's default: no network)
            "network": head.config.get("network") is True,
        },
        "calls": shown,
        "links": {
            "page": f"{base}/#/approvals/{sid}" if base else None,
            "session": f"{base}/api/v1/sessions/{sid}" if base else f"/api/v1/sessions/{sid}",
            "decide": (
                f"{base}/api/v1/sessions/{sid}/calls/{{call_id}}/decision"
                if base
                else f"/api/v1/sessions/{sid}/calls/{{call_id}}/decision"
            ),
        },
    }


def masked_url(url: str) -> str:
    """The URL as logs show it: scheme, host and port; its path, query and user hidden, since
    receivers (Slack, chat webhooks) often put their secret there."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        where = f"{parts.scheme}://{parts.hostname or '?'}{port}"
    except ValueError:
        return "<webhook URL>"
    hidden = parts.path not in ("", "/") or parts.query or parts.fragment
    return f"{where}/****" if hidden else where


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(
    url: str,
    document: dict[str, Any],
    *,
    attempts: int,
    timeout_s: float,
    backoff_s: float,
    secret: str = "",
    stopped: threading.Event | None = None,
) -> bool:
    """POST `document` until a 2xx answer; True if delivered. 4xx other than 408 and 429
    is final (the receiver refuses this card); other failures are retried with backoff."""
    body = json.dumps(document, ensure_ascii=False).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "tickwork-webhook",
        "X-Tickwork-Delivery": str(document.get("id", "")),
    }
    if secret:
        headers["X-Tickwork-Signature"] = sign(secret, body)
    pause = backoff_s
    shown = masked_url(url)
    for attempt in range(1, max(1, attempts) + 1):
        try:
            answer = httpx.post(url, content=body, headers=headers, timeout=timeout_s)
            if answer.is_success:
                return True
            why = f"HTTP {answer.status_code}"
            if 400 <= answer.status_code < 500 and answer.status_code not in (408, 429):
                log.warning("webhook %s refused card %s: %s", shown, document.get("id"), why)
                return False
        except httpx.HTTPError as exc:
            why = f"{type(exc).__name__}: {exc}".replace(url, shown)
        if attempt < attempts:
            log.info(
                "webhook attempt %d of card %s failed (%s); again in %.2fs",
                attempt,
                document.get("id"),
                why,
                pause,
            )
            if stopped is not None and stopped.wait(pause):
                return False
            if stopped is None:
                time.sleep(pause)
            pause = min(pause * 2, MAX_BACKOFF_S)
    log.warning(
        "webhook %s: card %s not delivered after %d attempts (%s)",
        shown,
        document.get("id"),
        attempts,
        why,
    )
    return False


class Notifier:
    """Delivers cards from one background thread per process, in order."""

    def __init__(self, settings: WebhookSettings, rt: Runtime) -> None:
        self.settings, self.rt = settings, rt
        self.queue: queue.Queue[tuple[Head, datetime]] = queue.Queue(MAX_QUEUED)
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def submit(self, head: Head, at: datetime) -> None:
        try:
            self.queue.put_nowait((head, at))
        except queue.Full:
            WEBHOOKS.labels("dropped").inc()
            log.warning("webhook queue full; card for session %s dropped", head.id)
            return
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, name="tickwork-webhooks", daemon=True
                )
                self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                head, at = self.queue.get(timeout=1.0)
            except queue.Empty:
                continue
            try:
                self._send(head, at)
            except Exception:
                WEBHOOKS.labels("failed").inc()
                log.exception("webhook card for session %s failed", head.id)

    def _send(self, head: Head, at: datetime) -> None:
        # the arguments come from the store: the card is built off the tick's path
        session = self.rt.store.load(head.id)
        calls = [
            c.model_dump(mode="json")
            for cid in head.awaiting
            if (c := session.call(cid)) is not None
        ]
        s = self.settings
        document = card(
            head,
            calls,
            public_url=s.public_url,
            at=at,
            masker=self.rt.masker,
        )
        ok = deliver(
            s.webhook_url,
            document,
            attempts=s.webhook_attempts,
            timeout_s=s.webhook_timeout_s,
            backoff_s=s.webhook_backoff_s,
            secret=s.webhook_secret,
            stopped=self.stopped,
        )
        WEBHOOKS.labels("delivered" if ok else "failed").inc()

    def stop(self) -> None:
        self.stopped.set()


def notifier(rt: Runtime) -> Notifier | None:
    """The runtime's notifier, built from the environment on first use; None if no URL."""
    held = rt.__dict__.get("_tickwork_webhooks")
    if held is None:
        settings = WebhookSettings()
        held = (Notifier(settings, rt),) if settings.webhook_url else (None,)
        rt.__dict__["_tickwork_webhooks"] = held
    return held[0]


def announce(rt: Runtime, change: Change, head: Head) -> None:
    """After a commit: if the session just started waiting for a person, send its card."""
    try:
        if head.status is not Status.WAITING_APPROVAL or not any(
            e.kind is EventKind.APPROVAL_REQUESTED for e in change.events
        ):
            return
        sender = notifier(rt)
        if sender is not None:
            sender.submit(head, rt.clock())
    except Exception as exc:  # a webhook never stands in a session's way
        log.warning("could not queue the webhook card of %s: %s", head.id, exc)
