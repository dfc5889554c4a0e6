"""The session repository through SQLAlchemy Core: create, claim, save, decide, cancel,
fork, load, on SQLite or any database SQLAlchemy speaks.

Every write is one short transaction; none is held while a model or tool runs. The tick's
three writes (`_take`, `_start`, `_save`) are the seams `postgres.PostgresStore` fills with
one statement each; what they write is built in `ticks.py`, once for both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from tickwork.fsm import machine
from tickwork.fsm.admission import TenantLimit
from tickwork.fsm.approvals import already_decided
from tickwork.fsm.context import Estimate
from tickwork.fsm.errors import SessionExists, SessionFinished, SessionNotFound
from tickwork.fsm.forks import UNPRICED, ForkPatch, TokenPrice, fork
from tickwork.fsm.joins import Join
from tickwork.fsm.machine import Change
from tickwork.fsm.tenants import Quotas
from tickwork.fsm.trees import Place
from tickwork.fsm.values import (
    RUNTIME_LEVEL,
    CallState,
    Decision,
    Event,
    Head,
    Observation,
    Session,
    Status,
    Step,
    ToolCall,
)
from tickwork.store import admission, dead_letters, reads, rows, trees, writes
from tickwork.store import quotas as tenant_quotas
from tickwork.store.artifacts import Artifacts, open_artifacts
from tickwork.store.edge import guarded
from tickwork.store.files import FileChange, Saved, current_state, fork_start, saved_changes
from tickwork.store.schema import (
    events,
    file_changes,
    observations,
    outbox,
    sessions,
)
from tickwork.store.services import Services
from tickwork.store.ticks import (
    NO_STEPS,
    Claimed,
    Idempotent,
    Lease,
    Taken,
    not_started,
    started_event,
)
from tickwork.store.transcripts import Transcript, Transcripts

#: the most leases one statement of `renew_leases` renews (three parameters each: well
#: inside SQLite's and Postgres's limits)
RENEW_BATCH = 500


@guarded
class CoreStore(Services):
    """Sessions on one database through SQLAlchemy Core: the embedded default's SQLite,
    and any database (Postgres too, where `PostgresStore` is the faster variant). Build
    one with `store.open_store`."""

    def __init__(self, engine: Engine, *, transcripts: int = 64) -> None:
        self.engine = engine
        self._transcripts = Transcripts(transcripts)
        self._stored_bytes = tenant_quotas.StoredBytes()

    @property
    def transcripts(self) -> Transcripts:
        """The transcripts this process keeps read, so a THINK claim reads only new steps."""
        return self._transcripts

    def create(
        self,
        session: Session,
        *,
        now: datetime,
        quotas: Quotas | None = None,
        limit: TenantLimit | None = None,
    ) -> Head:
        """Insert a new session (or a fork) and, if it is runnable, its first tick. With
        `quotas` (its tenant's), QuotaExceeded if it would take the tenant past one: checked
        under the tenant's lock in the insert's transaction (`quotas.py`). With `limit`
        (its tenant's) it goes through admission: beyond the tenant's in-flight limit or
        its concurrency key's, it is stored `queued`, with no tick (`admission.py`)."""
        return self._insert(session, now=now, quotas=quotas, limit=limit)

    def _insert(
        self,
        session: Session,
        *,
        now: datetime,
        resolves: str | None = None,
        by: str = "",
        again: bool = False,
        files: FileChange | None = None,
        quotas: Quotas | None = None,
        limit: TenantLimit | None = None,
    ) -> Head:
        try:
            with self.engine.begin() as conn:
                if quotas is not None:
                    tenant_quotas.lock(conn, session.head.tenant)
                    tenant_quotas.check(
                        conn, session.head, quotas, now=now, stored=self._stored_bytes
                    )
                if limit is not None:
                    head = admission.placed(conn, session.head, limit)
                    session = session.model_copy(update={"head": head})
                if resolves is not None:
                    dead_letters.record_fork(
                        conn, resolves, fork=session.head.id, by=by, now=now, again=again
                    )
                writes.insert_session(conn, session, now=now)
                if files is not None:
                    head = session.head
                    conn.execute(insert(file_changes), [files.row(head.id, head.version)])
            return session.head
        except IntegrityError:
            with self.engine.connect() as conn:
                query = select(sessions.c.id).where(sessions.c.id == session.head.id)
                taken = conn.execute(query).first() is not None
            if taken:
                raise SessionExists(
                    f"a session with id {session.head.id!r} exists already; choose another id"
                ) from None
            raise

    def lease(self, session_id: str) -> tuple[str, datetime] | None:
        """Who holds the session's lease and until when; None if nobody does."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(sessions.c.lease_owner, sessions.c.lease_expires_at).where(
                    sessions.c.id == session_id
                )
            ).first()
        if row is None:
            raise SessionNotFound.of(session_id)
        if row.lease_owner is None or row.lease_expires_at is None:
            return None
        return row.lease_owner, row.lease_expires_at

    def forks(self, session_id: str) -> list[dict[str, Any]]:
        """The sessions forked from this one, oldest first: id, step, status, when, and who
        made it (`submitted_by`)."""
        query = (
            select(
                sessions.c.id,
                sessions.c.fork_step,
                sessions.c.status,
                sessions.c.created_at,
                sessions.c.submitted_by,
            )
            # a child names its parent too, but is not a fork (`children`)
            .where(sessions.c.parent_id == session_id, sessions.c.spawn_call.is_(None))
            .order_by(sessions.c.created_at, sessions.c.id)
        )
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def day_spent(self, tenant: str, *, day: datetime) -> float:
        with self.engine.connect() as conn:
            return tenant_quotas.spent_on(conn, tenant, day=day)

    def get(self, session_id: str) -> Head:
        with self.engine.connect() as conn:
            return reads.read_head(conn, session_id)

    def ids_starting(self, prefix: str, *, limit: int, tenant: str | None = None) -> list[str]:
        only = [] if tenant is None else [sessions.c.tenant == tenant]
        with self.engine.connect() as conn:
            return reads.ids_starting(conn, sessions.c.id, prefix, limit=limit, where=only)

    def load(self, session_id: str) -> Session:
        with self.engine.connect() as conn:
            return reads.read_session(conn, session_id)

    def find_call(self, session_id: str, call_id: str) -> tuple[Head, ToolCall | None]:
        """The session's head and its call `call_id`, or None for a call it does not have;
        two rows read, whatever the session's length. Raises SessionNotFound."""
        with self.engine.connect() as conn:
            return reads.read_head(conn, session_id), reads.read_call(conn, session_id, call_id)

    def observation(self, session_id: str, call_id: str) -> Observation | None:
        """The stored observation of the session's call `call_id`, or None: one row read
        (what `recall` gives the model back, without running anything again)."""
        if "\x00" in call_id:
            return None
        query = select(observations).where(
            observations.c.session_id == session_id, observations.c.call_id == call_id
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else rows.observation_from_row(row)

    def list_sessions(
        self,
        *,
        status: str | Sequence[str] = (),
        kind: str | None = None,
        error_code: str | None = None,
        outcome: str | None = None,
        submitted_by: str | None = None,
        parent_id: str | None = None,
        tenant: str | None = None,
        id_prefix: str | None = None,
        limit: int = 50,
        offset: int = 0,
        waited_longest_first: bool = False,
    ) -> list[Head]:
        """Newest first (`waited_longest_first`: those whose last wait for a person began
        first, `reads.waiting_since`); only `tenant`'s if given."""
        query = select(sessions)
        if id_prefix:
            if "\x00" in id_prefix:  # no id holds one, and Postgres refuses it as a parameter
                return []
            query = query.where(reads.starts_with(sessions.c.id, id_prefix))
        if tenant is not None:
            query = query.where(sessions.c.tenant == tenant)
        if status:
            wanted = [status] if isinstance(status, str) else list(status)
            query = query.where(sessions.c.status.in_(wanted))
        if kind:
            query = query.where(sessions.c.kind == kind)
        if error_code:
            query = query.where(sessions.c.error_code == error_code)
        if outcome:
            query = query.where(sessions.c.outcome == outcome)
        if submitted_by:
            query = query.where(sessions.c.submitted_by == submitted_by)
        if parent_id:
            query = query.where(sessions.c.parent_id == parent_id)
        order: ColumnElement[Any] = sessions.c.created_at.desc()
        if waited_longest_first:
            order = reads.waiting_since()
        query = query.order_by(order, sessions.c.id).limit(limit)
        with self.engine.connect() as conn:
            return [rows.head_from_row(r) for r in conn.execute(query.offset(offset)).mappings()]

    def events_after(
        self, session_id: str, after_id: int = 0, limit: int = 1000
    ) -> list[tuple[int, Event]]:
        query = (
            select(events)
            .where(events.c.session_id == session_id, events.c.id > after_id)
            .order_by(events.c.id)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [(r["id"], rows.event_from_row(r)) for r in conn.execute(query).mappings()]

    def claim(
        self,
        session_id: str,
        version: int,
        *,
        owner: str,
        now: datetime,
        lease_s: float,
        level: int = RUNTIME_LEVEL,
        idempotent: Idempotent | None = None,
    ) -> Claimed | None:
        """Take the session for one micro-phase, or None if the tick is stale or not ours to run.

        Succeeds only if the session is runnable at `version` with no live lease and needs
        no runtime level above `level` (the claiming worker's); deletes that version's
        outbox row in the same transaction. A session refused for its level is left exactly
        as it was, its outbox row too, so the relay offers the tick again (to a worker of
        its level, in a rolling upgrade). A THINK claim reads the steps
        after those this process read last time (`transcripts.py`). An EXECUTE claim marks
        the step's next call started in the same transaction when `ticks.startable` says it
        may (its tool in `idempotent`, the worker's idempotent tools per session kind):
        `Claimed.started` names it.
        """
        known = self._transcripts.get(session_id)
        # a miss claims without reading steps (an EXECUTE tick needs none), then a THINK
        # reads from the latest compaction on (`_context_start`): bounded by the context
        # policy, not by the session's length
        after = known.step if known is not None else NO_STEPS
        expires = now + timedelta(seconds=lease_s)
        taken = self._take(
            Lease(session_id, version, owner, now),
            expires=expires,
            after=after,
            level=level,
            idempotent=idempotent or {},
        )
        if taken is None:
            return None
        claimed, mark = taken
        if claimed.head.status is Status.EXECUTING:
            return claimed
        if known is not None and known.continued_by(claimed.head, mark):
            history = known.steps + claimed.steps
            seen = {**known.observations, **claimed.observations}
        elif claimed.head.step == 0:  # a session's first THINK: it has no step to read
            history, seen = (), {}
        else:  # a miss, or what we knew was of another session under this id
            # read under our lease after the claim's commit: no step is appended meanwhile
            history, seen = self._history(session_id)
        history, seen = reads.needed(history, seen)
        head = claimed.head
        self._transcripts.put(session_id, Transcript(head.created_at, head.step, history, seen))
        return replace(claimed, steps=history, observations=seen)

    def renew(
        self, session_id: str, version: int, *, owner: str, now: datetime, lease_s: float
    ) -> bool:
        """Extend our lease while a long call runs; False if it is no longer ours."""
        leases = [(session_id, version, owner)]
        return (session_id, version) in self.renew_leases(leases, now=now, lease_s=lease_s)

    def renew_leases(
        self, leases: Sequence[tuple[str, int, str]], *, now: datetime, lease_s: float
    ) -> set[tuple[str, int]]:
        """`renew` of many leases, each a (session, version, owner), in one transaction: the
        (session, version) of those still ours."""
        expires = now + timedelta(seconds=lease_s)
        renewed: set[tuple[str, int]] = set()
        if not leases:
            return renewed
        with self.engine.begin() as conn:
            for at in range(0, len(leases), RENEW_BATCH):
                batch = list(leases[at : at + RENEW_BATCH])
                renewed |= writes.renew_leases(conn, batch, expires=expires)
        return renewed

    def start_call(
        self,
        session_id: str,
        version: int,
        call: ToolCall,
        *,
        owner: str,
        now: datetime,
        rerun: bool = False,
    ) -> None:
        """Mark `call` started before it runs, so a crash leaves it visibly in doubt."""
        event = started_event(session_id, version, call, now=now, rerun=rerun)
        if not self._start(Lease(session_id, version, owner, now), call, event):
            raise not_started(session_id, version, owner, call.call_id)

    def save(
        self,
        change: Change,
        *,
        version: int,
        owner: str | None,
        now: datetime,
        files: FileChange | None = None,
    ) -> Head:
        """Move the head to `version + 1` if it is still at `version` under our lease, and
        append what the change made (and the tick's change to the session's files), in one
        transaction. Raises ClaimLost otherwise."""
        return self._save(Lease(change.head.id, version, owner, now), change, files)

    def _take(
        self, lease: Lease, *, expires: datetime, after: int, level: int, idempotent: Idempotent
    ) -> Taken | None:
        """The claim's write: take the lease until `expires` of a session needing at most
        runtime level `level`, drop the version's outbox row, read what the tick needs (a
        THINK: the steps after step `after`; an EXECUTE: the step's calls, the one
        `ticks.startable` picks out of `idempotent` marked started)."""
        with self.engine.begin() as conn:
            return writes.take_lease(
                conn, lease, expires=expires, after=after, level=level, idempotent=idempotent
            )

    def _history(self, session_id: str) -> tuple[tuple[Step, ...], dict[str, Observation]]:
        """What a THINK reads of a session its process has not read before: the steps from
        the context's start on (`reads.context_start`: bounded by the context policy, not
        by the session's length) with their calls and observations."""
        with self.engine.connect() as conn:
            start, masked = reads.context_start(conn, session_id)
            return reads.read_history(conn, session_id, after=start, masked=masked)

    def _start(self, lease: Lease, call: ToolCall, event: dict[str, Any]) -> bool:
        """Mark `call` started and record `event`, if the lease is still ours."""
        with self.engine.begin() as conn:
            return writes.mark_started(conn, lease, call, event)

    def _save(self, lease: Lease, change: Change, files: FileChange | None) -> Head:
        """The save's write: the compare-and-swap, the calls closed, the rows appended."""
        with self.engine.begin() as conn:
            return writes.apply_change(
                conn, change, version=lease.version, owner=lease.owner, now=lease.now, files=files
            )

    def decide(self, session_id: str, decision: Decision, *, now: datetime) -> Head:
        """Record one person's decision on one call; each call is decided once."""
        with self.engine.begin() as conn:
            head = reads.read_head(conn, session_id, lock=True)
            existing = reads.read_decisions(conn, session_id, (decision.call_id,)).get(
                decision.call_id
            )
            current = reads.read_calls(conn, session_id, step=head.step)
            call = next((c for c in current if c.call_id == decision.call_id), None)
            # a decision made before the call went in doubt does not count for the doubt
            if existing is not None and (call is None or call.state is not CallState.IN_DOUBT):
                raise already_decided(existing, session_id=session_id)
            if call is None:
                reads.missing_call(conn, head, decision.call_id)
            if existing is not None:
                decision = decision.model_copy(update={"attempt": existing.attempt + 1})
            change = machine.decide(head, current, decision, existing, now=now)
            try:
                with conn.begin_nested():
                    return writes.apply_change(
                        conn, change, version=head.version, owner=None, now=now
                    )
            except IntegrityError:
                first = reads.read_decisions(conn, session_id, (decision.call_id,)).get(
                    decision.call_id
                )
                if first is None:
                    raise
                raise already_decided(first, session_id=session_id) from None

    def request_cancel(self, session_id: str, *, now: datetime, by: str = "") -> Head:
        """Cancel a suspended session now; a runnable one is cancelled at its next tick.
        Its children are cancelled too, each in a transaction of its own after this one
        (the relay's `to_cancel` finishes the job if this process dies half way)."""
        head = self._cancel(session_id, now=now, by=by)
        for child in self.children(session_id):
            if child.status.terminal or child.cancel_requested:
                continue
            with contextlib.suppress(SessionFinished):  # it ended meanwhile
                self.request_cancel(child.id, now=now, by=by or f"cancel of {session_id}")
        return head

    def children(self, session_id: str, call_id: str | None = None) -> list[Head]:
        """The children the session spawned (with `call_id`: that call's), in spawn order."""
        with self.engine.connect() as conn:
            return trees.read_children(conn, session_id, call_id)

    def join(self, parent_id: str, call_id: str) -> Join | None:
        """The join of the parent's spawning call `call_id`, or None if it spawned nothing."""
        with self.engine.connect() as conn:
            return trees.read_join(conn, parent_id, call_id)

    def joins(self, parent_id: str) -> list[Join]:
        """The session's joins, one a spawning call, in spawn order."""
        with self.engine.connect() as conn:
            return trees.read_joins(conn, parent_id)

    def tree(self, root_id: str) -> list[Head]:
        """Every session under the root `root_id`, oldest first (the root left out)."""
        with self.engine.connect() as conn:
            return trees.read_tree(conn, root_id)

    def place(self, session_id: str) -> Place:
        """Where the session stands in its tree (its depth, the tree's sessions), counted
        by the database without reading the tree."""
        with self.engine.connect() as conn:
            return trees.read_place(conn, session_id)

    def _cancel(self, session_id: str, *, now: datetime, by: str) -> Head:
        with self.engine.begin() as conn:
            head = reads.read_head(conn, session_id, lock=True)
            current = reads.read_calls(conn, session_id, step=head.step)
            rejected = [c for c in current if c.state is CallState.REJECTED]
            decided = reads.read_decisions(conn, session_id, rejected) if rejected else {}
            change = machine.request_cancel(head, current, now=now, by=by, decisions=decided)
            if not change.head.status.runnable:
                return writes.apply_change(conn, change, version=head.version, owner=None, now=now)
            # no version bump: the tick in flight stays valid and sees the flag next time
            stored = (
                conn.execute(
                    update(sessions)
                    .where(sessions.c.id == session_id)
                    .values(cancel_requested=True, updated_at=now)
                    .returning(*sessions.c)
                )
                .mappings()
                .one()
            )
            conn.execute(
                insert(events),
                [rows.event_to_row(session_id, head.version, e) for e in change.events],
            )
            # a delayed tick (model backoff) need not be waited for: the relay publishes it now
            conn.execute(
                update(outbox)
                .where(
                    outbox.c.session_id == session_id,
                    outbox.c.published_at.is_(None),
                    outbox.c.due_at > now,
                )
                .values(due_at=now)
            )
            return rows.head_from_row(stored)

    def fork(
        self,
        parent_id: str,
        *,
        new_id: str,
        from_step: int,
        patch: ForkPatch,
        by: str,
        now: datetime,
        resolve_dead_letter: bool = False,
        again: bool = False,
        archived: tuple[Session, Sequence[Saved]] | None = None,
        quotas: Quotas | None = None,
        limit: TenantLimit | None = None,
        price: TokenPrice = UNPRICED,
        estimate: Estimate | None = None,
    ) -> Head:
        """A new session from the parent's step `from_step` with `patch`; the parent stays.
        With `resolve_dead_letter` the parent's dead letter records the fork; one already
        forked or closed is refused (DeadLetterClosed) unless `again`. `archived`: the
        parent and its saved file changes, read back from the archive (`retention.py`).
        `quotas` and `limit` (its tenant's) as for `create`: QuotaExceeded past a quota,
        with nothing stored (nor the dead letter resolved); `queued` past the in-flight
        limit. `price`: a token's of the fork's model, and `estimate` a prompt's tokens, for
        the budgets its next model call must fit (`tickwork.fsm.forks.fork`)."""
        parent = self.load(parent_id) if archived is None else archived[0]
        child = fork(
            parent,
            new_id=new_id,
            from_step=from_step,
            patch=patch,
            by=by,
            now=now,
            price=price,
            estimate=estimate,
        )
        start = None
        files = child.head.config.get("files")
        if isinstance(files, Mapping) and files.get("base"):
            # the child starts from the files its kept calls left, not the parent's latest
            start = fork_start(
                saved_changes(self.engine, parent_id) if archived is None else archived[1],
                base_state=str(files["base"]),
                from_step=from_step,
                kept_calls={o.call_id for o in child.observations},
            )
        return self._insert(
            child,
            now=now,
            resolves=parent_id if resolve_dead_letter else None,
            by=by,
            again=again,
            files=start,
            quotas=quotas,
            limit=limit,
        )

    def file_changes(self, session_id: str, *, upto: int | None = None) -> list[Saved]:
        """The changes the session's ticks saved to its files, in order."""
        return saved_changes(self.engine, session_id, upto=upto)

    def files_state(self, session_id: str) -> str | None:
        """The state hash of the session's files as last saved; None if no tick changed them."""
        return current_state(self.engine, session_id)

    def artifacts(self, url: str) -> Artifacts:
        """The artifact store `url` names; this database's blobs table when it is empty."""
        return open_artifacts(url, self.engine)
