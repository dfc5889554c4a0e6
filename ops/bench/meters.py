"""Meters on the store: time per store call and tick, rows and bytes written; and a
database's own counters of commits and rows (pg_stat_database)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import Engine, event


@dataclass
class StoreTimer:
    """Durations of the store's calls made by ticks, by tick (set `tick` before each)."""

    tick: int = 0
    calls: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))

    def attach(self, store: Any, names: tuple[str, ...] = ("claim", "start_call", "save")) -> None:
        for name in names:
            setattr(store, name, self._timed(name, getattr(store, name)))

    def _timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                spent = time.perf_counter() - started
                self.calls[self.tick][name] = self.calls[self.tick].get(name, 0.0) + spent

        return timed

    def per_tick(self, *names: str) -> list[float]:
        return [sum(c.get(n, 0.0) for n in names) for _, c in sorted(self.calls.items())]


def _size(value: Any) -> int:
    """Bytes a bound parameter sends, near enough (as tests/store/test_write_size.py)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, int | float | datetime):
        return 8
    if isinstance(value, dict):
        return sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sum(_size(v) for v in value)
    return len(str(value).encode())


def _verb(statement: str) -> str:
    """The statement's first word, upper case."""
    return statement.split(None, 1)[0].upper() if statement.strip() else ""


@dataclass
class WriteCounter:
    """Rows changed and parameter bytes sent by INSERT/UPDATE/DELETE, and all statements."""

    rows: int = 0
    bytes: int = 0
    statements: int = 0
    writes: int = 0

    def attach(self, engine: Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        self.statements += 1
        if _verb(statement) in ("INSERT", "UPDATE", "DELETE"):
            self.writes += 1
            self.bytes += _size(parameters)
        elif _verb(statement) == "WITH" and isinstance(parameters, dict):
            # a tick's write on Postgres, one statement (store/postgres.py): the head's row,
            # and the rows it appends, given as JSON arrays
            self.writes += 1
            self.bytes += _size(parameters)
            self.rows += 1 + sum(
                len(json.loads(v))
                for v in parameters.values()
                if isinstance(v, str) and v.startswith("[")
            )

    def _after(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if _verb(statement) in ("INSERT", "UPDATE", "DELETE"):
            self.rows += max(cursor.rowcount, 0)

    def snapshot(self) -> tuple[int, int, int, int]:
        return self.rows, self.bytes, self.statements, self.writes


@dataclass(frozen=True)
class DatabaseCounts:
    """A database's commits and rows inserted, updated and deleted, as Postgres counts them
    (pg_stat_database). A backend reports its counts when it exits, and when it goes idle at
    most once a second: one that reported less than a second ago keeps the next ones until it
    is next idle a second later, or for ten seconds if it stays idle (PGSTAT_IDLE_INTERVAL).
    Read them with `settled` once the work's connections are closed."""

    commits: int
    inserted: int
    updated: int
    deleted: int

    @property
    def rows(self) -> int:
        return self.inserted + self.updated + self.deleted

    def __sub__(self, other: DatabaseCounts) -> DatabaseCounts:
        return DatabaseCounts(
            self.commits - other.commits,
            self.inserted - other.inserted,
            self.updated - other.updated,
            self.deleted - other.deleted,
        )

    @classmethod
    def read(cls, admin_url: str, database: str) -> DatabaseCounts:
        """The counts now, read over a new connection to another database (`admin_url`), so
        that reading adds nothing to them and sees no cached snapshot."""
        with psycopg.connect(admin_url, autocommit=True) as conn:
            row = conn.execute(
                "select xact_commit, tup_inserted, tup_updated, tup_deleted"
                " from pg_stat_database where datname = %s",
                (database,),
            ).fetchone()
        if row is None:
            raise LookupError(f"no database {database!r} in pg_stat_database")
        return cls(*(int(v) for v in row))

    @classmethod
    def settled(
        cls, admin_url: str, database: str, *, wait: float = 0.2, poll: float = 0.3
    ) -> DatabaseCounts:
        """The counts once the backends that closed reported theirs (a backend exits a moment
        after its client hung up): after `wait` seconds, and unchanged between two reads `poll`
        seconds apart (at most ten reads)."""
        time.sleep(wait)
        last = cls.read(admin_url, database)
        for _ in range(10):
            time.sleep(poll)
            now = cls.read(admin_url, database)
            if now == last:
                break
            last = now
        return last
