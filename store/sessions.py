"""The session repository: create, claim, save, decide, cancel, fork, load.

Every write is one short transaction; none is held while a model or tool runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    bindparam,
    delete,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from fsm import machine
from fsm.approvals import already_decided
from fsm.errors import CallNotFound, ClaimLost, InvalidInput, NotWaiting, SessionNotFound
from fsm.forks import ForkPatch, fork
from fsm.loops import HISTORY
from fsm.machine import Change
from fsm.values import (
    RUNNABLE,
    CallState,
    Decision,
    Event,
    EventKind,
    Head,
    Observation,
    Session,
    Status,
    Step,
    ToolCall,
    call_ids_of,
)

from . import dead_letters, postgres, rows
from .files import FileChange, Saved, current_state, fork_start, saved_changes
from .schema import (
    calls,
    decisions,
    events,
    file_changes,
    observations,
    outbox,
    sessions,
    steps,
)
from .transcripts import Mark, Transcript, Transcripts

OPEN = [s.value for s in CallState if s.open]


@dataclass(frozen=True)
class Claimed:
    """What a tick needs after claiming a session; the lease is `owner`'s."""

    head: Head
    owner: str
    #: EXECUTING: the current step's calls and their decisions
    calls: tuple[ToolCall, ...] = ()
    decisions: dict[str, Decision] = field(default_factory=dict)
    #: READY: the whole history, for the transcript (from `claim`; only the steps after the
    #: cached ones from `_claim`)
    steps: tuple[Step, ...] = ()
    observations: dict[str, Observation] = field(default_factory=dict)

    @property
    def recent(self) -> tuple[str, ...]:
        """Fingerprints of the latest steps, oldest first."""
        return tuple(s.fingerprint for s in self.steps[-HISTORY:])


