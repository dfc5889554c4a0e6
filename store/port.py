"""`Store`: what the layers above store/ may ask of the database, and nothing more.

The port is small Protocols, one per concern (sessions, ticks, the sessions' files, the
relay, dead letters, retention, webhook cards, environments, health), composed into
`Store`; a caller that needs one concern is typed with its sub-port (the gauges take a
`Health`, the relay thread a `Relay`). Every method raises tickwork's own errors: a
database that does not answer is `StoreUnavailable`, never SQLAlchemy's or the driver's
exception (`store/edge.py` translates them).

One implementation per database, built by `store.open_store`: `CoreStore` (SQLAlchemy Core:
SQLite, and any database) and `PostgresStore` (the same, with the tick's claim, start and
save as one statement each). The contract suite (`tickwork.testing.store_contract`, run by
tests/store) runs the Core store on SQLite and on Postgres and the Postgres store on
Postgres; a third-party store runs it too (docs/CONFORMANCE.md)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol

from tickwork.fsm.admission import Admission, TenantLimit
from tickwork.fsm.context import Estimate
from tickwork.fsm.forks import UNPRICED, ForkPatch, TokenPrice
from tickwork.fsm.joins import Join
from tickwork.fsm.machine import Change
from tickwork.fsm.tenants import Quotas
from tickwork.fsm.trees import Place
from tickwork.fsm.values import RUNTIME_LEVEL, Decision, Event, Head, Observation, Session, ToolCall
from tickwork.store.artifacts import Artifacts
from tickwork.store.dead_letters import Closing, DeadLetter
from tickwork.store.deliveries import Cards
from tickwork.store.environments import Environments
from tickwork.store.files import FileChange, Saved
from tickwork.store.gauges import Gauges
from tickwork.store.lifecycle import Retention
from tickwork.store.liveness import Sign
from tickwork.store.relay import Due
from tickwork.store.ticks import Claimed, Idempotent
from tickwork.store.transcripts import Transcripts


class Sessions(Protocol):
    """Sessions as people, the API and the CLI read and change them: create, look up,
    list, decide, cancel, fork."""

    def create(
        self,
        session: Session,
        *,
        now: datetime,
        quotas: Quotas | None = None,
        limit: TenantLimit | None = None,
    ) -> Head:
        """Insert a new session (or a fork) and, if it is runnable, its first tick; with
        `quotas`, QuotaExceeded (nothing stored) if it takes its tenant past one of them.
        With `limit` (its tenant's) it goes through admission: beyond the tenant's
        in-flight limit or its concurrency key's, it is stored `queued`, with no tick; the
        head returned says which."""
        ...

    def get(self, session_id: str) -> Head: ...

    def ids_starting(self, prefix: str, *, limit: int, tenant: str | None = None) -> list[str]:
        """The ids of the live sessions (of `tenant`, if given) that start with `prefix`
        (case-sensitive), in id order, at most `limit`: how the CLI finds the one session a
        short id names."""
        ...

    def day_spent(self, tenant: str, *, day: datetime) -> float:
        """What `tenant`'s sessions created on the UTC day starting at midnight `day` spent,
        each session's own spending once (the count of `max_usd_per_day`,
        docs/OPERATIONS.md); read once a tick of a session of a tenant with that quota,
        before its model calls."""
        ...

    def load(self, session_id: str) -> Session: ...

    def lease(self, session_id: str) -> tuple[str, datetime] | None:
        """Who holds the session's lease and until when; None if nobody does."""
        ...

    def forks(self, session_id: str) -> list[dict[str, Any]]:
        """The sessions forked from this one, oldest first: id, step, status, when, and who
        made it (`submitted_by`)."""
        ...

    def find_call(self, session_id: str, call_id: str) -> tuple[Head, ToolCall | None]:
        """The session's head and its call `call_id`, or None for a call it does not have."""
        ...

    def observation(self, session_id: str, call_id: str) -> Observation | None:
        """The stored observation of the session's call `call_id`, or None."""
        ...

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
        first, by their last `approval_requested` event, else their last update); only
        `tenant`'s if given; with `id_prefix`, only those whose
        id starts with it (case-sensitive, as `ids_starting`)."""
        ...

    def events_after(
        self, session_id: str, after_id: int = 0, limit: int = 1000
    ) -> list[tuple[int, Event]]: ...

    def decide(self, session_id: str, decision: Decision, *, now: datetime) -> Head:
        """Record one person's decision on one call; each call is decided once."""
        ...

    def request_cancel(self, session_id: str, *, now: datetime, by: str = "") -> Head:
        """Cancel a suspended session now; a runnable one is cancelled at its next tick."""
        ...

    def children(self, session_id: str, call_id: str | None = None) -> list[Head]:
        """The children the session spawned (with `call_id`: that call's), in spawn order."""
        ...

    def join(self, parent_id: str, call_id: str) -> Join | None:
        """The join of the parent's spawning call `call_id`, or None if it spawned nothing."""
        ...

    def joins(self, parent_id: str) -> list[Join]:
        """The session's joins, one a spawning call, in spawn order."""
        ...

    def tree(self, root_id: str) -> list[Head]:
        """Every session under the root `root_id`, oldest first (the root left out)."""
        ...

    def place(self, session_id: str) -> Place:
        """Where the session stands in its tree (its depth, the tree's sessions), counted
        by the database without reading the tree; SessionNotFound if there is no such."""
        ...

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
        """A new session from the parent's step `from_step` with `patch`; `archived`: the
        parent whole and its file changes, read back from the archive. `quotas` and
        `limit` (its tenant's) as for `create`: a fork is held to them as a submit is."""
        ...


