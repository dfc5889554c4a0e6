"""What the Core store answers beside a session's own reads and writes: the relay's scans,
the dead-letter queue, retention, the webhook cards, environments, the gauges and the
health check. Each method is one call of its module with the store's engine; `CoreStore`
(and so `PostgresStore`) inherits them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text
from tickwork.fsm.admission import Admission
from tickwork.fsm.values import Head, Session
from tickwork.store import (
    admission,
    dead_letter_counts,
    dead_letters,
    error_signatures,
    gauges,
    liveness,
    relay,
    trees,
)
from tickwork.store.dead_letters import Closing, DeadLetter
from tickwork.store.deliveries import Cards
from tickwork.store.environments import Environments
from tickwork.store.gauges import Gauges
from tickwork.store.lifecycle import Retention
from tickwork.store.relay import Due


class Services:
    """The store's methods that are not a session's: the relay, dead letters, retention,
    cards, environments, gauges, health."""

    engine: Engine
    #: the session by id, whole (`CoreStore.load`), for retention's archive
    load: Callable[[str], Session]

    def due_ticks(self, *, now: datetime, older_than_s: float, limit: int = 500) -> list[Due]:
        """The relay's scan of the outbox (`relay.due_ticks`)."""
        return relay.due_ticks(self.engine, now=now, older_than_s=older_than_s, limit=limit)

    def expired_leases(self, *, now: datetime, limit: int = 500) -> list[Due]:
        """The relay's scan for sessions whose worker died (`relay.expired_leases`)."""
        return relay.expired_leases(self.engine, now=now, limit=limit)

    def offer_again(self, session_id: str, version: int, *, now: datetime) -> None:
        """A tick refused for its runtime level, offered again at the relay's usual pace."""
        relay.offer_again(self.engine, session_id, version, now=now)

    def refuse_tick(
        self, session_id: str, version: int, *, worker: str, reason: str, now: datetime
    ) -> bool:
        """A tick `worker` cannot run, recorded once (`relay.refuse_tick`)."""
        return relay.refuse_tick(
            self.engine, session_id, version, worker=worker, reason=reason, now=now
        )

    def admit(
        self,
        policy: Admission,
        *,
        now: datetime,
        tenants: Sequence[str] | None = None,
        budget: int = admission.PASS_BUDGET,
    ) -> list[Due]:
        """One pass of admission (`admission.admit`)."""
        return admission.admit(self.engine, policy, now=now, tenants=tenants, budget=budget)

    def expire(self, *, now: datetime, limit: int = admission.EXPIRY_SCAN) -> list[Head]:
        """The full pass's deadline expiry (`admission.expire`)."""
        return admission.expire(self.engine, now=now, limit=limit)

    @functools.cached_property
    def _signs(self) -> liveness.Signs | None:
        return liveness.signs_for(self.engine)

    def hold_sign(self, key: int) -> liveness.Sign | None:
        """This worker's sign of life (`liveness.signs_for`), or None."""
        return None if self._signs is None else self._signs.hold(key)

    def workers_alive(self) -> bool | None:
        """Whether a worker holds a sign of life on this database (`Signs.any_held`), or
        None where the database has none."""
        if self._signs is None:
            return None
        with self.engine.connect() as conn:
            return self._signs.any_held(conn)

    def absent_signs(self) -> set[int]:
        """Signs named by leases whose holder is gone (`liveness.absent`)."""
        return set() if self._signs is None else liveness.absent(self.engine, self._signs)

    def take_over(self, keys: Iterable[int], *, now: datetime) -> list[Due]:
        """A gone holder's sessions, taken over (`liveness.take_over`)."""
        if self._signs is None:
            return []
        return liveness.take_over(self.engine, self._signs, keys, now=now)

    def missed_wakes(self, *, now: datetime, limit: int = 500) -> list[tuple[str, int]]:
        """Wake the parents still waiting on a complete join (`trees.missed_wakes`)."""
        return trees.missed_wakes(self.engine, now=now, limit=limit)

    def settle_ended(self, *, now: datetime, limit: int = 500) -> list[str]:
        """Charge ended parents the children's ends they never had (`trees.settle_ended`)."""
        return trees.settle_ended(self.engine, now=now, limit=limit)

    def to_cancel(self, *, limit: int = 500) -> list[str]:
        """Children still going whose tree is cancelled or whose join needs no more
        (`trees.to_cancel`)."""
        return trees.to_cancel(self.engine, limit=limit)

    def dead_letters(
        self,
        *,
        code: str | None = None,
        kind: str | None = None,
        since: datetime | None = None,
        unresolved: bool = False,
        limit: int = 100,
        with_snapshot: bool = False,
        tenant: str | None = None,
        submitted_by: str | None = None,
        offset: int = 0,
        session_id: str | None = None,
    ) -> list[DeadLetter]:
        """Newest first, past the first `offset`; only `tenant`'s, `submitted_by`'s and
        `session_id`'s (its one letter, whatever its id looks like), if given."""
        return dead_letters.list_dead_letters(
            self.engine,
            code=code,
            kind=kind,
            since=since,
            unresolved=unresolved,
            limit=limit,
            with_snapshot=with_snapshot,
            tenant=tenant,
            submitted_by=submitted_by,
            offset=offset,
            session_id=session_id,
        )

    def dead_letter(self, key: int | str) -> DeadLetter:
        """By dead-letter id, or by the failed session's id; DeadLetterNotFound if none."""
        return dead_letters.get_dead_letter(self.engine, key)

    def close_dead_letter(
        self, key: int | str, *, state: Closing, by: str, reason: str, now: datetime
    ) -> DeadLetter:
        """Resolve or dismiss a dead letter without forking it; refused if already closed."""
        return dead_letters.close(self.engine, key, state=state, by=by, reason=reason, now=now)

    def dead_letter_stats(
        self,
        *,
        by: str,
        since: datetime | None = None,
        tenant: str | None = None,
        submitted_by: str | None = None,
        unresolved: bool = False,
    ) -> list[dict[str, Any]]:
        """Counts of dead letters grouped by one of `dead_letters.GROUPS`, largest first;
        only `tenant`'s if given, only those not forked, resolved or dismissed if
        `unresolved`."""
        return dead_letters.stats(
            self.engine,
            by=by,
            since=since,
            tenant=tenant,
            submitted_by=submitted_by,
            unresolved=unresolved,
        )

    def recount_dead_letters(self) -> int:
        """Derive every dead letter's error signature again and count them afresh for their
        stats (after an upgrade that changed the signature, or dead letters written by
        workers older than migration 0009); the count rows written."""
        with self.engine.begin() as conn:
            dead_letter_counts.lock(conn)
            error_signatures.rederive(conn)
            return dead_letter_counts.rebuild(conn)

    def dead_letter_rows(
        self,
        *,
        code: str | None = None,
        kind: str | None = None,
        since: datetime | None = None,
        unresolved: bool = False,
        with_snapshot: bool = False,
        tenant: str | None = None,
        submitted_by: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The export's flat rows (`dead_letters.EXPORT_COLUMNS`), oldest first, in batches;
        only `tenant`'s, and `submitted_by`'s, if given."""
        return dead_letters.export_rows(
            self.engine,
            code=code,
            kind=kind,
            since=since,
            unresolved=unresolved,
            with_snapshot=with_snapshot,
            tenant=tenant,
            submitted_by=submitted_by,
        )

    def dead_letter_timeline(
        self,
        *,
        bucket: str = "day",
        since: datetime,
        now: datetime,
        tenant: str | None = None,
        submitted_by: str | None = None,
    ) -> dict[str, Any]:
        """Dead letters per day or hour and code (`dead_letters.timeline`)."""
        return dead_letters.timeline(
            self.engine,
            bucket=bucket,
            since=since,
            now=now,
            tenant=tenant,
            submitted_by=submitted_by,
        )

    @property
    def retention(self) -> Retention:
        """Retention's passes and the archive index (`store/lifecycle.py`)."""
        return Retention(self.engine, self.load)

    @property
    def cards(self) -> Cards:
        """The webhook cards' deliveries (approval and finished), for the dispatcher."""
        return Cards(self.engine)

    @property
    def environments(self) -> Environments:
        """Repair jobs' environments: the build's claim, their uses (`store/environments.py`)."""
        return Environments(self.engine)

    def gauges(self, *, now: datetime) -> Gauges:
        """What the metrics' gauges show, read in one connection."""
        return gauges.read(self.engine, now=now)

    def revisions(self) -> set[str]:
        """The migration revisions the database's schema is at (none: no schema);
        StoreUnavailable if the database does not answer."""
        from alembic.runtime.migration import MigrationContext  # the CLI starts without it

        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            return set(MigrationContext.configure(conn).get_current_heads())

    def close(self) -> None:
        """Close the pooled connections; the store opens new ones if used again."""
        self.engine.dispose()
