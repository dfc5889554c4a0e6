"""The dead-letter table: failed sessions kept whole for analysis, stats and forks."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, computed_field
from sqlalchemy import Connection, Engine, func, insert, select, update
from tickwork.fsm import snapshots
from tickwork.fsm.errors import DeadLetterClosed, InvalidInput, TickworkError
from tickwork.fsm.forks import KeptUsage, kept_usage
from tickwork.fsm.tenants import DEFAULT_TENANT
from tickwork.fsm.values import SNAPSHOT_SCHEMA_VERSION, EventKind, Session
from tickwork.store import dead_letter_counts
from tickwork.store.dead_letter_counts import GROUPS as GROUPS  # the groupings `stats` takes
from tickwork.store.error_signatures import error_signature as error_signature
from tickwork.store.schema import archived, dead_letters, sessions


class DeadLetterNotFound(TickworkError, LookupError):
    """No dead letter has that id: list them with `tickwork dlq ls`."""

    #: where to look, for an API caller (`of`), and from the command line, which says it
    #: instead when a server's refusal names the API's (`tickwork.cli.explain`)
    api_listing = "list the dead letters for their ids and session ids"
    listing = "list them with `tickwork dlq ls`"

    @classmethod
    def of(cls, key: str) -> DeadLetterNotFound:
        """The API's error for a key no dead letter the caller sees has, the same for another
        tenant's as for none. It says where to look in words that fit each surface it
        reaches: an API caller, and the command line with --server, which prints it."""
        if key.startswith("#"):  # a number only (`by_key`), never a session's id
            return cls(f"no dead letter has number {key[1:]}; {cls.api_listing}")
        return cls(f"no dead letter has id or session id {key!r}; {cls.api_listing}")

    @classmethod
    def not_failed(cls, session_id: str, status: str) -> DeadLetterNotFound:
        """For a live session the caller sees that has no dead letter since it has not
        failed: what it is, in words for an API caller and the command line alike."""
        return cls(
            f"session {session_id} has no dead letter: it is {status}, and only a failed "
            "session has one; read it, or fork it from a step, as a session"
        )

    @classmethod
    def archived(cls, session_id: str) -> DeadLetterNotFound:
        """For a session the caller sees that retention archived: its dead letter went to the
        archive with it, and the dead-letter commands and routes read live ones only."""
        return cls(
            f"session {session_id} is archived, and its dead letter with it: dead letters are "
            "read live only; read its patch, or fork it from a step, as an archived session"
        )


class DeadLetter(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: int
    session_id: str
    code: str
    message: str
    kind: str
    model: str
    last_tool: str | None
    error_signature: str
    at: datetime
    schema_version: int
    #: the failed session's tenant, and who submitted it
    tenant: str = DEFAULT_TENANT
    submitted_by: str = ""
    resolved_at: datetime | None = None
    resolution: dict[str, Any] | None = None
    snapshot: dict[str, Any] = {}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> str:
        """open, or how it was closed: forked, resolved or dismissed."""
        return status_of(self.resolution)

    def session(self) -> Session:
        """The snapshot as a session, upcast from older schema versions."""
        return snapshots.load(self.snapshot)


def record(conn: Connection, session: Session, *, now: datetime) -> None:
    """Insert the failed session's dead letter, in the transaction that failed it."""
    head = session.head
    last_tool = next((c.name for s in reversed(session.steps) for c in reversed(s.calls)), None)
    code = head.error_code.value if head.error_code else "INTERNAL"
    letter = {
        "session_id": head.id,
        "code": code,
        "message": head.error_message,
        "kind": head.kind,
        "model": head.model,
        "last_tool": last_tool,
        "error_signature": error_signature(code, head.error_message),
        "at": now,
        "schema_version": SNAPSHOT_SCHEMA_VERSION,
        "snapshot": snapshots.dump(session),
        "tenant": head.tenant,
        "submitted_by": head.submitted_by,
    }
    conn.execute(insert(dead_letters), [letter])
    dead_letter_counts.add(conn, letter)