class Ticks(Protocol):
    """The tick's writes: claim a session for one micro-phase, renew the lease while a long
    call runs, mark a call started, save (compare-and-swap plus append)."""

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
        """Take the session for one micro-phase, or None if the tick is stale or not ours
        (a session that needs a runtime level above `level` is never taken). An EXECUTE
        claim marks the call `ticks.startable` picks (its tool in `idempotent`, per session
        kind) started in the same transaction, with its `tool_started` event, and names it
        in `Claimed.started`; such a call is not started again with `start_call`."""
        ...

    @property
    def transcripts(self) -> Transcripts:
        """The transcripts this process keeps read, so a THINK claim reads only new steps
        (`store/transcripts.py`); a worker grows it to the ticks it runs at once."""
        ...

    def renew(
        self, session_id: str, version: int, *, owner: str, now: datetime, lease_s: float
    ) -> bool:
        """Extend our lease while a long call runs; False if it is no longer ours."""
        ...

    def renew_leases(
        self, leases: Sequence[tuple[str, int, str]], *, now: datetime, lease_s: float
    ) -> set[tuple[str, int]]:
        """`renew` of many leases, each a (session, version, owner), in one transaction: the
        (session, version) of those still ours."""
        ...

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
        """Mark `call` started before it runs; ClaimLost if the lease is no longer ours."""
        ...

    def save(
        self,
        change: Change,
        *,
        version: int,
        owner: str | None,
        now: datetime,
        files: FileChange | None = None,
    ) -> Head:
        """Compare-and-swap the head to `version + 1` and append the change; ClaimLost if
        the head moved or the lease is no longer ours."""
        ...


class SessionFiles(Protocol):
    """The sessions' files: the changes the ticks saved, and the blobs they name."""

    def file_changes(self, session_id: str, *, upto: int | None = None) -> list[Saved]:
        """The changes the session's ticks saved to its files, in order."""
        ...

    def files_state(self, session_id: str) -> str | None:
        """The state hash of the session's files as last saved; None if none changed."""
        ...

    def artifacts(self, url: str) -> Artifacts:
        """The artifact store `url` names; this database's blobs table when it is empty."""
        ...