class Store:
    """Sessions on one database; Postgres in production, SQLite for the embedded default."""

    def __init__(self, engine: Engine, *, transcripts: int = 64) -> None:
        self.engine = engine
        self._postgres = engine.dialect.name == "postgresql"
        #: the tick's claim, start and save: one statement each, atomic without BEGIN/COMMIT
        self._single = engine.execution_options(isolation_level="AUTOCOMMIT")
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

    def list_sessions(
        self,
        *,
        status: str | Sequence[str] = (),
        kind: str | None = None,
        error_code: str | None = None,
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
        self, session_id: str, version: int, *, owner: str, now: datetime, lease_s: float
    ) -> Claimed | None:
        """Take the session for one micro-phase, or None if the tick is stale or not ours to run.

        Succeeds only if the session is runnable at `version` with no live lease; deletes
        that version's outbox row in the same transaction. A THINK claim reads the steps
        after those this process read last time (`transcripts.py`).
        """
        known = self._transcripts.get(session_id)
        after = known.step if known is not None else 0
        expires = now + timedelta(seconds=lease_s)
        taken: tuple[Claimed, Mark] | None
        if self._postgres:
            with self._single.connect() as conn:
                row = postgres.claim(
                    conn, session_id, version, owner=owner, now=now, expires=expires, after=after
                )
            taken = None if row is None else _claimed_from_json(row, owner)
        else:
            with self.engine.begin() as conn:
                taken = _claim(
                    conn, session_id, version, owner=owner, now=now, expires=expires, after=after
                )
        if taken is None:
            return None
        claimed, mark = taken
        if claimed.head.status is Status.EXECUTING:
            return claimed
        if known is not None and known.continued_by(claimed.head, mark):
            history = known.steps + claimed.steps
            seen = {**known.observations, **claimed.observations}
        elif after:  # what we knew was of another session under this id
            with self.engine.connect() as conn:
                history, seen = _history(conn, session_id)
        else:
            history, seen = claimed.steps, claimed.observations
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
        event = Event(
            kind=EventKind.TOOL_STARTED,
            at=now,
            data={"call_id": call.call_id, "name": call.name, "rerun": rerun},
        )
        stored = rows.event_to_row(session_id, version, event)
        if self._postgres:
            with self._single.connect() as conn:
                started = postgres.start(
                    conn,
                    session_id,
                    version,
                    call_id=call.call_id,
                    # the step too: either index then finds the row (a young table has no
                    # statistics, and Postgres may scan all the session's calls by the other)
                    step=call.step,
                    owner=owner,
                    now=now,
                    open_states=OPEN,
                    event=stored,
                )
        else:
            with self.engine.begin() as conn:
                started = _start(conn, session_id, version, call.call_id, owner=owner, now=now)
                if started:
                    conn.execute(insert(events), [stored])
        if not started:
            raise ClaimLost(
                f"session {session_id} is no longer at version {version} "
                f"under lease {owner}; call {call.call_id} was not started"
            )

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
        changed = _changed_states(change)
        if (
            self._postgres
            and owner is not None
            and not change.dead_letter
            and all(
                c["call_id"].startswith(
                    (call_ids_of(change.head.step), call_ids_of(change.head.step - 1))
                )
                for c in changed
            )
        ):
            with self._single.connect() as conn:
                row = postgres.save(
                    conn,
                    head={"id": change.head.id, **rows.head_changes(change.head)},
                    version=version,
                    owner=owner,
                    cancel_requested=change.head.cancel_requested,
                    call_states=changed,
                    appended=_appended(change, version=version + 1, now=now, files=files),
                )
            if row is None:
                raise _lost(change.head.id, version, owner)
            return rows.head_from_row(row)
        with self.engine.begin() as conn:
            return _apply(conn, change, version=version, owner=owner, now=now, files=files)

    def decide(self, session_id: str, decision: Decision, *, now: datetime) -> Head:
        """Record one person's decision on one call; each call is decided once."""
        with self.engine.begin() as conn:
            head = _head(conn, session_id, lock=self._postgres)
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
            head = _head(conn, session_id, lock=self._postgres)
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
    ) -> Head:
        """A new session from the parent's step `from_step` with `patch`; the parent stays.
        With `resolve_dead_letter` the parent's dead letter records the fork; one already
        forked or closed is refused (DeadLetterClosed) unless `again`."""
        child = fork(
            self.load(parent_id), new_id=new_id, from_step=from_step, patch=patch, by=by, now=now
        )
        start = None
        files = child.head.config.get("files")
        if isinstance(files, Mapping) and files.get("base"):
            # the child starts from the files its kept calls left, not the parent's latest
            start = fork_start(
                saved_changes(self.engine, parent_id),
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
        .returning(*sessions.c)
    )
    row = conn.execute(moved).mappings().first()
    if row is None:
        raise _lost(session_id, version, owner)
    changed = _changed_states(change)
    if changed:
        conn.execute(
            update(calls)
            .where(
                and_(calls.c.session_id == bindparam("sid"), calls.c.call_id == bindparam("cid"))
            )
            .values(state=bindparam("new_state")),
            [{"sid": session_id, "cid": c["call_id"], "new_state": c["state"]} for c in changed],
        )
    for table, values in _appended(change, version=version + 1, now=now, files=files).items():
        _insert_many(conn, table, values)
    if change.dead_letter:
        dead_letters.record(conn, _load(conn, session_id), now=now)
    return rows.head_from_row(row)


def _lost(session_id: str, version: int, owner: str | None) -> ClaimLost:
    return ClaimLost(
        f"session {session_id} is no longer at version {version}"
        + (f" under lease {owner}" if owner else "")
        + "; this tick's work is dropped and the newer state stands"
    )


def _appended(
    change: Change, *, version: int, now: datetime, files: FileChange | None = None
) -> dict[Table, list[dict[str, Any]]]:
    """The rows `change` (and the tick's `files`) append, by table, in the order of the
    foreign keys."""
    session_id = change.head.id
    step = change.step
    # a new step's calls are stored in the state the change leaves them in
    states = {cid: state.value for cid, state in change.call_states}
    # a delayed tick waits here, unpublished, until the relay publishes it when due
    tick = {
        "session_id": session_id,
        "version": version,
        "due_at": now + timedelta(seconds=change.delay_s),
        "published_at": None if change.delay_s > 0 else now,
    }
    return {
        steps: [] if step is None else [rows.step_to_row(session_id, step)],
        calls: []
        if step is None
        else [
            {**rows.call_to_row(session_id, c), "state": states.get(c.call_id, c.state.value)}
            for c in step.calls
        ],
        observations: [rows.observation_to_row(session_id, o) for o in change.observations],
        decisions: [rows.decision_to_row(session_id, d) for d in change.decisions],
        events: [rows.event_to_row(session_id, version, e) for e in change.events],
        outbox: [tick] if change.enqueue else [],
        file_changes: [] if files is None else [files.row(session_id, version)],
    }


