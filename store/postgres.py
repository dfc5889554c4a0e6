"""`PostgresStore`: the Core store with the tick's three writes as one statement each.

A tick claims, may mark a call started, and saves. Through SQLAlchemy Core each of them is
a transaction of several statements (BEGIN, the statements, COMMIT: 7 round trips for a
save); here each is a single statement run outside an explicit transaction, which Postgres
makes atomic: data-modifying CTEs that share one snapshot, the appended rows given as one
JSON array per table and expanded with `jsonb_populate_recordset`, so the text of every
statement is fixed and psycopg prepares it once. The statements are built from the tables
in `schema.py` and write the rows `ticks.py` builds for both stores; the contract suite
runs both on Postgres, and `tests/store/test_differential.py` checks they leave the same
rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from sqlalchemy import JSON, Engine, Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError
from tickwork.fsm.context import READ_WHOLE_BYTES
from tickwork.fsm.loops import HISTORY
from tickwork.fsm.machine import Change
from tickwork.fsm.values import EventKind, Head, Observation, Status, Step, StepKind, ToolCall
from tickwork.store import rows, trees
from tickwork.store.core import CoreStore
from tickwork.store.files import FileChange
from tickwork.store.rows import MUTABLE_HEAD
from tickwork.store.schema import (
    RUNNABLE_SQL,
    UTCDateTime,
    calls,
    decisions,
    events,
    observations,
    outbox,
    sessions,
    steps,
)
from tickwork.store.ticks import (
    APPENDED,
    OPEN,
    Claimed,
    Idempotent,
    Lease,
    Taken,
    appended,
    changed_states,
    charged_rows,
    lost,
    saved_head,
    steps_from_rows,
)
from tickwork.store.writes import record_dead_letter


class PostgresStore(CoreStore):
    """The Core store whose tick writes (claim, start a call, save) are one statement each,
    run on the driver's connection; everything else is the Core store's."""

    def __init__(self, engine: Engine, *, transcripts: int = 64) -> None:
        if engine.dialect.name != "postgresql":
            raise ValueError(f"PostgresStore needs Postgres, not {engine.dialect.name}")
        super().__init__(engine, transcripts=transcripts)
        #: one statement each, atomic without BEGIN/COMMIT
        self._single = engine.execution_options(isolation_level="AUTOCOMMIT")

    def _take(
        self, lease: Lease, *, expires: datetime, after: int, level: int, idempotent: Idempotent
    ) -> Taken | None:
        params = {
            "id": lease.session_id,
            "version": lease.version,
            "owner": lease.owner,
            "now": _aware(lease.now),
            "expires": _aware(expires),
            "after": after,
            "level": level,
            "open": OPEN,
            "idempotent": _dumps({kind: sorted(names) for kind, names in idempotent.items()}),
        }
        row = _one(self._single, CLAIM, params)
        return None if row is None else _taken(utc(sessions, row), lease)

    def _history(self, session_id: str) -> tuple[tuple[Step, ...], dict[str, Observation]]:
        row = _one(self._single, HISTORY_READ, {"id": session_id, "history": HISTORY})
        assert row is not None, "HISTORY_READ returns one row"
        history = steps_from_rows(_found(row, "steps", steps), _found(row, "calls", calls))
        seen = {
            r["call_id"]: rows.observation_from_row(r)
            for key in ("stubs", "observations")
            for r in _found(row, key, observations)
        }
        return history, seen

    def _start(self, lease: Lease, call: ToolCall, event: dict[str, Any]) -> bool:
        params = {
            "id": lease.session_id,
            "version": lease.version,
            "call_id": call.call_id,
            # the step too: either index then finds the row (a young table has no
            # statistics, and Postgres may scan all the session's calls by the other)
            "step": call.step,
            "owner": lease.owner,
            "now": _aware(lease.now),
            "open": OPEN,
            "kind": event["kind"],
            "data": _dumps(event["data"]),
        }
        return _one(self._single, START, params) is not None

    def _save(self, lease: Lease, change: Change, files: FileChange | None) -> Head:
        head = change.head
        if change.children or change.mark is not None or head.status is Status.COMPLETED:
            # a spawn (the children, their ticks and the join's row), a write on an `each`
            # join, or a completion (once a session, refused if the session or its tree was
            # cancelled meanwhile: `writes.refused`), in one transaction (the Core store's
            # save, `trees.py`)
            return super()._save(lease, change, files)
        ends_child = head.status.terminal and head.spawn_call is not None
        stored = rows.head_changes(head)
        params: dict[str, Any] = {
            name: _dumps(value) if name in _JSON_HEAD else value for name, value in stored.items()
        }
        charging = charged_rows(change)
        assert len(charging) <= 1, "SAVE charges one step: `charged_step`"
        params.update(
            id=head.id,
            version=lease.version,
            owner=lease.owner,
            cancel_requested=head.cancel_requested,
            call_states=_dumps(closing := changed_states(change)),
            charged=_dumps(charging),
            # the range of steps whose calls close (empty without any)
            closed_from=min((r["step"] for r in closing), default=None),
            closed_to=max((r["step"] for r in closing), default=None),
            charged_step=charging[0]["step"] if charging else None,
            updated_at=_aware(head.updated_at),
        )
        added = appended(change, version=lease.version + 1, now=lease.now, files=files)
        for table in APPENDED:
            params[table.name] = _rows(added[table])
        if change.dead_letter or ends_child:
            # a child's end counts on its join and may wake its parent, a dead letter's
            # snapshot is of the whole session: in the save's own transaction
            with self.engine.begin() as conn:
                found = conn.exec_driver_sql(SAVE, params).mappings().first()
                row = None if found is None else dict(found)
                if row is not None and ends_child:
                    trees.child_ended(conn, head, now=lease.now)
                if row is not None and change.dead_letter:
                    record_dead_letter(conn, head.id, now=lease.now)
        else:
            row = _one(self._single, SAVE, params)
        if row is None:
            raise lost(head.id, lease.version, lease.owner)
        return saved_head(
            head, stored, version=lease.version + 1, cancel_requested=row["cancel_requested"]
        )


_PREPARER = postgresql.dialect().identifier_preparer  # type: ignore[no-untyped-call]


def _q(name: str) -> str:
    """`name` as SQL: quoted only where Postgres needs it (the statements must stay short)."""
    return str(_PREPARER.quote(name))


def _compact(sql: str) -> str:
    """`sql` without its comment lines and runs of white space: psycopg caches the parsing
    of a statement only up to 4 KB (`MAX_CACHED_STATEMENT_LENGTH`) and parses a longer
    one again at every execution. The statements hold no literal with a run of spaces."""
    kept = (line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return re.sub(r"\s+", " ", " ".join(kept)).strip()


#: the columns the save's `moved` returns
_MOVED = {"id", "cancel_requested"}


def _appended(table: Table) -> str:
    """A CTE body that inserts the rows of the JSON array `%(<table>)s`, in its order, if
    the head moved."""
    # generated and defaulted columns are left to the database, as Core leaves them
    kept = [c for c in table.columns if c.autoincrement is not True and c.server_default is None]
    # unqualified, to keep SAVE short: `moved`, the only other name in scope, has only these
    assert not {c.name for c in kept} & _MOVED, f"{table.name}: rename a column or qualify it"
    # Core stores None in a JSON column as JSON null; the expansion would give SQL NULL
    picked = ", ".join(
        f"COALESCE({_q(c.name)}, 'null'::jsonb)" if isinstance(c.type, JSON) else _q(c.name)
        for c in kept
    )
    # in the array's order where the database numbers the rows (events: their order)
    ordered = any(c.autoincrement is True for c in table.columns)
    return (
        f"INSERT INTO {table.name} ({', '.join(_q(c.name) for c in kept)}) SELECT {picked} "
        f"FROM moved, jsonb_populate_recordset(NULL::{table.name}, %({table.name})s::jsonb) "
        + ("WITH ORDINALITY AS r ORDER BY r.ordinality" if ordered else "AS r")
    )


#: the head's columns, named: a prepared `RETURNING *` fails once a migration adds one
_HEAD = ", ".join(_q(c.name) for c in sessions.columns)


def _agg(table: Table, alias: str, where: str, order: str) -> str:
    return (
        f"(SELECT jsonb_agg({alias} ORDER BY {order}) FROM {table.name} AS {alias} WHERE {where})"
    )


def _of_call(table: Table, alias: str, what: str = "") -> str:
    """The rows of `table` of call `c` as `x` (`x.<alias>`: the whole row, or `what` of
    it), looked up by its primary key call by call: joined plainly, the planner may scan
    all the session's rows once per call (O(n^2) over a session's life); OFFSET 0 keeps it
    from flattening the lookup into such a join."""
    return (
        f"LATERAL (SELECT {what or alias} FROM {table.name} AS {alias} WHERE "
        f"{alias}.session_id = c.session_id AND {alias}.call_id = c.call_id OFFSET 0) AS x"
    )


CLAIM = _compact(f"""
WITH claimed AS (
    UPDATE {sessions.name} SET lease_owner = %(owner)s, lease_expires_at = %(expires)s
    WHERE id = %(id)s AND version = %(version)s AND {RUNNABLE_SQL}
      AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
      AND runtime_level <= %(level)s
    RETURNING {_HEAD}
), claimed_tick AS (
    DELETE FROM {outbox.name} AS o USING claimed
    WHERE o.session_id = claimed.id AND o.version <= %(version)s
), next_call AS (
    SELECT c.call_id, c.step, c.name, c.state, c.arguments FROM {calls.name} AS c, claimed
    WHERE claimed.status = 'executing' AND c.session_id = claimed.id
      AND c.step = claimed.step AND c.state = ANY(%(open)s)
    ORDER BY c.index LIMIT 1
), started AS (
    -- `ticks.startable`: an agent session's next call, pending with arguments, its tool
    -- idempotent for the session's kind and offered to its role, no cancel asked
    UPDATE {calls.name} AS c SET state = 'started', started_at = %(now)s
    FROM claimed, next_call AS n
    -- the row by its key, looked up once (the subqueries run before the update): joined
    -- to `n`, a planner without statistics may scan all the session's calls per claim
    -- (either index then finds it)
    WHERE c.session_id = %(id)s AND c.call_id = (SELECT call_id FROM next_call)
      AND c.step = (SELECT step FROM next_call) AND c.step = n.step AND c.call_id = n.call_id
      AND n.state = 'pending' AND jsonb_typeof(n.arguments) = 'object'
      AND NOT claimed.cancel_requested
      AND jsonb_typeof(claimed.config -> 'graph') IS DISTINCT FROM 'object'
      AND (jsonb_typeof(claimed.config -> 'tools') IS DISTINCT FROM 'array'
        OR claimed.config -> 'tools' ? n.name)
      AND %(idempotent)s::jsonb -> claimed.kind ? n.name
    RETURNING c.call_id, c.name
), started_event AS (
    INSERT INTO {events.name} (session_id, version, kind, at, data)
    SELECT %(id)s, %(version)s, '{EventKind.TOOL_STARTED.value}', %(now)s,
        jsonb_build_object('call_id', call_id, 'name', name, 'rerun', false)
    FROM started
)
-- the head's columns as RETURNING names them (fixed: a migration that adds one does not
-- change what a prepared claim returns)
SELECT claimed.*,
    -- commit without waiting for the WAL flush: a claim lost in a crash of Postgres only
    -- lets the tick run again (the lease and the outbox row come back; the start and the
    -- save check the lease and wait for the flush, which makes the claim durable first).
    -- A claim that started a call waits for it, as `START` does: the tool runs next
    set_config(
        'synchronous_commit',
        CASE WHEN EXISTS (SELECT 1 FROM started) THEN current_setting('synchronous_commit')
        ELSE 'off' END,
        true
    ) AS unflushed,
    (SELECT call_id FROM started) AS started_call,
    CASE WHEN claimed.status = 'executing' THEN {
    _agg(calls, "c", "c.session_id = claimed.id AND c.step = claimed.step", "c.index")
} END AS current_calls,
    CASE WHEN claimed.status = 'executing' THEN (
        SELECT jsonb_agg(x.d ORDER BY c.call_id, (x.d).attempt)
        FROM {calls.name} AS c, {_of_call(decisions, "d")}
        WHERE c.session_id = claimed.id AND c.step = claimed.step
    ) END AS current_decisions,
    CASE WHEN claimed.status = 'ready' THEN {
    _agg(steps, "s", "s.session_id = claimed.id AND s.step > %(after)s", "s.step")
} END AS new_steps,
    CASE WHEN claimed.status = 'ready' THEN {
    _agg(calls, "c", "c.session_id = claimed.id AND c.step > %(after)s", "c.step, c.index")
} END AS new_calls,
    CASE WHEN claimed.status = 'ready' THEN (
        SELECT jsonb_agg(x.o)
        FROM {calls.name} AS c, {_of_call(observations, "o")}
        WHERE c.session_id = claimed.id AND c.step > %(after)s
    ) END AS new_observations,
    -- the last step this process read, to tell that it is still this session's
    CASE WHEN claimed.status = 'ready' THEN (
        SELECT jsonb_build_array(s.trace_id, s.fingerprint) FROM {steps.name} AS s
        WHERE s.session_id = claimed.id AND s.step = %(after)s
    ) END AS known_step
