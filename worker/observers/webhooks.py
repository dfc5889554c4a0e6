"""The webhook: when a session starts waiting for a person, POST a small JSON card; and,
when the deployment asks for it (TICKWORK_WEBHOOK_EVENTS=approval_requested,finished),
one when a session finishes (completed, failed, cancelled), with a repair's outcome.

The card goes through the outbox (`tickwork.store.deliveries`): the `approval_requested`
event is saved with the tick, and a dispatcher in every worker
(`tickwork.worker.tick.dispatcher`) posts it, at least once, retried with backoff, with the
card's id as `Idempotency-Key`. A slow or dead receiver never blocks a session, and a worker
that dies after the save loses no card. A card not delivered after its attempts is logged
and given up; the session waits regardless, and the page and
`tickwork ls --status waiting_approval` still show it.

Settings (environment): TICKWORK_WEBHOOK_URL (unset: no webhook), TICKWORK_WEBHOOK_SECRET
(signs each card: `X-Tickwork-Signature: sha256=HMAC(secret, body)`),
TICKWORK_WEBHOOK_ATTEMPTS, TICKWORK_WEBHOOK_TIMEOUT_S, TICKWORK_WEBHOOK_BACKOFF_S,
TICKWORK_WEBHOOK_EVENTS, TICKWORK_WEBHOOK_MAX_AGE_S (cards only for waits and ends
younger than this when first seen) and TICKWORK_PUBLIC_URL (where people reach `tickwork
serve`, for the links).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from tickwork.fsm.approvals import as_edited
from tickwork.fsm.failures import failed_before_line
from tickwork.fsm.outcomes import outcome_of
from tickwork.fsm.values import Decision, Head, utc_date
from tickwork.worker.config.secrets import Masker
from tickwork.worker.sandbox.egress import network_mode

log = logging.getLogger("tickwork.webhooks")

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
        editor = _edited_by(call)
        ran = call["decision"]["arguments"] if editor else call.get("arguments")
        text = json.dumps(ran, ensure_ascii=False, sort_keys=True)
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
                #: "as edited by bob" where the arguments shown are a person's edit, which
                #: the in-doubt call ran with (None: the model's own)
                "as_edited": editor,
            }
        )
    return {
        "type": "tickwork.approval_requested",
        "id": f"{head.id}:{head.version}",
        "at": utc_date(at),
        "session": {
            "id": head.id,
            "kind": head.kind,
            "model": head.model,
            "step": head.step,
            "status": head.status.value,
            #: whose session: one receiver serves every tenant
            "tenant": head.tenant,
            "submitted_by": head.submitted_by,
            #: the job let its commands reach the network through the egress proxy (its
            #: `network` is "all"; by default only its environment's setup may)
            "network": network_mode(head.config) == "all",
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


def _edited_by(call: dict[str, Any]) -> str | None:
    """How the card names who edited the arguments an in-doubt call ran with (its latest
    `decision`, as the dispatcher gives it), as `show` does; None for the model's own."""
    given = call.get("decision")
    if call.get("state") != "in_doubt" or not given:
        return None
    return as_edited(Decision.model_validate(given))


def finished_card(
    head: Head,
    *,
    status: str,
    data: dict[str, Any],
    public_url: str,
    at: datetime,
    masker: Masker,
) -> dict[str, Any]:
    """The JSON card for a session that ended: `status` and `data` are its closing event's
    (`completed`, `failed` or `cancelled`; error_code, message, outcome), `head` gives what
    it spent. `outcome` is a repair's (repaired, tests_failing, tests_not_run, no_changes;
    `tests_not_run` for one whose environment's setup failed), None for other kinds;
    `error` is None unless the end had an error code."""
    base = public_url.rstrip("/")
    sid = quote(head.id, safe="")
    api = f"{base}/api/v1/sessions/{sid}"
    outcome = data.get("outcome") if isinstance(data.get("outcome"), str) else None
    if outcome is None and status in ("completed", "failed"):  # failed: a setup that failed
        found = outcome_of(head.result)
        outcome = found.value if found is not None else None
    code = data.get("error_code") or (head.error_code.value if head.error_code else None)
    message = masker.text(str(data.get("message") or head.error_message or ""))
    if len(message) > MAX_ARGUMENT_CHARS:
        message = message[:MAX_ARGUMENT_CHARS] + " …(cut)"
    return {
        "type": "tickwork.finished",
        "id": f"{head.id}:{head.version}",
        "at": utc_date(at),
        "session": {
            "id": head.id,
            "kind": head.kind,
            "model": head.model,
            "status": status,
            "tenant": head.tenant,
            "submitted_by": head.submitted_by,
            "outcome": outcome,
            #: a repair's failing tests that failed before any change too (`count` of
            #: `of`, the first `tests`): None when none did, or nothing ran before a change
            "failed_before": _failed_before(head.result, masker),
            #: whether a repair's tests passed in its run before any change: None when
            #: nothing ran before a change (or another kind)
            "passed_before": _passed_before(head.result),
            #: why a repair's final tests said nothing of its change to C code (the
            #: extension modules setup built were not rebuilt): None when they did
            "stale_build": _tests_note(head.result, "stale_build", masker),
            #: why a repair's final tests failed whatever its patch (pytest found no
            #: fixture of a plugin the environment lacks): None when none was lacking
            "lacking_plugins": _tests_note(head.result, "lacking_plugins", masker),
            "steps": head.step,
            "tokens": head.tokens,
            "cost_usd": head.cost_usd,
            "created_at": utc_date(head.created_at),
        },
        "error": {"code": str(code), "message": message} if code else None,
        "links": {
            "page": f"{base}/#/sessions/{sid}" if base else None,
            "session": api,
            # a job that makes files (the repair) has a patch; another kind has none
            "patch": f"{api}/patch" if "patch" in head.result else None,
        },
    }


