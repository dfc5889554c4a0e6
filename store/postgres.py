"""The tick's three writes on Postgres, each one statement and one round trip.

A tick claims, may mark a call started, and saves. Through SQLAlchemy Core each of them is
a transaction of several statements (BEGIN, the statements, COMMIT: 7 round trips for a
save); here each is a single statement run outside an explicit transaction, which Postgres
makes atomic: data-modifying CTEs that share one snapshot, the appended rows given as one
JSON array per table and expanded with `jsonb_populate_recordset`, so the text of every
statement is fixed and psycopg prepares it once. The statements are built from the tables
in `schema.py`, and the store's contract suite runs the same cases here and on SQLite,
where the Core path in `sessions.py` does the same work.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from sqlalchemy import JSON, Connection, Table
from sqlalchemy.exc import DBAPIError

from .rows import MUTABLE_HEAD
from .schema import (
    RUNNABLE_SQL,
    UTCDateTime,
    calls,
    decisions,
    events,
    file_changes,
    observations,
    outbox,
    sessions,
    steps,
)


def _q(name: str) -> str:
    return f'"{name}"'


def _appended(table: Table) -> str:
    """A CTE body that inserts the rows of the JSON array `%(<table>)s`, in its order, if
    the head moved."""
    # generated and defaulted columns are left to the database, as Core leaves them
    kept = [c for c in table.columns if c.autoincrement is not True and c.server_default is None]
    # Core stores None in a JSON column as JSON null; the expansion would give SQL NULL
    picked = ", ".join(
        f"COALESCE(r.{_q(c.name)}, 'null'::jsonb)"
        if isinstance(c.type, JSON)
        else f"r.{_q(c.name)}"
        for c in kept
    )
    return (
        f"INSERT INTO {table.name} ({', '.join(_q(c.name) for c in kept)}) SELECT {picked} "
        f"FROM moved, jsonb_populate_recordset(NULL::{table.name}, %({table.name})s::jsonb) "
        "WITH ORDINALITY AS r ORDER BY r.ordinality"
    )


#: the head's columns, named: a prepared `RETURNING *` fails once a migration adds one
_HEAD = ", ".join(_q(c.name) for c in sessions.columns)


def _agg(table: Table, alias: str, where: str, order: str) -> str:
    return (
        f"(SELECT jsonb_agg({alias} ORDER BY {order}) FROM {table.name} AS {alias} WHERE {where})"
    )


def _of_call(table: Table, alias: str) -> str:
    """The rows of `table` of call `c`, looked up by its primary key call by call: joined
    plainly, the planner may scan all the session's rows once per call (O(n^2) over a
    session's life); OFFSET 0 keeps it from flattening the lookup into such a join."""
    return (
        f"LATERAL (SELECT {alias} FROM {table.name} AS {alias} WHERE "
        f"{alias}.session_id = c.session_id AND {alias}.call_id = c.call_id OFFSET 0) AS x"
    )


CLAIM = f"""
WITH claimed AS (
    UPDATE {sessions.name} SET lease_owner = %(owner)s, lease_expires_at = %(expires)s
    WHERE id = %(id)s AND version = %(version)s AND {RUNNABLE_SQL}
      AND (lease_owner IS NULL OR lease_expires_at < %(now)s)
    RETURNING {_HEAD}
), claimed_tick AS (
    DELETE FROM {outbox.name} AS o USING claimed
    WHERE o.session_id = claimed.id AND o.version <= %(version)s
)
SELECT {", ".join(f"claimed.{_q(c.name)}" for c in sessions.columns)},
    -- commit without waiting for the WAL flush: a claim lost in a crash of Postgres only
    -- lets the tick run again (the lease and the outbox row come back; the start and the
    -- save check the lease and wait for the flush, which makes the claim durable first)
    set_config('synchronous_commit', 'off', true) AS unflushed,
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
"""

START = f"""
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
"""

_JSON_HEAD = {c.name for c in sessions.columns if isinstance(c.type, JSON)}


def _head_value(name: str) -> str:
    return f"%({name})s::jsonb" if name in _JSON_HEAD else f"%({name})s"


#: the tables a save appends to, in the order of the foreign keys
APPENDED = (steps, calls, observations, decisions, events, outbox, file_changes)
_APPENDED = ",\n".join(f"appended_{t.name} AS ({_appended(t)})" for t in APPENDED)