class Closing(StrEnum):
    """How a dead letter was closed: `DeadLetter.resolution["state"]`."""

    FORKED = "forked"  #: a fork of its session runs in its place
    RESOLVED = "resolved"  #: a person fixed the cause another way
    DISMISSED = "dismissed"  #: a person decided nothing is to be done


def status_of(resolution: dict[str, Any] | None) -> str:
    """A dead letter's status: open, or its close's state (a resolution from before closes
    had a state was a fork's)."""
    return str(resolution.get("state", Closing.FORKED.value)) if resolution else "open"


def closed(letter_id: int, session_id: str, resolution: dict[str, Any]) -> DeadLetterClosed:
    """The refusal of a fork of a dead letter already forked, resolved or dismissed."""
    return DeadLetterClosed(
        f"dead letter {letter_id} (session {session_id}) {describe(resolution)}; "
        "fork it once more on purpose with `again`"
    )


def record_fork(
    conn: Connection, session_id: str, *, fork: str, by: str, now: datetime, again: bool = False
) -> None:
    """Note `fork` on the dead letter of `session_id` (if it has one), which is resolved by
    it, in the transaction that creates the fork. Every fork is kept. A dead letter already
    forked, resolved or dismissed is refused unless `again`."""
    row = conn.execute(
        select(dead_letters.c.id, dead_letters.c.resolution)
        .where(dead_letters.c.session_id == session_id)
        .with_for_update()
    ).first()
    if row is None:
        return
    resolution = dict(row.resolution or {})
    if resolution and not again:
        raise closed(row.id, session_id, resolution)
    forks = [*resolution.get("forks", ()), {"fork": fork, "by": by, "at": now.isoformat()}]
    closing = not resolution
    if closing:
        resolution.update(state=Closing.FORKED.value, by=by, at=now.isoformat())
    # `fork`, `by` and `at` stay the first close's (a fork, or a resolve or dismiss before
    # it); `forks` lists every fork with its own
    resolution.update(fork=forks[0]["fork"], forks=forks)
    conn.execute(
        update(dead_letters)
        .where(dead_letters.c.id == row.id)
        .values(resolution=resolution, **({"resolved_at": now} if closing else {}))
    )


def check_reason(state: Closing, reason: str, *, what: str = "reason") -> None:
    """Refuse a blank reason for closing a dead letter, saying what to give (`what`: how
    the reason is given, the API's and Python's field by default, the CLI's flag)."""
    if not reason.strip():
        raise InvalidInput(
            f"say why the dead letter is {state.value}: give a reason ({what}), not a blank one"
        )


def close(
    engine: Engine, key: int | str, *, state: Closing, by: str, reason: str, now: datetime
) -> DeadLetter:
    """Resolve or dismiss a dead letter without forking it; refused if already closed."""
    if state is Closing.FORKED:
        raise ValueError("a dead letter is closed as forked only by forking it")
    check_reason(state, reason)
    column = dead_letters.c.id if isinstance(key, int) else dead_letters.c.session_id
    with engine.begin() as conn:
        row = conn.execute(
            select(dead_letters.c.id, dead_letters.c.session_id, dead_letters.c.resolution)
            .where(column == key)
            .with_for_update()
        ).first()
        if row is None:
            raise DeadLetterNotFound(f"no dead letter {key!r}; {DeadLetterNotFound.listing}")
        if row.resolution:
            raise DeadLetterClosed(
                f"dead letter {row.id} (session {row.session_id}) {describe(row.resolution)}"
            )
        resolution = {"state": state.value, "by": by, "at": now.isoformat(), "reason": reason}
        conn.execute(
            update(dead_letters)
            .where(dead_letters.c.id == row.id)
            .values(resolved_at=now, resolution=resolution)
        )
    return get_dead_letter(engine, row.id)