def _failed_before(result: dict[str, Any], masker: Masker) -> dict[str, Any] | None:
    """The result's `failed_before` (`tickwork.fsm.failures`) when some failing test failed
    before any change, else None; the test ids (read from the test output) masked."""
    found = result.get("failed_before")
    if not failed_before_line(found):
        return None
    tests = [masker.text(str(t)) for t in found.get("tests") or ()]
    return {"count": found["count"], "of": found["of"], "tests": tests}


def _tests_note(result: dict[str, Any], key: str, masker: Masker) -> str | None:
    """The final tests' note `key` (`stale_build`: `versions.unrebuilt_note`;
    `lacking_plugins`: `outcomes.lacking_fixtures`), masked; else None."""
    tests = result.get("tests")
    said = tests.get(key) if isinstance(tests, dict) else None
    return masker.text(said) if isinstance(said, str) and said else None


def _passed_before(result: dict[str, Any]) -> bool | None:
    """Whether the result's run before any change (`tests_before`) passed; None without one
    (or one recorded before it said so)."""
    before = result.get("tests_before")
    passed = before.get("passed") if isinstance(before, dict) else None
    return passed if isinstance(passed, bool) else None


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


class _MaskedRequests(logging.Filter):
    """httpx logs each request's whole URL at INFO, the level a worker logs at: a card's
    receiver is shown as `masked_url` shows it, as every other log line does."""

    posting = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(self.posting, "card", False) and isinstance(record.args, tuple):
            record.args = tuple(
                masked_url(str(a)) if isinstance(a, httpx.URL) else a for a in record.args
            )
        return True


#: on httpx's logger while a card is posted (its log lines come in the posting thread)
MASKED_REQUESTS = _MaskedRequests()


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Attempt:
    """One POST of a card."""

    ok: bool
    #: the receiver refused this card (a 4xx other than 408 and 429) or moved (a 301 or
    #: 308): trying again is no use
    final: bool = False
    #: the receiver moved (a 301 or 308): no refusal, a redirect tickwork does not follow
    moved: bool = False
    #: why it failed, the URL's secret parts hidden
    why: str = ""


def post(url: str, document: dict[str, Any], *, timeout_s: float, secret: str = "") -> Attempt:
    """POST `document` once. The card's id goes as `Idempotency-Key` (and, as before,
    `X-Tickwork-Delivery`): the same on every attempt from any worker, so a receiver can
    drop the second copy that at-least-once delivery may bring."""
    body = json.dumps(document, ensure_ascii=False).encode()
    key = str(document.get("id", ""))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "tickwork-webhook",
        "X-Tickwork-Delivery": key,
        "Idempotency-Key": key,
    }
    if secret:
        headers["X-Tickwork-Signature"] = sign(secret, body)
    logging.getLogger("httpx").addFilter(MASKED_REQUESTS)  # once: a filter is added once
    MASKED_REQUESTS.posting.card = True
    try:
        answer = httpx.post(url, content=body, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return Attempt(False, why=f"{type(exc).__name__}: {exc}".replace(url, masked_url(url)))
    finally:
        MASKED_REQUESTS.posting.card = False
    if answer.is_success:
        return Attempt(True)
    code = answer.status_code
    # a permanent redirect answers every try alike: only a new TICKWORK_WEBHOOK_URL helps
    moved = code in PERMANENT_REDIRECTS
    final = moved or (400 <= code < 500 and code not in (408, 429))
    why = f"HTTP {code}"
    target = _redirect_target(answer)
    if target and moved:  # not followed: a card goes only where the deployment says
        why += (
            f", a redirect to {masked_url(target)}, not followed: set TICKWORK_WEBHOOK_URL "
            "to the URL it points to"
        )
    elif target:  # a proxy's 302 to a login page, say: not where cards belong
        why += f", a temporary redirect to {masked_url(target)}, not followed"
    return Attempt(False, final=final, moved=moved, why=why)


#: the answers saying the receiver moved for good (others may send elsewhere for a while)
PERMANENT_REDIRECTS = (301, 308)


def _redirect_target(answer: httpx.Response) -> str:
    """Where a redirect points, a relative `Location` taken against the request's URL;
    "" for an answer that is not one (or has no `Location`)."""
    if not answer.is_redirect:
        return ""
    try:
        return str(answer.next_request.url) if answer.next_request is not None else ""
    except httpx.HTTPError:
        return ""


def backoff(attempt: int, *, first_s: float, max_s: float = MAX_BACKOFF_S) -> float:
    """The pause after failed attempt number `attempt` (1, 2, ...): doubling, capped."""
    return min(first_s * 2.0 ** min(max(attempt - 1, 0), 32), max_s)