SAVE = f"""
WITH moved AS (
    UPDATE {sessions.name}
    SET version = %(version)s + 1, lease_owner = NULL, lease_expires_at = NULL,
        -- a cancel requested while the tick ran must survive its save
        cancel_requested = cancel_requested OR %(cancel_requested)s,
        {", ".join(f"{_q(n)} = {_head_value(n)}" for n in MUTABLE_HEAD)}
    WHERE id = %(id)s AND version = %(version)s AND lease_owner = %(owner)s
    RETURNING {_HEAD}
), closed AS (
    UPDATE {calls.name} AS c SET state = r.state
    FROM moved, jsonb_to_recordset(%(call_states)s::jsonb) AS r(call_id text, state text)
    -- the calls of the current step, or of the one before (a graph's node tick closes its
    -- node and records the next; the caller checks): by the (session, step) index, where a
    -- lookup by id alone may scan all the session's calls on a young table
    WHERE c.session_id = moved.id AND c.step BETWEEN moved.step - 1 AND moved.step
      AND c.call_id = r.call_id
),
{_APPENDED}
SELECT {_HEAD} FROM moved
"""


def claim(
    conn: Connection,
    session_id: str,
    version: int,
    *,
    owner: str,
    now: datetime,
    expires: datetime,
    after: int,
) -> dict[str, Any] | None:
    """The claimed head row with the JSON of what the tick reads, or None."""
    _aware(now, expires)
    params = {
        "id": session_id,
        "version": version,
        "owner": owner,
        "now": now,
        "expires": expires,
        "after": after,
    }
    row = _one(conn, CLAIM, params)
    return None if row is None else utc(sessions, row)


def start(
    conn: Connection,
    session_id: str,
    version: int,
    *,
    call_id: str,
    step: int,
    owner: str,
    now: datetime,
    open_states: list[str],
    event: dict[str, Any],
) -> bool:
    """Mark one call started and record its event, if the lease is still ours."""
    _aware(now)
    params = {
        "id": session_id,
        "version": version,
        "call_id": call_id,
        "step": step,
        "owner": owner,
        "now": now,
        "open": open_states,
        "kind": event["kind"],
        "data": json.dumps(event["data"]),
    }
    return _one(conn, START, params) is not None


def save(
    conn: Connection,
    *,
    head: dict[str, Any],
    version: int,
    owner: str,
    cancel_requested: bool,
    call_states: list[dict[str, str]],
    appended: Mapping[Table, list[dict[str, Any]]],
) -> dict[str, Any] | None:
    """Move the head and append the rows in one statement; None if the head had moved."""
    _aware(head["updated_at"])
    params: dict[str, Any] = {
        name: json.dumps(value) if name in _JSON_HEAD else value for name, value in head.items()
    }
    params.update(
        id=head["id"],
        version=version,
        owner=owner,
        cancel_requested=cancel_requested,
        call_states=json.dumps(call_states),
    )
    for table in APPENDED:
        params[table.name] = _rows(appended.get(table, []))
    row = _one(conn, SAVE, params)
    return None if row is None else utc(sessions, row)


def _one(conn: Connection, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """The one row `sql` returns (or None).

    SQLAlchemy's execution and result layers cost about 0.5 ms of Python a tick (a fifth of
    it in process), so the statement runs on the driver's connection, unless something
    watches the engine (echo, cursor or execute events: logging, tracing, meters), which
    then sees it go through SQLAlchemy. Errors reach callers as SQLAlchemy's either way,
    and a connection the server dropped is invalidated with the pool, as SQLAlchemy does.
    """
    if _observed(conn):
        found = conn.exec_driver_sql(sql, params).mappings().first()
        return None if found is None else dict(found)
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    try:
        with driver.cursor(row_factory=dict_row) as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()
    except psycopg.Error as exc:
        gone = conn.dialect.is_disconnect(exc, conn.connection, None)  # type: ignore[arg-type]
        if gone:
            conn.invalidate(exc)
            conn.engine.dispose()  # the pooled others were connected to the same server
        raise DBAPIError.instance(
            sql, params, exc, psycopg.Error, connection_invalidated=gone, dialect=conn.dialect
        ) from exc


def _observed(conn: Connection) -> bool:
    events = conn.dispatch
    return bool(
        conn.engine.echo
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
    return json.dumps(plain, separators=(",", ":"))


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