def forks_of(resolution: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every fork made of a dead letter, oldest first: `fork`, `by`, `at` (a resolution from
    before every fork was kept names only the first, made at a time it did not keep)."""
    forks = resolution.get("forks")
    if forks:
        return list(forks)
    if resolution.get("fork"):
        return [{"fork": resolution["fork"], "by": resolution.get("by", ""), "at": "?"}]
    return []


def describe(resolution: dict[str, Any]) -> str:
    """How a dead letter was closed, in words: by whom, when, and its forks."""
    state = resolution.get("state", Closing.FORKED.value)
    forks = forks_of(resolution)
    named = ", ".join(f"{f['fork']} by {f['by'] or 'unknown'} at {f['at']}" for f in forks)
    if state == Closing.FORKED.value:
        return f"was already forked as {named}"
    said = (
        f"was already {state} by {resolution.get('by') or 'unknown'} at {resolution.get('at')}"
        f" ({resolution.get('reason', '')})"
    )
    return said + (f"; its forks: {named}" if named else "")


def _row(row: Any, with_snapshot: bool) -> DeadLetter:
    data = dict(row)
    if not with_snapshot:
        data["snapshot"] = {}
    return DeadLetter.model_validate(data)


def list_dead_letters(
    engine: Engine,
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
    query = _filtered(
        select(dead_letters),
        code=code,
        kind=kind,
        since=since,
        unresolved=unresolved,
        tenant=tenant,
        submitted_by=submitted_by,
    )
    if session_id is not None:
        query = query.where(dead_letters.c.session_id == session_id)
    query = query.order_by(dead_letters.c.at.desc(), dead_letters.c.id.desc())
    with engine.connect() as conn:
        found = conn.execute(query.limit(limit).offset(offset)).mappings()
        return [_row(r, with_snapshot) for r in found]


#: the largest dead-letter number (a BIGINT)
MAX_NUMBER = 2**63 - 1


def by_key(
    key: str,
    *,
    numbered: Callable[[int], DeadLetter | None],
    of_session: Callable[[str], DeadLetter | None],
) -> DeadLetter | None:
    """The dead letter `key` names, or None: `#12` is dead letter number 12 only; digits
    alone (`12`) are number 12 or the letter of session `12`, InvalidInput naming both when
    they are two (give `#N`); anything else a session's id. `numbered` and `of_session`
    find one by its number and by its session's id (None: none the caller may see)."""
    if key.startswith("#"):
        digits = key[1:]
        if not (digits.isascii() and digits.isdigit() and int(digits) <= MAX_NUMBER):
            raise InvalidInput(
                f"{key!r} is no dead-letter number: give # and the number, as `dlq ls` lists "
                "it ('#12'), or a session's id"
            )
        return numbered(int(digits))
    if not (key.isascii() and key.isdigit() and int(key) <= MAX_NUMBER):
        return of_session(key)
    number, session = numbered(int(key)), of_session(key)
    if number is not None and session is not None and number.id != session.id:
        raise InvalidInput(
            f"{key} names two dead letters: number {key} (of session {number.session_id}) "
            f"and the one of session {key} (number {session.id}); give '#{number.id}' or "
            f"'#{session.id}' (a # and the number name a dead letter by its number only)"
        )
    return number or session


def get_dead_letter(engine: Engine, key: int | str) -> DeadLetter:
    """By dead-letter id, or by the failed session's id."""
    column = dead_letters.c.id if isinstance(key, int) else dead_letters.c.session_id
    with engine.connect() as conn:
        row = conn.execute(select(dead_letters).where(column == key)).mappings().first()
    if row is None:
        raise DeadLetterNotFound(f"no dead letter {key!r}; {DeadLetterNotFound.listing}")
    return _row(row, True)


def stats(
    engine: Engine,
    *,
    by: str,
    since: datetime | None = None,
    tenant: str | None = None,
    submitted_by: str | None = None,
    unresolved: bool = False,
) -> list[dict[str, Any]]:
    """Counts of dead letters grouped by one of GROUPS, largest first (then by value, None
    last), each with the time of the value's newest dead letter; only `tenant`'s if given.
    Summed from the daily counts (`dead_letter_counts`), so it costs days and values, not
    dead letters; one submitter's (`submitted_by`, an own-only token's) are counted from
    the table, by the (tenant, at) index, and so are the `unresolved` ones (the counts do
    not know closing), by the partial index on open dead letters."""
    if by not in GROUPS:
        raise ValueError(f"cannot group dead letters by {by!r}; choose one of {', '.join(GROUPS)}")
    if submitted_by is not None or unresolved:
        column = dead_letters.c[by]
        query = _filtered(
            select(column, func.count(), func.max(dead_letters.c.at)).group_by(column),
            code=None,
            kind=None,
            since=since,
            unresolved=unresolved,
            tenant=tenant,
            submitted_by=submitted_by,
        )
        with engine.connect() as conn:
            mine = [{"value": v, "count": n, "latest": at} for v, n, at in conn.execute(query)]
        return sorted(mine, key=lambda g: (-g["count"], g["value"] is None, g["value"] or ""))
    with engine.connect() as conn:
        counted = dead_letter_counts.totals(conn, by, since, tenant=tenant)
        latest = dead_letter_counts.latest(conn, by, counted, tenant=tenant)
    found = [{"value": v, "count": n, "latest": latest[v]} for v, n in counted.items()]
    return sorted(found, key=lambda g: (-g["count"], g["value"] is None, g["value"] or ""))


#: the columns of an export, in order, with their types: "int", "float", "str", "time"
#: (a UTC timestamp), "list" (of strings); None is allowed in every column but id
EXPORT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "int"),
    ("session_id", "str"),
    ("tenant", "str"),
    ("code", "str"),  # the cause: BUDGET_STEPS, LOOP, MODEL_ERROR...
    ("message", "str"),
    ("error_signature", "str"),
    ("kind", "str"),
    ("model", "str"),
    ("last_tool", "str"),
    ("steps", "int"),  # with a fork's inherited steps, as its budgets count them
    ("tokens", "int"),
    ("cost_usd", "float"),
    ("parent_id", "str"),
    ("fork_step", "int"),
    ("forks", "list"),
    ("status", "str"),  # open, forked, resolved or dismissed
    ("closed_by", "str"),
    ("reason", "str"),
    ("failed_at", "time"),  # when it was dead-lettered
    ("resolved_at", "time"),
    # a fork's kept steps, spent by its parent (0 for a session not forked); what the
    # session's own model calls spent; what its children's trees cost, charged to it at
    # their joins (DESIGN 16). cost_usd = inherited + own + children: sum own_cost_usd, not
    # cost_usd, over a chain of forks or a tree whose parent and children are dead letters
    ("inherited_steps", "int"),
    ("inherited_tokens", "int"),
    ("inherited_cost_usd", "float"),
    ("own_steps", "int"),
    ("own_tokens", "int"),
    ("own_cost_usd", "float"),
    ("children_tokens", "int"),
    ("children_cost_usd", "float"),
)
#: dead letters read per round trip in an export
EXPORT_BATCH = 200


