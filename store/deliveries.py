"""The webhook outbox: the events a save writes that a card tells of, and their deliveries.

Two kinds of card: an approval card (the `approval_requested` event) and, when the
deployment asks for it, a finished card (the `completed`, `failed` or `cancelled` event
that ends a session). The event row is written in the tick's own transaction, so a card
cannot be lost with a worker: a dispatcher (`tickwork.worker.tick.dispatcher`) in any worker
finds the events with no delivered card, takes one for a while (`FOR UPDATE SKIP LOCKED` on
Postgres; SQLite serialises writers), posts it and records the answer here. An approval
card whose session moved on before it went out is not sent any more. A card is sent only
for a wait or an end younger than the dispatcher's `since` when first taken (the
deployment's TICKWORK_WEBHOOK_MAX_AGE_S), so turning webhooks on sends none for sessions
that began waiting, or ended, long before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, exists, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from tickwork.fsm.values import EventKind, Status
from tickwork.store.edge import guarded
from tickwork.store.schema import DUE_SQL, GIVEN_UP_SQL, MOVED_ON, deliveries, events, sessions

WAITING = Status.WAITING_APPROVAL.value
REQUESTED = EventKind.APPROVAL_REQUESTED.value
#: the events that end a session: each the outbox row of a finished card
FINISHED = (EventKind.COMPLETED.value, EventKind.FAILED.value, EventKind.CANCELLED.value)
#: the predicate of the partial index `ix_tickwork_events_finished` (migration 0016_cards),
#: written as literal SQL in the queries as in the index: SQLite uses a partial index only
#: when the query's WHERE has its predicate's very terms, and a bound parameter never is
FINISHED_SQL = "tickwork_events.kind IN ('completed', 'failed', 'cancelled')"


@dataclass(frozen=True)
class Card:
    """A card to post: its event, and the attempts made before this one."""

    event_id: int
    session_id: str
    #: the session's version when it started waiting or ended (the card's id is
    #: `session:version`)
    version: int
    at: datetime
    #: the calls waiting for a person (an approval card)
    calls: tuple[str, ...]
    attempts: int
    #: the event's kind: `approval_requested`, or `completed`/`failed`/`cancelled`
    kind: str = REQUESTED
    #: the event's data (a finished card: error_code, message, outcome)
    data: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.kind in FINISHED

    @property
    def key(self) -> str:
        """The card's id and idempotency key: the same on every attempt, from any worker."""
        return f"{self.session_id}:{self.version}"


def _still_waiting() -> Any:
    """The approval events whose session still waits for the calls they asked about: the
    session's latest such event while it waits (a decision on some of the calls moves the
    version on, and the card still goes out for the others)."""
    later = events.alias("later")
    return (
        events.join(
            sessions,
            (sessions.c.id == events.c.session_id) & (sessions.c.version >= events.c.version),
        ),
        (sessions.c.status == WAITING)
        & (events.c.kind == REQUESTED)
        & ~exists().where(
            later.c.session_id == events.c.session_id,
            later.c.kind == REQUESTED,
            later.c.id > events.c.id,
        ),
    )


def new_finished(since: datetime) -> Any:
    """The ends of sessions at or after `since` that no dispatcher took yet: a range of
    the partial index of finished events."""
    return select(events.c.id).where(
        text(FINISHED_SQL),
        events.c.at >= since,
        ~exists().where(deliveries.c.event_id == events.c.id),
    )