def _changed_states(change: Change) -> list[dict[str, str]]:
    """The new states of calls stored before this change (those of its own step are stored
    in their state by `_appended`)."""
    new = {c.call_id for c in change.step.calls} if change.step is not None else set()
    return [
        {"call_id": cid, "state": state.value}
        for cid, state in change.call_states
        if cid not in new
    ]


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
    conn: Connection,
    session_id: str,
    version: int,
    *,
    owner: str,
    now: datetime,
    expires: datetime,
    after: int,
) -> tuple[Claimed, Mark] | None:
    taken = (
        update(sessions)
        .where(
            sessions.c.id == session_id,
            sessions.c.version == version,
            sessions.c.status.in_([s.value for s in RUNNABLE]),
            or_(sessions.c.lease_owner.is_(None), sessions.c.lease_expires_at < now),
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


def _start(
    conn: Connection, session_id: str, version: int, call_id: str, *, owner: str, now: datetime
) -> bool:
    ours = (
        select(sessions.c.id)
        .where(
            sessions.c.id == session_id,
            sessions.c.version == version,
            sessions.c.lease_owner == owner,
        )
        .exists()
    )
    stmt = (
        update(calls)
        .where(
            calls.c.session_id == session_id,
            calls.c.call_id == call_id,
            calls.c.state.in_(OPEN),
            ours,
        )
        .values(state="started", started_at=now)
    )
    return bool(conn.execute(stmt).rowcount == 1)


def _claimed_from_json(row: Mapping[str, Any], owner: str) -> tuple[Claimed, Mark]:
    """What `postgres.claim` read, as values."""

    def found(key: str, table: Table) -> list[dict[str, Any]]:
        return [postgres.utc(table, r) for r in row[key] or ()]

    head = rows.head_from_row(row)
    if head.status is Status.EXECUTING:
        current = tuple(rows.call_from_row(r) for r in found("current_calls", calls))
        decided = {
            r["call_id"]: rows.decision_from_row(r) for r in found("current_decisions", decisions)
        }
        return Claimed(head=head, owner=owner, calls=current, decisions=decided), None
    history = _steps(found("new_steps", steps), found("new_calls", calls))
    seen = {
        r["call_id"]: rows.observation_from_row(r) for r in found("new_observations", observations)
    }
    known = row["known_step"]
    mark = None if known is None else (known[0], known[1])
    return Claimed(head=head, owner=owner, steps=history, observations=seen), mark


def _steps(step_rows: Iterable[rows.Row], call_rows: Iterable[rows.Row]) -> tuple[Step, ...]:
    """Steps in order from their rows and their calls' rows (in step and index order)."""
    by_step: dict[int, list[ToolCall]] = {}
    for r in call_rows:
        call = rows.call_from_row(r)
        by_step.setdefault(call.step, []).append(call)
    return tuple(rows.step_from_row(r, tuple(by_step.get(r["step"], ()))) for r in step_rows)


def _history(
    conn: Connection, session_id: str, *, after: int = 0
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
    history = _steps(step_rows, call_rows)
    found = select(observations).where(observations.c.session_id == session_id)
    if after:
        # by the calls' ids, looked up one by one: a join may scan every observation per call
        recent = select(calls.c.call_id).where(
            calls.c.session_id == session_id, calls.c.step > after
        )
        found = found.where(observations.c.call_id.in_(recent))
    seen = {r["call_id"]: rows.observation_from_row(r) for r in conn.execute(found).mappings()}
    return history, seen


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