def export_rows(
    engine: Engine,
    *,
    code: str | None = None,
    kind: str | None = None,
    since: datetime | None = None,
    unresolved: bool = False,
    with_snapshot: bool = False,
    tenant: str | None = None,
    submitted_by: str | None = None,
) -> Iterator[dict[str, Any]]:
    """One flat row per dead letter (EXPORT_COLUMNS, and `snapshot` if asked), oldest first,
    read in batches of EXPORT_BATCH so an export holds one batch in memory, not all; only
    `tenant`'s, and `submitted_by`'s, if given."""
    after = 0
    while True:
        query = select(dead_letters).where(dead_letters.c.id > after)
        query = _filtered(
            query,
            code=code,
            kind=kind,
            since=since,
            unresolved=unresolved,
            tenant=tenant,
            submitted_by=submitted_by,
        )
        with engine.connect() as conn:
            batch = list(
                conn.execute(query.order_by(dead_letters.c.id).limit(EXPORT_BATCH)).mappings()
            )
            forks = _forks_of(conn, [row["session_id"] for row in batch])
        for row in batch:
            yield export_row(
                row, forks=forks.get(row["session_id"], {}), with_snapshot=with_snapshot
            )
        if len(batch) < EXPORT_BATCH:
            return
        after = batch[-1]["id"]