FROM claimed
""")

START = _compact(f"""
WITH started AS (
    UPDATE {calls.name} SET state = 'started', started_at = %(now)s
    WHERE session_id = %(id)s AND step = %(step)s AND call_id = %(call_id)s
      AND state = ANY(%(open)s)
      AND EXISTS (
        SELECT 1 FROM {sessions.name}
        WHERE id = %(id)s AND version = %(version)s AND lease_owner = %(owner)s
      )
    RETURNING call_id
)
INSERT INTO {events.name} (session_id, version, kind, at, data)
SELECT %(id)s, %(version)s, %(kind)s, %(now)s, %(data)s::jsonb FROM started
RETURNING id
""")

# `reads.context_start` and `reads.read_history` in one statement, for a THINK whose
# worker has not read the session before: the steps, calls and observations after the
# context's start (the latest compaction's cut, or the last `HISTORY` replies before it),
# the observations of the steps the prompt masks by their size only (a short one whole)
HISTORY_READ = _compact(f"""
WITH latest AS (
    SELECT s.step, s.compacted_through FROM {steps.name} AS s
    WHERE s.session_id = %(id)s AND s.kind = '{StepKind.COMPACTION.value}'
    ORDER BY s.step DESC LIMIT 1
), bounds AS (
    SELECT
        COALESCE((
            SELECT GREATEST(0, LEAST(compacted_through, step - 1 - %(history)s)) FROM latest
        ), 0) AS start,
        GREATEST(
            (SELECT compacted_through FROM latest),
            (SELECT max(m.masked_through) FROM {steps.name} AS m
             WHERE m.session_id = %(id)s AND m.step > COALESCE((SELECT step FROM latest), 0)),
            0
        ) AS masked
)
SELECT
    {_agg(steps, "s", "s.session_id = %(id)s AND s.step > b.start", "s.step")} AS steps,
    {_agg(calls, "c", "c.session_id = %(id)s AND c.step > b.start", "c.step, c.index")}
        AS calls,
    (SELECT jsonb_agg(x.o) FROM {calls.name} AS c, {_of_call(observations, "o")}
     WHERE c.session_id = %(id)s AND c.step > GREATEST(b.start, b.masked)) AS observations,
    (SELECT jsonb_agg(jsonb_build_object(
        'call_id', x.call_id,
        'content', CASE WHEN octet_length(x.content) <= {READ_WHOLE_BYTES} THEN x.content
                   ELSE '' END,
        'is_error', x.is_error, 'at', x.at, 'duration_ms', x.duration_ms,
        'elided', CASE WHEN octet_length(x.content) <= {READ_WHOLE_BYTES} THEN NULL
                  ELSE octet_length(x.content) END))
     FROM {calls.name} AS c, {_of_call(observations, "o", "o.*")}
     WHERE c.session_id = %(id)s AND c.step > b.start AND c.step <= b.masked) AS stubs