def take(
    engine: Engine,
    *,
    now: datetime,
    hold_s: float,
    limit: int = 1,
    approvals: bool = True,
    approvals_since: datetime | None = None,
    finished_since: datetime | None = None,
) -> list[Card]:
    """Up to `limit` cards due now, held for `hold_s` (another dispatcher takes them again
    after that, if this one died posting them); each taking counts one attempt. Approval
    cards if `approvals`, of the waits that began at or after `approvals_since` if given;
    finished cards, if `finished_since` is given, of the sessions that ended at or after
    it (each bound when first taken: then tried to its attempts)."""
    columns = (
        deliveries.c.event_id,
        deliveries.c.attempts,
        deliveries.c.next_attempt_at,
        events.c.session_id,
        events.c.version,
        events.c.at,
        events.c.kind,
        events.c.data,
    )
    due_now = (
        deliveries.c.delivered_at.is_(None),
        deliveries.c.next_attempt_at.is_not(None),
        deliveries.c.next_attempt_at <= now,
    )
    undelivered = ~exists().where(deliveries.c.event_id == events.c.id)
    news, dues = [], []
    if approvals:
        joined, waiting = _still_waiting()
        fresh = () if approvals_since is None else (events.c.at >= approvals_since,)
        news.append(select(events.c.id).select_from(joined).where(waiting, *fresh, undelivered))
        dues.append(
            select(*columns)
            .select_from(joined.join(deliveries, deliveries.c.event_id == events.c.id))
            .where(waiting, *due_now)
        )
    if finished_since is not None:
        news.append(new_finished(finished_since))
        # a card once taken is tried to its attempts, however old its end gets meanwhile
        dues.append(
            select(*columns)
            .select_from(events.join(deliveries, deliveries.c.event_id == events.c.id))
            .where(text(FINISHED_SQL), *due_now)
        )
    with engine.begin() as conn:
        found = [r for new in news for r in conn.execute(new).all()]
        if found:
            dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
            conn.execute(
                dialect.insert(deliveries).on_conflict_do_nothing(),
                [{"event_id": r.id, "attempts": 0, "next_attempt_at": now} for r in found],
            )
        rows = [
            r
            for due in dues
            for r in conn.execute(
                due.order_by(deliveries.c.next_attempt_at, deliveries.c.event_id)
                .limit(limit)
                .with_for_update(skip_locked=True, of=deliveries)
            ).all()
        ]
        # the earliest due of both kinds; the others' locks end with this transaction
        rows = sorted(rows, key=lambda r: (r.next_attempt_at, r.event_id))[:limit]
        if rows:
            conn.execute(
                update(deliveries)
                .where(deliveries.c.event_id.in_([r.event_id for r in rows]))
                .values(
                    attempts=deliveries.c.attempts + 1,
                    next_attempt_at=now + timedelta(seconds=hold_s),
                )
            )
    return [
        Card(
            event_id=r.event_id,
            session_id=r.session_id,
            version=r.version,
            at=r.at,
            calls=tuple(str(c) for c in (r.data or {}).get("calls", ())),
            attempts=r.attempts,
            kind=r.kind,
            data=dict(r.data or {}),
        )
        for r in rows
    ]