def _forks_of(conn: Connection, session_ids: list[str]) -> dict[str, dict[str, datetime]]:
    """Every fork of each of `session_ids`, live or archived, as `tickwork show` lists
    them: session id -> {fork id: when it was made} (a child names its parent too, but is
    not a fork)."""
    found: dict[str, dict[str, datetime]] = {}
    if not session_ids:
        return found
    for table, fork in ((sessions, sessions.c.id), (archived, archived.c.session_id)):
        query = select(table.c.parent_id, fork, table.c.created_at).where(
            table.c.parent_id.in_(session_ids), table.c.spawn_call.is_(None)
        )
        for parent, fork_id, at in conn.execute(query):
            found.setdefault(parent, {})[fork_id] = at
    return found


def _own_usage(session: Session) -> KeptUsage:
    """What the session's own model calls used: its steps, and the replies retried that no
    step records but were billed (an empty reply or summary: their `model_retry` events,
    and the `failed` event of the last, counted on the head by `machine.model_failed`)."""
    steps = kept_usage(session.steps)
    billed = [
        e.data
        for e in session.events
        if e.kind in (EventKind.MODEL_RETRY, EventKind.FAILED) and "tokens" in e.data
    ]
    return KeptUsage(
        steps=steps.steps,
        tokens=steps.tokens + sum(int(d["tokens"]) for d in billed),
        cost_usd=steps.cost_usd + sum(float(d.get("cost_usd") or 0.0) for d in billed),
    )


def export_row(
    row: Any, *, forks: dict[str, datetime] | None = None, with_snapshot: bool = False
) -> dict[str, Any]:
    """A dead-letter row as an export row: the failed session's totals and lineage from its
    snapshot, how it was closed from its resolution; its forks are `forks` (every fork of
    the session, by when it was made) and those its resolution records, oldest first."""
    session = snapshots.load(row["snapshot"])
    head = session.head
    # a fork starts with its parent's steps 1..fork_step and their usage (`fsm.forks`)
    forked_at = head.fork_step or 0  # None: not a fork (a child has a parent, not a fork step)
    inherited = kept_usage([s for s in session.steps if s.step <= forked_at])
    # the head counts its model calls and its children's trees (charged at their joins):
    # what its steps and its billed retries do not hold is its children's
    whole = _own_usage(session)
    resolution = dict(row["resolution"] or {})
    made = dict(forks or {})
    # one pruned from the archive's index is still the dead letter's; one recorded at no
    # time it kept (`at` "?") was made when the letter was resolved
    for f in forks_of(resolution):
        made.setdefault(str(f["fork"]), _when(f.get("at")) or row["resolved_at"] or row["at"])
    out = {
        "id": row["id"],
        "session_id": row["session_id"],
        "tenant": row["tenant"],
        "code": row["code"],
        "message": row["message"],
        "error_signature": row["error_signature"],
        "kind": row["kind"],
        "model": row["model"],
        "last_tool": row["last_tool"],
        "steps": head.step,
        "tokens": head.tokens,
        # to the nano-dollar, as the daily spend: a float sum over calls shows 0.07564700000000002
        "cost_usd": round(head.cost_usd, 9),
        "parent_id": head.parent_id,
        "fork_step": head.fork_step,
        "forks": sorted(made, key=lambda fork: (made[fork], fork)),
        "status": status_of(resolution),
        "closed_by": resolution.get("by") or None,
        "reason": resolution.get("reason"),
        "failed_at": row["at"],
        "resolved_at": row["resolved_at"],
        "inherited_steps": inherited.steps,
        "inherited_tokens": inherited.tokens,
        "inherited_cost_usd": round(inherited.cost_usd, 9),
        "own_steps": head.step - inherited.steps,
        "own_tokens": whole.tokens - inherited.tokens,
        "own_cost_usd": max(0.0, round(whole.cost_usd - inherited.cost_usd, 9)),
        "children_tokens": max(0, head.tokens - whole.tokens),
        "children_cost_usd": max(0.0, round(head.cost_usd - whole.cost_usd, 9)),
    }
    if with_snapshot:
        out["snapshot"] = row["snapshot"]
    return out