FROM bounds AS b
""")

_JSON_HEAD = {c.name for c in sessions.columns if isinstance(c.type, JSON)}


def _head_value(name: str) -> str:
    return f"%({name})s::jsonb" if name in _JSON_HEAD else f"%({name})s"


#: named short (`add_steps`): the statement must stay under 4 KB (`_compact`)
_APPENDED = ",\n".join(
    f"add_{t.name.removeprefix('tickwork_')} AS ({_appended(t)})" for t in APPENDED
)

SAVE = _compact(f"""
WITH moved AS (
    UPDATE {sessions.name}
    SET version = %(version)s + 1, lease_owner = NULL, lease_expires_at = NULL,
        -- a cancel requested while the tick ran must survive its save
        cancel_requested = cancel_requested OR %(cancel_requested)s,
        {", ".join(f"{_q(n)} = {_head_value(n)}" for n in MUTABLE_HEAD)}
    WHERE id = %(id)s AND version = %(version)s AND lease_owner IS NOT DISTINCT FROM %(owner)s
    -- only what the database decides: the caller has the rest (`ticks.saved_head`);
    -- these are `_MOVED`
    RETURNING id, cancel_requested
), closed AS (
    UPDATE {calls.name} AS c SET state = r.state
    FROM moved,
        jsonb_to_recordset(%(call_states)s::jsonb) AS r(call_id text, step integer, state text)
    -- in the range of steps the caller names, by the (session, step) index: joined to `r`
    -- alone, a planner without statistics may hash all the session's calls
    WHERE c.session_id = %(id)s AND c.step BETWEEN %(closed_from)s AND %(closed_to)s
      AND c.step = r.step AND c.call_id = r.call_id
), charged AS (
    -- a graph node's model use, added to the node's own step (`Change.charged`)
    UPDATE {steps.name} AS s
    SET prompt_tokens = s.prompt_tokens + r.prompt_tokens,
        completion_tokens = s.completion_tokens + r.completion_tokens,
        -- NULL on a step a worker before 0013 wrote: none counted, as 0
        cached_prompt_tokens = COALESCE(s.cached_prompt_tokens, 0) + r.cached_prompt_tokens,
        cache_creation_tokens = COALESCE(s.cache_creation_tokens, 0) + r.cache_creation_tokens,
        cost_usd = s.cost_usd + r.cost_usd
    -- typed as the step's columns (`ticks.charged_rows`): one row, whose step is charged_step
    FROM moved, jsonb_populate_recordset(NULL::{steps.name}, %(charged)s::jsonb) AS r
    WHERE s.session_id = %(id)s AND s.step = %(charged_step)s
),
{_APPENDED}
SELECT cancel_requested FROM moved
""")


def _one(engine: Engine, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """The one row `sql` returns (or None), run on its own (`engine` is in autocommit).

    SQLAlchemy's connection, execution and result layers cost about 0.1 ms of Python a
    statement, so the statement runs on the pooled driver connection, unless something
    watches the engine (echo, cursor or execute events: logging, tracing, meters), which
    then sees it go through SQLAlchemy. Errors reach callers as SQLAlchemy's either way,
    and a connection the server dropped is invalidated with the pool, as SQLAlchemy does.
    """
    if _observed(engine):
        with engine.connect() as conn:
            found = conn.exec_driver_sql(sql, params).mappings().first()
        return None if found is None else dict(found)
    raw = engine.raw_connection()
    try:
        driver = raw.driver_connection
        assert isinstance(driver, psycopg.Connection)
        # one statement, atomic on its own; given back to the pool as it was taken
        driver.autocommit = True
        try:
            with driver.cursor(row_factory=dict_row) as cursor:
                # prepared at its first run on this connection, not its fifth: a worker's
                # pool has tens of connections, each with its own statements
                cursor.execute(sql, params, prepare=True)
                return cursor.fetchone()
        finally:
            if driver.info.transaction_status is TransactionStatus.IDLE:
                driver.autocommit = False
    except psycopg.Error as exc:
        gone = engine.dialect.is_disconnect(exc, raw, None)  # type: ignore[arg-type]
        if gone:
            # as SQLAlchemy's own disconnect handling: this one closed, and the pool's
            # others (connected to the same server) connected again at their next checkout;
            # not `dispose`, which left those in use by other threads to a pool thrown away,
            # open until the garbage collector found them
            engine.pool._invalidate(raw, exc)
        raise DBAPIError.instance(
            sql, params, exc, psycopg.Error, connection_invalidated=gone, dialect=engine.dialect
        ) from exc
    finally:
        raw.close()


def _observed(engine: Engine) -> bool:
    events = engine.dispatch
    return bool(
        engine.echo
        or events.before_cursor_execute
        or events.after_cursor_execute
        or events.before_execute
        or events.after_execute
    )


def _rows(values: list[dict[str, Any]]) -> str:
    """Rows as a JSON array, their datetime columns as ISO text; a datetime inside a JSON
    column fails, as it does through Core."""
    plain = [
        {k: _aware(v).isoformat() if isinstance(v, datetime) else v for k, v in row.items()}
        for row in values
    ]
    return _dumps(plain)


#: what json refuses, orjson refuses too (it writes datetimes and dataclasses by default)
_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _dumps(value: Any) -> str:
    """`value` as JSON text for a jsonb parameter: by orjson, 20 times faster than json on a
    save's rows (ops/bench/profile_tick.py), or by json where orjson refuses what json
    takes (an int beyond 64 bits, a lone surrogate, a key that is not a string); a
    datetime inside a JSON column fails in both, as it does through Core."""
    try:
        return orjson.dumps(value, option=_STRICT).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"))


def _aware(*times: datetime) -> datetime:
    """The (last) time, refused if naive, as `UTCDateTime` refuses it through Core."""
    for value in times:
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: tickwork stores UTC-aware times")
    return times[-1]


def utc(table: Table, row: Mapping[Any, Any]) -> dict[str, Any]:
    """`row` (from a driver row or a JSON object) with its times as aware UTC datetimes,
    as `UTCDateTime` gives them through Core."""
    found = dict(row)
    for name in _TIMES[table.name]:
        value = found.get(name)
        if value is not None:
            if isinstance(value, str):
                value = datetime.fromisoformat(value)
            found[name] = value.astimezone(UTC)
    return found


#: each table's time columns
_TIMES = {
    t.name: tuple(c.name for c in t.columns if isinstance(c.type, UTCDateTime))
    for t in (sessions, steps, calls, observations, decisions, events, outbox)
}


def _found(row: Mapping[str, Any], key: str, table: Table) -> list[dict[str, Any]]:
    """The rows of `table` a statement returned as the JSON array `key`, with their times."""
    return [utc(table, r) for r in row[key] or ()]


def _taken(row: Mapping[str, Any], lease: Lease) -> Taken:
    """What CLAIM read, as values."""
    owner = lease.owner
    assert owner is not None, "a claim takes a lease"
    head = rows.head_from_row(row)
    if head.status is Status.EXECUTING:
        current = tuple(rows.call_from_row(r) for r in _found(row, "current_calls", calls))
        decided = {
            r["call_id"]: rows.decision_from_row(r)
            for r in _found(row, "current_decisions", decisions)
        }
        started = row["started_call"]
        claimed = Claimed(head=head, owner=owner, calls=current, decisions=decided, started=started)
        return claimed, None
    history = steps_from_rows(_found(row, "new_steps", steps), _found(row, "new_calls", calls))
    seen = {
        r["call_id"]: rows.observation_from_row(r)
        for r in _found(row, "new_observations", observations)
    }
    known = row["known_step"]
    mark = None if known is None else (known[0], known[1])
    return Claimed(head=head, owner=owner, steps=history, observations=seen), mark