def delivered(engine: Engine, event_id: int, *, now: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(
            update(deliveries)
            .where(deliveries.c.event_id == event_id)
            .values(delivered_at=now, next_attempt_at=None, last_error="")
        )


def failed(engine: Engine, event_id: int, *, error: str, retry_at: datetime | None) -> None:
    """An attempt failed: try again at `retry_at`, or (None) never again."""
    with engine.begin() as conn:
        conn.execute(
            update(deliveries)
            .where(deliveries.c.event_id == event_id, deliveries.c.delivered_at.is_(None))
            .values(next_attempt_at=retry_at, last_error=error[:2000])
        )


def drop_moved_on(engine: Engine, *, limit: int = 500) -> int:
    """Stop trying the approval cards whose session moved on (decided, cancelled) or is
    gone; how many. (A finished card never goes stale: its session stays ended.)"""
    joined, waiting = _still_waiting()
    live = select(events.c.id).select_from(joined).where(waiting)
    stale = (
        select(deliveries.c.event_id)
        .where(
            deliveries.c.delivered_at.is_(None),
            deliveries.c.next_attempt_at.is_not(None),
            deliveries.c.event_id.not_in(live),
            # correlated: one primary-key look per undelivered card (an uncorrelated IN
            # would read every approval event on SQLite)
            exists().where(events.c.id == deliveries.c.event_id, events.c.kind == REQUESTED),
        )
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    with engine.begin() as conn:
        ids = [r.event_id for r in conn.execute(stale).all()]
        if ids:
            conn.execute(
                update(deliveries)
                .where(deliveries.c.event_id.in_(ids))
                .values(next_attempt_at=None, last_error=MOVED_ON)
            )
    return len(ids)


@dataclass(frozen=True)
class GivenUp:
    """A card no dispatcher tries any more for want of its receiver (its attempts spent, or
    refused with a 4xx): not one whose session moved on before it went out."""

    session_id: str
    #: the session's version when it started waiting or ended (the card's id)
    version: int
    #: the event's kind: `approval_requested`, or `completed`/`failed`/`cancelled`
    kind: str
    tenant: str
    attempts: int
    last_error: str
    #: when the event the card tells of happened
    at: datetime

    @property
    def key(self) -> str:
        return f"{self.session_id}:{self.version}"


def _where(predicate: str, session_ids: Sequence[str] | None) -> Any:
    """The WHERE of the cards a partial index's `predicate` holds (of `session_ids` only, if
    given): the index's own predicate, as literal SQL (a bound parameter would not use it)."""
    terms: list[Any] = [text(predicate)]
    if session_ids is not None:
        terms.append(events.c.session_id.in_(list(session_ids)))
    return and_(*terms)


def _given_up(session_ids: Sequence[str] | None) -> Any:
    """The WHERE of the cards given up (of `session_ids` only, if given)."""
    return _where(GIVEN_UP_SQL, session_ids)


def given_up(
    engine: Engine, *, limit: int, session_ids: Sequence[str] | None = None
) -> list[GivenUp]:
    """The oldest `limit` cards given up, oldest first (of `session_ids` only, if given):
    what an operator sends again once the receiver answers (`send_again`)."""
    query = _cards().where(_given_up(session_ids)).order_by(events.c.id).limit(limit)
    with engine.connect() as conn:
        return [GivenUp(**row) for row in conn.execute(query).mappings()]


@dataclass(frozen=True)
class Pending(GivenUp):
    """A card a dispatcher is to try (again) at `next_attempt_at`: one whose receiver
    failed and that has attempts left, one put back by `send_again`, or one taken by a
    dispatcher now (held ahead while it posts it)."""

    next_attempt_at: datetime | None = None


def pending(
    engine: Engine, *, limit: int, session_ids: Sequence[str] | None = None
) -> list[Pending]:
    """The `limit` cards due soonest, soonest first (of `session_ids` only, if given): the
    cards put back or retried that no dispatcher has delivered yet. A card no dispatcher
    has taken yet has no delivery and is not among them."""
    query = (
        _cards(deliveries.c.next_attempt_at)
        .where(_where(DUE_SQL, session_ids))
        .order_by(deliveries.c.next_attempt_at, events.c.id)
        .limit(limit)
    )
    with engine.connect() as conn:
        return [Pending(**row) for row in conn.execute(query).mappings()]


def _cards(*more: Any) -> Any:
    """The cards' deliveries as `GivenUp` reads them (their session's tenant, if it is
    still there), and the columns `more`."""
    return select(
        *more,
        events.c.session_id,
        events.c.version,
        events.c.kind,
        events.c.at,
        func.coalesce(sessions.c.tenant, "").label("tenant"),
        deliveries.c.attempts,
        deliveries.c.last_error,
    ).select_from(
        deliveries.join(events, events.c.id == deliveries.c.event_id).outerjoin(
            sessions, sessions.c.id == events.c.session_id
        )
    )


def send_again(
    engine: Engine, *, now: datetime, session_ids: Sequence[str] | None = None
) -> list[GivenUp]:
    """Have the dispatchers try the cards given up again at their next pass, each with its
    attempts anew (of `session_ids` only, if given); the cards so put back. An approval
    card whose session no longer waits is then dropped, not sent (`drop_moved_on`)."""
    query = (
        _cards(deliveries.c.event_id)
        .where(_given_up(session_ids))
        .order_by(events.c.id)
        .with_for_update(of=deliveries, skip_locked=True)
    )
    with engine.begin() as conn:
        rows = [dict(row) for row in conn.execute(query).mappings()]
        ids = [row.pop("event_id") for row in rows]
        if not ids:
            return []
        conn.execute(
            update(deliveries)
            .where(deliveries.c.event_id.in_(ids), deliveries.c.delivered_at.is_(None))
            .values(attempts=0, next_attempt_at=now, last_error="")
        )
    return [GivenUp(**row) for row in rows]


def state(
    engine: Engine, session_id: str, version: int, *, kinds: tuple[str, ...] = (REQUESTED,)
) -> dict[str, Any] | None:
    """The delivery of the card of `session_id` at `version` (attempts, next attempt,
    delivered, last error), or None if no dispatcher took it yet; `kinds`: the event's
    (`FINISHED` for a finished card)."""
    query = (
        select(deliveries)
        .join(events, events.c.id == deliveries.c.event_id)
        .where(
            events.c.session_id == session_id,
            events.c.version == version,
            events.c.kind.in_(kinds),
        )
    )
    with engine.connect() as conn:
        row = conn.execute(query).mappings().first()
    return None if row is None else dict(row)


@guarded
class Cards:
    """The webhook cards' deliveries of one store (`Store.cards`): what a dispatcher asks."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def take(
        self,
        *,
        now: datetime,
        hold_s: float,
        limit: int = 1,
        approvals: bool = True,
        approvals_since: datetime | None = None,
        finished_since: datetime | None = None,
    ) -> list[Card]:
        return take(
            self.engine,
            now=now,
            hold_s=hold_s,
            limit=limit,
            approvals=approvals,
            approvals_since=approvals_since,
            finished_since=finished_since,
        )

    def delivered(self, event_id: int, *, now: datetime) -> None:
        delivered(self.engine, event_id, now=now)

    def failed(self, event_id: int, *, error: str, retry_at: datetime | None) -> None:
        failed(self.engine, event_id, error=error, retry_at=retry_at)

    def drop_moved_on(self, *, limit: int = 500) -> int:
        return drop_moved_on(self.engine, limit=limit)

    def state(
        self, session_id: str, version: int, *, kinds: tuple[str, ...] = (REQUESTED,)
    ) -> dict[str, Any] | None:
        return state(self.engine, session_id, version, kinds=kinds)

    def given_up(self, *, session_ids: Sequence[str] | None = None, limit: int) -> list[GivenUp]:
        return given_up(self.engine, session_ids=session_ids, limit=limit)

    def send_again(
        self, *, now: datetime, session_ids: Sequence[str] | None = None
    ) -> list[GivenUp]:
        return send_again(self.engine, now=now, session_ids=session_ids)

    def pending(self, *, session_ids: Sequence[str] | None = None, limit: int) -> list[Pending]:
        return pending(self.engine, session_ids=session_ids, limit=limit)