def _when(text: Any) -> datetime | None:
    """A time a resolution recorded (ISO 8601, UTC), or None."""
    if not isinstance(text, str):
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


BUCKETS = {"day": timedelta(days=1), "hour": timedelta(hours=1)}
#: the most buckets a timeline answers with: a year of days, or two weeks of hours
MAX_BUCKETS = 366


def timeline(
    engine: Engine,
    *,
    bucket: str = "day",
    since: datetime,
    now: datetime,
    tenant: str | None = None,
    submitted_by: str | None = None,
) -> dict[str, Any]:
    """Dead letters per `bucket` (day or hour, UTC) and code since `since`: the buckets from
    the one holding `since` to the one holding `now`, none skipped, and per code a count
    for each bucket; codes with the most dead letters first. Only `tenant`'s if given."""
    if bucket not in BUCKETS:
        raise InvalidInput(f"bucket {bucket!r} is not one of {', '.join(BUCKETS)}")
    step = BUCKETS[bucket]
    first, last = _floor(since, bucket), _floor(now, bucket)
    if first > last:
        raise InvalidInput(f"since {since.isoformat()} is after now; give a time in the past")
    count = (last - first) // step + 1
    if count > MAX_BUCKETS:
        raise InvalidInput(
            f"{count} {bucket}s from {since.isoformat()} is more than {MAX_BUCKETS}: "
            "give a later since" + (" or bucket=day" if bucket == "hour" else "")
        )
    at = dead_letters.c.at
    if engine.dialect.name == "postgresql":
        key: Any = func.date_trunc(bucket, func.timezone("UTC", at))
    else:  # SQLite keeps naive UTC text: 2026-12-01 03:40:00.123456
        key = func.strftime("%Y-%m-%d" if bucket == "day" else "%Y-%m-%d %H:00:00", at)
    query = (
        select(key.label("bucket"), dead_letters.c.code, func.count().label("dead"))
        .where(at >= first)
        .group_by(key, dead_letters.c.code)
    )
    if tenant is not None:
        query = query.where(dead_letters.c.tenant == tenant)
    if submitted_by is not None:
        query = query.where(dead_letters.c.submitted_by == submitted_by)
    buckets = [first + i * step for i in range(count)]
    index = {b: i for i, b in enumerate(buckets)}
    counts: dict[str, list[int]] = {}
    with engine.connect() as conn:
        for row in conn.execute(query):
            start = _bucket_start(row.bucket)
            if start in index:
                counts.setdefault(row.code, [0] * count)[index[start]] += int(row.dead)
    ordered = sorted(counts.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    return {
        "bucket": bucket,
        "buckets": buckets,
        "codes": [{"code": c, "counts": n, "total": sum(n)} for c, n in ordered],
        "total": sum(sum(n) for _, n in ordered),
    }


def _floor(when: datetime, bucket: str) -> datetime:
    when = when.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return when.replace(hour=0) if bucket == "day" else when


def _bucket_start(value: Any) -> datetime:
    """A bucket as the database gave it (SQLite: text; Postgres: a naive UTC timestamp)."""
    start: datetime
    if isinstance(value, str):
        start = datetime.fromisoformat(value)
    elif isinstance(value, datetime):
        start = value
    else:  # a date
        start = datetime(value.year, value.month, value.day)
    return start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)


def _filtered(
    query: Any,
    *,
    code: str | None,
    kind: str | None,
    since: datetime | None,
    unresolved: bool,
    tenant: str | None = None,
    submitted_by: str | None = None,
) -> Any:
    if tenant is not None:
        query = query.where(dead_letters.c.tenant == tenant)
    if submitted_by is not None:
        query = query.where(dead_letters.c.submitted_by == submitted_by)
    if code:
        query = query.where(dead_letters.c.code == code)
    if kind:
        query = query.where(dead_letters.c.kind == kind)
    if since:
        query = query.where(dead_letters.c.at >= since)
    if unresolved:
        query = query.where(dead_letters.c.resolved_at.is_(None))
    return query
