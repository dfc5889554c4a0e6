"""The session repository through SQLAlchemy Core: create, claim, save, decide, cancel,
fork, load, on SQLite or any database SQLAlchemy speaks.

Every write is one short transaction; none is held while a model or tool runs. The tick's
three writes (`_take`, `_start`, `_save`) are the seams `postgres.PostgresStore` fills with
one statement each; what they write is built in `ticks.py`, once for both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    LargeBinary,
    Select,
    and_,
    bindparam,
    cast,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from tickwork.fsm import machine
from tickwork.fsm.approvals import already_decided
from tickwork.fsm.context import needed_from
from tickwork.fsm.errors import CallNotFound, InvalidInput, NotWaiting, SessionNotFound
from tickwork.fsm.forks import ForkPatch, fork
from tickwork.fsm.loops import HISTORY
from tickwork.fsm.machine import Change
from tickwork.fsm.values import (
    RUNNABLE,
    RUNTIME_LEVEL,
    CallState,
    Decision,
    Event,
    EventKind,
    Head,
    Observation,
    Session,
    Status,
    Step,
    StepKind,
    ToolCall,
)
from tickwork.store import dead_letter_counts, dead_letters, gauges, relay, rows
from tickwork.store.artifacts import Artifacts, open_artifacts
from tickwork.store.dead_letters import Closing, DeadLetter
from tickwork.store.deliveries import Cards
from tickwork.store.environments import Environments
from tickwork.store.files import FileChange, Saved, current_state, fork_start, saved_changes
from tickwork.store.gauges import Gauges
from tickwork.store.lifecycle import Retention
from tickwork.store.relay import Due
from tickwork.store.schema import (
    calls,
    decisions,
    events,
    file_changes,
    observations,
    outbox,
    sessions,
    steps,
)
from tickwork.store.ticks import (
    NO_STEPS,
    OPEN,
    Claimed,
    Lease,
    Taken,
    appended,
    changed_states,
    lost,
    not_started,
    saved_head,
    started_event,
    steps_from_rows,
)
from tickwork.store.transcripts import Transcript, Transcripts


class CoreStore:
    """Sessions on one database through SQLAlchemy Core: the embedded default's SQLite,
    and any database (Postgres too, where `PostgresStore` is the faster variant). Build
    one with `store.open_store`."""

    def __init__(self, engine: Engine, *, transcripts: int = 64) -> None:
        self.engine = engine
        self._transcripts = Transcripts(transcripts)

    def create(self, session: Session, *, now: datetime) -> Head:
        """Insert a new session (or a fork) and, if it is runnable, its first tick."""
        self._insert(session, now=now)
        return session.head

    def _insert(
        self,
        session: Session,
        *,
        now: datetime,
        resolves: str | None = None,
        by: str = "",
        again: bool = False,
        files: FileChange | None = None,
    ) -> None:
        try:
            with self.engine.begin() as conn:
                if resolves is not None:
                    dead_letters.record_fork(
                        conn, resolves, fork=session.head.id, by=by, now=now, again=again
                    )
                _insert_session(conn, session, now=now)
                if files is not None:
                    head = session.head
                    conn.execute(insert(file_changes), [files.row(head.id, head.version)])
        except IntegrityError:
            with self.engine.connect() as conn:
                query = select(sessions.c.id).where(sessions.c.id == session.head.id)
                taken = conn.execute(query).first() is not None
            if taken:
                raise InvalidInput(
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
            raise SessionNotFound(f"no session {session_id!r}; list sessions with `tickwork ls`")
        if row.lease_owner is None or row.lease_expires_at is None:
            return None
        return row.lease_owner, row.lease_expires_at

    def forks(self, session_id: str) -> list[dict[str, Any]]:
        """The sessions forked from this one, oldest first: id, step, status, when."""
        query = (
            select(
                sessions.c.id,
                sessions.c.fork_step,
                sessions.c.status,
                sessions.c.created_at,
            )
            .where(sessions.c.parent_id == session_id)
            .order_by(sessions.c.created_at, sessions.c.id)
        )
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def get(self, session_id: str) -> Head:
        with self.engine.connect() as conn:
            return _head(conn, session_id)

    def load(self, session_id: str) -> Session:
        with self.engine.connect() as conn:
            return _load(conn, session_id)

    def find_call(self, session_id: str, call_id: str) -> tuple[Head, ToolCall | None]:
        """The session's head and its call `call_id`, or None for a call it does not have;
        two rows read, whatever the session's length. Raises SessionNotFound."""
        with self.engine.connect() as conn:
            return _head(conn, session_id), _call(conn, session_id, call_id)

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
        limit: int = 50,
        offset: int = 0,
    ) -> list[Head]:
        """Newest first."""
        query = select(sessions)
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
        query = query.order_by(sessions.c.created_at.desc(), sessions.c.id).limit(limit)
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
    ) -> Claimed | None:
        """Take the session for one micro-phase, or None if the tick is stale or not ours to run.

        Succeeds only if the session is runnable at `version` with no live lease and needs
        no runtime level above `level` (the claiming worker's); deletes that version's
        outbox row in the same transaction. A session refused for its level is left exactly
        as it was, its outbox row too, so the relay offers the tick again (to a worker of
        its level, in a rolling upgrade). A THINK claim reads the steps
        after those this process read last time (`transcripts.py`).
        """
        known = self._transcripts.get(session_id)
        # a miss claims without reading steps (an EXECUTE tick needs none), then a THINK
        # reads from the latest compaction on (`_context_start`): bounded by the context
        # policy, not by the session's length
        after = known.step if known is not None else NO_STEPS
        expires = now + timedelta(seconds=lease_s)
        taken = self._take(
            Lease(session_id, version, owner, now), expires=expires, after=after, level=level
        )
        if taken is None:
            return None
        claimed, mark = taken
        if claimed.head.status is Status.EXECUTING:
            return claimed
        if known is not None and known.continued_by(claimed.head, mark):
            history = known.steps + claimed.steps
            seen = {**known.observations, **claimed.observations}
        else:  # a miss, or what we knew was of another session under this id
            # read under our lease after the claim's commit: no step is appended meanwhile
            with self.engine.connect() as conn:
                start, masked = _context_start(conn, session_id)
                history, seen = _history(conn, session_id, after=start, masked=masked)
        history, seen = _needed(history, seen)
        head = claimed.head
        self._transcripts.put(session_id, Transcript(head.created_at, head.step, history, seen))
        return replace(claimed, steps=history, observations=seen)

    def renew(
        self, session_id: str, version: int, *, owner: str, now: datetime, lease_s: float
    ) -> bool:
        """Extend our lease while a long call runs; False if it is no longer ours."""
        stmt = (
            update(sessions)
            .where(
                sessions.c.id == session_id,
                sessions.c.version == version,
                sessions.c.lease_owner == owner,
            )
            .values(lease_expires_at=now + timedelta(seconds=lease_s))
        )
        with self.engine.begin() as conn:
            return conn.execute(stmt).rowcount == 1

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

    def _take(self, lease: Lease, *, expires: datetime, after: int, level: int) -> Taken | None:
        """The claim's write: take the lease until `expires` of a session needing at most
        runtime level `level`, drop the version's outbox row, read what the tick needs (a
        THINK: the steps after step `after`)."""
        with self.engine.begin() as conn:
            return _claim(conn, lease, expires=expires, after=after, level=level)

    def _start(self, lease: Lease, call: ToolCall, event: dict[str, Any]) -> bool:
        """Mark `call` started and record `event`, if the lease is still ours."""
        with self.engine.begin() as conn:
            started = _start(conn, lease, call)
            if started:
                conn.execute(insert(events), [event])
        return started

    def _save(self, lease: Lease, change: Change, files: FileChange | None) -> Head:
        """The save's write: the compare-and-swap, the calls closed, the rows appended."""
        with self.engine.begin() as conn:
            return _apply(
                conn, change, version=lease.version, owner=lease.owner, now=lease.now, files=files
            )

    def decide(self, session_id: str, decision: Decision, *, now: datetime) -> Head:
        """Record one person's decision on one call; each call is decided once."""
        with self.engine.begin() as conn:
            head = _head(conn, session_id, lock=True)
            existing = _decisions(conn, session_id, (decision.call_id,)).get(decision.call_id)
            current = _calls(conn, session_id, step=head.step)
            call = next((c for c in current if c.call_id == decision.call_id), None)
            # a decision made before the call went in doubt does not count for the doubt
            if existing is not None and (call is None or call.state is not CallState.IN_DOUBT):
                raise already_decided(existing, session_id=session_id)
            if call is None:
                _missing_call(conn, head, decision.call_id)
            if existing is not None:
                decision = decision.model_copy(update={"attempt": existing.attempt + 1})
            change = machine.decide(head, current, decision, existing, now=now)
            try:
                with conn.begin_nested():
                    return _apply(conn, change, version=head.version, owner=None, now=now)
            except IntegrityError:
                first = _decisions(conn, session_id, (decision.call_id,)).get(decision.call_id)
                if first is None:
                    raise
                raise already_decided(first, session_id=session_id) from None

    def request_cancel(self, session_id: str, *, now: datetime, by: str = "") -> Head:
        """Cancel a suspended session now; a runnable one is cancelled at its next tick."""
        with self.engine.begin() as conn:
            head = _head(conn, session_id, lock=True)
            current = _calls(conn, session_id, step=head.step)
            change = machine.request_cancel(head, current, now=now, by=by)
            if not change.head.status.runnable:
                return _apply(conn, change, version=head.version, owner=None, now=now)
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
    ) -> Head:
        """A new session from the parent's step `from_step` with `patch`; the parent stays.
        With `resolve_dead_letter` the parent's dead letter records the fork; one already
        forked or closed is refused (DeadLetterClosed) unless `again`. `archived`: the
        parent and its saved file changes, read back from the archive (`retention.py`)."""
        parent = self.load(parent_id) if archived is None else archived[0]
        child = fork(parent, new_id=new_id, from_step=from_step, patch=patch, by=by, now=now)
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
        self._insert(
            child,
            now=now,
            resolves=parent_id if resolve_dead_letter else None,
            by=by,
            again=again,
            files=start,
        )
        return child.head

    def file_changes(self, session_id: str, *, upto: int | None = None) -> list[Saved]:
        """The changes the session's ticks saved to its files, in order."""
        return saved_changes(self.engine, session_id, upto=upto)

    def files_state(self, session_id: str) -> str | None:
        """The state hash of the session's files as last saved; None if no tick changed them."""
        return current_state(self.engine, session_id)

    def artifacts(self, url: str) -> Artifacts:
        """The artifact store `url` names; this database's blobs table when it is empty."""
        return open_artifacts(url, self.engine)

    def due_ticks(self, *, now: datetime, older_than_s: float, limit: int = 500) -> list[Due]:
        """The relay's scan of the outbox (`relay.due_ticks`)."""
        return relay.due_ticks(self.engine, now=now, older_than_s=older_than_s, limit=limit)

    def expired_leases(self, *, now: datetime, limit: int = 500) -> list[Due]:
        """The relay's scan for sessions whose worker died (`relay.expired_leases`)."""
        return relay.expired_leases(self.engine, now=now, limit=limit)

    def offer_again(self, session_id: str, version: int, *, now: datetime) -> None:
        """A tick refused for its runtime level, offered again at the relay's usual pace."""
        relay.offer_again(self.engine, session_id, version, now=now)

    def dead_letters(
        self,
        *,
        code: str | None = None,
        kind: str | None = None,
        since: datetime | None = None,
        unresolved: bool = False,
        limit: int = 100,
        with_snapshot: bool = False,
    ) -> list[DeadLetter]:
        """Newest first."""
        return dead_letters.list_dead_letters(
            self.engine,
            code=code,
            kind=kind,
            since=since,
            unresolved=unresolved,
            limit=limit,
            with_snapshot=with_snapshot,
        )

    def dead_letter(self, key: int | str) -> DeadLetter:
        """By dead-letter id, or by the failed session's id; DeadLetterNotFound if none."""
        return dead_letters.get_dead_letter(self.engine, key)

    def close_dead_letter(
        self, key: int | str, *, state: Closing, by: str, reason: str, now: datetime
    ) -> DeadLetter:
        """Resolve or dismiss a dead letter without forking it; refused if already closed."""
        return dead_letters.close(self.engine, key, state=state, by=by, reason=reason, now=now)

    def dead_letter_stats(self, *, by: str, since: datetime | None = None) -> list[dict[str, Any]]:
        """Counts of dead letters grouped by one of `dead_letters.GROUPS`, largest first."""
        return dead_letters.stats(self.engine, by=by, since=since)

    def recount_dead_letters(self) -> int:
        """Count the dead letters afresh for their stats (after dead letters were written by
        workers older than migration 0009); the count rows written."""
        with self.engine.begin() as conn:
            return dead_letter_counts.rebuild(conn)

    def dead_letter_rows(
        self,
        *,
        code: str | None = None,
        kind: str | None = None,
        since: datetime | None = None,
        unresolved: bool = False,
        with_snapshot: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """The export's flat rows (`dead_letters.EXPORT_COLUMNS`), oldest first, in batches."""
        return dead_letters.export_rows(
            self.engine,
            code=code,
            kind=kind,
            since=since,
            unresolved=unresolved,
            with_snapshot=with_snapshot,
        )

    def dead_letter_timeline(
        self, *, bucket: str = "day", since: datetime, now: datetime
    ) -> dict[str, Any]:
        """Dead letters per day or hour and code (`dead_letters.timeline`)."""
        return dead_letters.timeline(self.engine, bucket=bucket, since=since, now=now)

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
        """The migration revisions the database's schema is at (none: no schema); raises
        what the driver raises if the database does not answer."""
        from alembic.runtime.migration import MigrationContext  # the CLI starts without it

        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            return set(MigrationContext.configure(conn).get_current_heads())

    def close(self) -> None:
        """Close the pooled connections; the store opens new ones if used again."""
        self.engine.dispose()


def _insert_session(conn: Connection, session: Session, *, now: datetime) -> None:
    head = session.head
    conn.execute(insert(sessions), [rows.head_to_row(head)])
    for step in session.steps:
        conn.execute(insert(steps), [rows.step_to_row(head.id, step)])
        if step.calls:
            conn.execute(insert(calls), [rows.call_to_row(head.id, c) for c in step.calls])
    _insert_many(
        conn, observations, [rows.observation_to_row(head.id, o) for o in session.observations]
    )
    _insert_many(conn, decisions, [rows.decision_to_row(head.id, d) for d in session.decisions])
    created = Event(
        kind=EventKind.CREATED,
        at=now,
        data={"kind": head.kind, "model": head.model, "status": head.status.value},
    )
    _insert_many(
        conn,
        events,
        [rows.event_to_row(head.id, head.version, e) for e in (created, *session.events)],
    )
    if head.status.runnable:
        conn.execute(
            insert(outbox),
            [{"session_id": head.id, "version": head.version, "due_at": now, "published_at": now}],
        )


def _apply(
    conn: Connection,
    change: Change,
    *,
    version: int,
    owner: str | None,
    now: datetime,
    files: FileChange | None = None,
) -> Head:
    session_id = change.head.id
    moved = (
        update(sessions)
        .where(
            sessions.c.id == session_id,
            sessions.c.version == version,
            sessions.c.lease_owner.is_(None) if owner is None else sessions.c.lease_owner == owner,
        )
        .values(
            version=version + 1,
            lease_owner=None,
            lease_expires_at=None,
            # a cancel requested while the tick ran must survive its save
            cancel_requested=or_(
                sessions.c.cancel_requested, literal(change.head.cancel_requested)
            ),
            **rows.head_changes(change.head),
        )
        .returning(sessions.c.cancel_requested)
    )
    row = conn.execute(moved).first()
    if row is None:
        raise lost(session_id, version, owner)
    if change.charged is not None:
        c = change.charged
        conn.execute(
            update(steps)
            .where(steps.c.session_id == change.head.id, steps.c.step == c.step)
            .values(
                prompt_tokens=steps.c.prompt_tokens + c.usage.prompt_tokens,
                completion_tokens=steps.c.completion_tokens + c.usage.completion_tokens,
                cost_usd=steps.c.cost_usd + c.cost_usd,
            )
        )
    changed = changed_states(change)
    if changed:
        conn.execute(
            update(calls)
            .where(
                and_(
                    calls.c.session_id == bindparam("sid"),
                    calls.c.step == bindparam("at_step"),
                    calls.c.call_id == bindparam("cid"),
                )
            )
            .values(state=bindparam("new_state")),
            [
                {
                    "sid": session_id,
                    "at_step": c["step"],
                    "cid": c["call_id"],
                    "new_state": c["state"],
                }
                for c in changed
            ],
        )
    for table, values in appended(change, version=version + 1, now=now, files=files).items():
        _insert_many(conn, table, values)
    if change.dead_letter:
        record_dead_letter(conn, session_id, now=now)
    return saved_head(change.head, version=version + 1, cancel_requested=row.cancel_requested)


def record_dead_letter(conn: Connection, session_id: str, *, now: datetime) -> None:
    """Dead-letter the session the save in `conn`'s transaction failed, with its snapshot."""
    dead_letters.record(conn, _load(conn, session_id), now=now)


def _insert_many(conn: Connection, table: Any, values: list[dict[str, Any]]) -> None:
    if values:
        conn.execute(insert(table), values)


def _head(conn: Connection, session_id: str, *, lock: bool = False) -> Head:
    if "\x00" in session_id:  # no id holds one, and Postgres refuses it as a parameter
        raise SessionNotFound(f"no session {session_id!r}; list sessions with `tickwork ls`")
    query = select(sessions).where(sessions.c.id == session_id)
    row = conn.execute(query.with_for_update() if lock else query).mappings().first()
    if row is None:
        raise SessionNotFound(f"no session {session_id!r}; list sessions with `tickwork ls`")
    return rows.head_from_row(row)


def _calls(conn: Connection, session_id: str, *, step: int | None = None) -> tuple[ToolCall, ...]:
    query = select(calls).where(calls.c.session_id == session_id)
    if step is not None:
        query = query.where(calls.c.step == step)
    found = conn.execute(query.order_by(calls.c.step, calls.c.index)).mappings()
    return tuple(rows.call_from_row(r) for r in found)


def _call(conn: Connection, session_id: str, call_id: str) -> ToolCall | None:
    if "\x00" in call_id:  # no id holds one, and Postgres refuses it as a parameter
        return None
    query = select(calls).where(calls.c.session_id == session_id, calls.c.call_id == call_id)
    row = conn.execute(query).mappings().first()
    return None if row is None else rows.call_from_row(row)


def _decisions(
    conn: Connection, session_id: str, of: Sequence[ToolCall | str] | None = None
) -> dict[str, Decision]:
    """The latest decision on each call."""
    query = select(decisions).where(decisions.c.session_id == session_id)
    if of is not None:
        ids = [c if isinstance(c, str) else c.call_id for c in of]
        query = query.where(decisions.c.call_id.in_(ids))
    query = query.order_by(decisions.c.call_id, decisions.c.attempt)
    return {r["call_id"]: rows.decision_from_row(r) for r in conn.execute(query).mappings()}


def _all_decisions(conn: Connection, session_id: str) -> tuple[Decision, ...]:
    query = (
        select(decisions)
        .where(decisions.c.session_id == session_id)
        .order_by(decisions.c.at, decisions.c.call_id, decisions.c.attempt)
    )
    return tuple(rows.decision_from_row(r) for r in conn.execute(query).mappings())


def _missing_call(conn: Connection, head: Head, call_id: str) -> None:
    found = conn.execute(
        select(calls.c.state).where(calls.c.session_id == head.id, calls.c.call_id == call_id)
    ).first()
    waiting = ", ".join(head.awaiting) or "none"
    if found is None:
        raise CallNotFound(
            f"session {head.id} has no call {call_id!r}; calls waiting for a decision: {waiting}"
        )
    raise NotWaiting(
        f"call {call_id} of session {head.id} is {found[0]}, not waiting for a "
        f"decision; calls waiting: {waiting}"
    )


def _claim(
    conn: Connection, lease: Lease, *, expires: datetime, after: int, level: int
) -> Taken | None:
    session_id, version, owner = lease.session_id, lease.version, lease.owner
    assert owner is not None, "a claim takes a lease"
    taken = (
        update(sessions)
        .where(
            sessions.c.id == session_id,
            sessions.c.version == version,
            sessions.c.status.in_([s.value for s in RUNNABLE]),
            or_(sessions.c.lease_owner.is_(None), sessions.c.lease_expires_at < lease.now),
            sessions.c.runtime_level <= level,
        )
        .values(lease_owner=owner, lease_expires_at=expires)
        .returning(*sessions.c)
    )
    row = conn.execute(taken).mappings().first()
    if row is None:
        return None
    conn.execute(
        delete(outbox).where(outbox.c.session_id == session_id, outbox.c.version <= version)
    )
    head = rows.head_from_row(row)
    if head.status is Status.EXECUTING:
        current = _calls(conn, session_id, step=head.step)
        decided = _decisions(conn, session_id, current)
        return Claimed(head=head, owner=owner, calls=current, decisions=decided), None
    history, seen = _history(conn, session_id, after=after)
    known = conn.execute(
        select(steps.c.trace_id, steps.c.fingerprint).where(
            steps.c.session_id == session_id, steps.c.step == after
        )
    ).first()
    mark = None if known is None else (known[0], known[1])
    return Claimed(head=head, owner=owner, steps=history, observations=seen), mark


def _start(conn: Connection, lease: Lease, call: ToolCall) -> bool:
    ours = (
        select(sessions.c.id)
        .where(
            sessions.c.id == lease.session_id,
            sessions.c.version == lease.version,
            sessions.c.lease_owner == lease.owner,
        )
        .exists()
    )
    stmt = (
        update(calls)
        .where(
            calls.c.session_id == lease.session_id,
            calls.c.step == call.step,
            calls.c.call_id == call.call_id,
            calls.c.state.in_(OPEN),
            ours,
        )
        .values(state="started", started_at=lease.now)
    )
    return bool(conn.execute(stmt).rowcount == 1)


def _context_start(conn: Connection, session_id: str) -> tuple[int, int]:
    """(the step a THINK reads after, the last step whose observations it reads by size
    only): before the latest compaction's cut (or the last `HISTORY` replies before it, for
    loop detection), 0 with no compaction; and the latest mask since. Read before the
    claim: a step stored meanwhile only makes the claim read more than it needs."""
    latest = conn.execute(
        select(steps.c.step, steps.c.compacted_through)
        .where(steps.c.session_id == session_id, steps.c.kind == StepKind.COMPACTION.value)
        .order_by(steps.c.step.desc())
        .limit(1)
    ).first()
    since = 0 if latest is None else int(latest.step)
    masked = conn.execute(
        select(func.max(steps.c.masked_through)).where(
            steps.c.session_id == session_id, steps.c.step > since
        )
    ).scalar()
    if latest is None:
        return 0, int(masked or 0)
    start = max(0, min(int(latest.compacted_through), since - 1 - HISTORY))
    return start, max(int(latest.compacted_through), int(masked or 0))


def _needed(
    history: tuple[Step, ...], seen: dict[str, Observation]
) -> tuple[tuple[Step, ...], dict[str, Observation]]:
    """The steps (and their observations) a THINK still needs (`tickwork.fsm.context.needed_from`),
    so a cached transcript stays bounded by the window, not the session's length."""
    first = needed_from(history, history=HISTORY)
    if not history or history[0].step >= first:
        return history, seen
    kept = tuple(s for s in history if s.step >= first)
    ids = {c.call_id for s in kept for c in s.calls}
    return kept, {k: v for k, v in seen.items() if k in ids}


def _history(
    conn: Connection, session_id: str, *, after: int = 0, masked: int = 0
) -> tuple[tuple[Step, ...], dict[str, Observation]]:
    """The steps after step `after`, with their calls and the observations of those calls."""
    call_rows = (
        conn.execute(
            select(calls)
            .where(calls.c.session_id == session_id, calls.c.step > after)
            .order_by(calls.c.step, calls.c.index)
        )
        .mappings()
        .all()
    )
    step_rows = conn.execute(
        select(steps)
        .where(steps.c.session_id == session_id, steps.c.step > after)
        .order_by(steps.c.step)
    ).mappings()
    history = steps_from_rows(step_rows, call_rows)
    seen: dict[str, Observation] = {}
    if masked > after:
        # the observations the prompt shows as stubs: their size, not their content
        size = func.length(cast(observations.c.content, LargeBinary))
        stubs = select(
            observations.c.call_id,
            literal("").label("content"),
            observations.c.is_error,
            observations.c.at,
            observations.c.duration_ms,
            size.label("elided"),
        ).where(
            observations.c.session_id == session_id,
            observations.c.call_id.in_(_call_ids(session_id, after, masked)),
        )
        seen.update(
            (r["call_id"], rows.observation_from_row(r)) for r in conn.execute(stubs).mappings()
        )
    found = select(observations).where(observations.c.session_id == session_id)
    if after or masked:
        # by the calls' ids, looked up one by one: a join may scan every observation per call
        found = found.where(observations.c.call_id.in_(_call_ids(session_id, max(after, masked))))
    seen.update(
        (r["call_id"], rows.observation_from_row(r)) for r in conn.execute(found).mappings()
    )
    return history, seen


def _call_ids(session_id: str, after: int, through: int | None = None) -> Select[tuple[str]]:
    """The ids of the session's calls of the steps after `after` (up to `through`)."""
    query = select(calls.c.call_id).where(calls.c.session_id == session_id, calls.c.step > after)
    return query if through is None else query.where(calls.c.step <= through)


def _load(conn: Connection, session_id: str) -> Session:
    head = _head(conn, session_id)
    history, seen = _history(conn, session_id)
    found = conn.execute(
        select(events).where(events.c.session_id == session_id).order_by(events.c.id)
    ).mappings()
    return Session(
        head=head,
        steps=history,
        # in the order of the calls they answer
        observations=tuple(seen[c.call_id] for s in history for c in s.calls if c.call_id in seen),
        decisions=_all_decisions(conn, session_id),
        events=tuple(rows.event_from_row(r) for r in found),
    )