class Relay(Protocol):
    """The relay's scans of the outbox and the leases (DESIGN section 3)."""

    def due_ticks(self, *, now: datetime, older_than_s: float, limit: int = 500) -> list[Due]:
        """Outbox rows to publish now: delayed ticks that fell due, and ticks whose message
        may be lost (unclaimed `older_than_s` after they were due or last published)."""
        ...

    def expired_leases(self, *, now: datetime, limit: int = 500) -> list[Due]:
        """Runnable sessions whose lease ran out, their lease cleared and a tick written."""
        ...

    def offer_again(self, session_id: str, version: int, *, now: datetime) -> None:
        """A tick refused for its runtime level: the relay offers it again after its usual
        wait, not after a growing one (the session's own row is not touched)."""
        ...

    def refuse_tick(
        self, session_id: str, version: int, *, worker: str, reason: str, now: datetime
    ) -> bool:
        """Record that `worker` (a Celery node name) took the session's tick at `version`
        and cannot run it (a `tick_refused` event, once a worker and version; nothing else
        changes); False if recorded already or the session is at another version."""
        ...

    def admit(
        self,
        policy: Admission,
        *,
        now: datetime,
        tenants: Sequence[str] | None = None,
        budget: int = 200,
    ) -> list[Due]:
        """One pass of admission (DESIGN section 15): queued sessions let in (queued ->
        ready, their first tick written) while their tenant and key are under their
        limits, at most `budget`, in weighted fair order across tenants and by priority
        then age within one; only `tenants`' if given. It fails nothing: the relay calls
        `expire` before a full pass (no `tenants`), and announces what that failed. The
        ticks to publish, in order."""
        ...

    def expire(self, *, now: datetime, limit: int = 500) -> list[Head]:
        """What the relay does before a full pass of `admit`: fail `DEADLINE`
        (dead-lettered, as at a tick) those of the `limit` oldest queued sessions, and as
        many waiting for a decision (their waiting calls closed as not run), whose deadline
        passed while they waited. Their
        heads as failed; each session is returned by the one call that failed it, however
        many run at once, so the relay that gets it announces its dead letter once."""
        ...

    def hold_sign(self, key: int) -> Sign | None:
        """Take the sign of life `key` for this worker process (`store/liveness.py`), to
        lease as `owners.signed(owner, key)`; None where the database has none (leases
        then end by expiry only). Raises StoreUnavailable if it cannot be taken."""
        ...

    def workers_alive(self) -> bool | None:
        """Whether any worker holds a sign of life on this database now (False: none runs,
        or none that takes one: TICKWORK_LIVENESS=false); None where the database has no
        signs. For a hint to a person only, never a decision."""
        ...

    def absent_signs(self) -> set[int]:
        """The signs named by runnable sessions' leases whose holder is gone."""
        ...

    def take_over(self, keys: Iterable[int], *, now: datetime) -> list[Due]:
        """Runnable sessions leased under the signs `keys`, still gone: their lease cleared
        and a tick written, as `expired_leases` does for a lease that ran out."""
        ...

    def missed_wakes(self, *, now: datetime, limit: int = 500) -> list[tuple[str, int]]:
        """Wake the parents still waiting on a complete join (a repair); their ids and
        versions, to publish."""
        ...

    def settle_ended(self, *, now: datetime, limit: int = 500) -> list[str]:
        """Charge each ended parent the cost of the children's ends it never had (an
        `each` join's results not taken, any join it ended before it woke it: a
        cancelled parent's, or an `all`/`first` join that woke it but that it ended
        without taking: its `children_joined` event with `cost_usd` says it took it); a
        repair; their ids."""
        ...

    def to_cancel(self, *, limit: int = 500) -> list[str]:
        """Children still going whose parent ended or asked to cancel, or whose join needs
        no more (`first`), not asked to cancel yet."""
        ...


class DeadLetterQueue(Protocol):
    """The dead letters: listed, looked up, closed, counted and exported."""

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
        ...

    def dead_letter(self, key: int | str) -> DeadLetter:
        """By dead-letter id, or by the failed session's id; DeadLetterNotFound if none."""
        ...

    def close_dead_letter(
        self, key: int | str, *, state: Closing, by: str, reason: str, now: datetime
    ) -> DeadLetter:
        """Resolve or dismiss a dead letter without forking it; refused if already closed."""
        ...

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
        ...

    def recount_dead_letters(self) -> int:
        """Derive every dead letter's error signature again and count them afresh for their
        stats (after an upgrade that changed the signature, or dead letters written by
        workers older than migration 0009); the count rows written."""
        ...

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
        ...

    def dead_letter_timeline(
        self,
        *,
        bucket: str = "day",
        since: datetime,
        now: datetime,
        tenant: str | None = None,
        submitted_by: str | None = None,
    ) -> dict[str, Any]:
        """Dead letters per day or hour and code, since `since`, no bucket skipped; only
        `tenant`'s if given."""
        ...


class Lifecycle(Protocol):
    """Retention: archiving and pruning finished sessions."""

    @property
    def retention(self) -> Retention:
        """Retention's passes and the archive index (`store/lifecycle.py`)."""
        ...


class Webhooks(Protocol):
    """The webhook cards' deliveries, for the dispatcher."""

    @property
    def cards(self) -> Cards:
        """The webhook cards' deliveries (approval and finished), for the dispatcher."""
        ...


class Builds(Protocol):
    """Repair jobs' environments."""

    @property
    def environments(self) -> Environments:
        """Repair jobs' environments: the build's claim, their uses (`store/environments.py`)."""
        ...


class Health(Protocol):
    """What the metrics and the health checks read, and the pool."""

    def gauges(self, *, now: datetime) -> Gauges:
        """What the metrics' gauges show, read in one connection."""
        ...

    def revisions(self) -> set[str]:
        """The migration revisions the schema is at; StoreUnavailable if the database does
        not answer."""
        ...

    def close(self) -> None:
        """Close the pooled connections; the store opens new ones if used again."""
        ...


class Store(
    Sessions,
    Ticks,
    SessionFiles,
    Relay,
    DeadLetterQueue,
    Lifecycle,
    Webhooks,
    Builds,
    Health,
    Protocol,
):
    """Sessions on one database, and what the relay, the dead-letter queue, retention, the
    webhooks, the metrics and the health checks read of it: every sub-port above. Every
    method is one short transaction (or none); a database that fails raises
    `StoreUnavailable` or another `StoreError` (`tickwork.fsm.errors`), never the driver's
    own error."""
