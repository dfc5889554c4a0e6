"""Workers' signs of life: what a worker process holds for as long as it lives, so the relay
can tell, without the worker's help, that a lease's owner is gone and take its session over
at once instead of when the lease runs out (docs/DESIGN.md section 3).

- **Postgres**: a session-level advisory lock, key K, held on a connection the worker keeps
  open for its lifetime. Postgres releases it the moment that connection ends: the process
  killed (its kernel closes the socket), its host gone (the server's TCP keepalives, set on
  that connection: about `KEEPALIVE_S`). The relay reads `pg_locks`: nothing to write,
  nothing left behind by a dead worker.
- **SQLite** (the embedded default, one host): an exclusive `flock` on the file
  `<database>.live/K`, released by the kernel when the process dies; the relay probes it
  with a non-blocking lock.

A worker that is stopped (SIGSTOP) or slow keeps its connection and its file, so its sign:
its sessions wait for their lease, and fencing refuses its late save as before.

A lease taken by a worker holding sign K names it: `<owner>@K` (`owners.signed`). A lease without
one (a worker of an earlier release, a tick run by hand, another store) is only ever ended
by its expiry, so a sign that was never held is never mistaken for a dead one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import threading
import weakref
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, func, insert, or_, select, text
from tickwork.fsm.errors import StoreUnavailable
from tickwork.fsm.values import RUNNABLE, Event, EventKind
from tickwork.store import rows
from tickwork.store.owners import key_of
from tickwork.store.relay import Due, revive
from tickwork.store.schema import RUNNABLE_SQL, events, sessions

#: keys are drawn below this: at most 18 digits, so every key fits a bigint
KEY_LIMIT = 10**18
#: the sessions table, by name in the relay's one-statement look
SESSIONS = sessions.name
#: the server's TCP keepalives on a sign's connection: a host that vanished (no FIN, no
#: RST) loses its sign after idle + interval * count seconds
KEEPALIVES = {"tcp_keepalives_idle": 5, "tcp_keepalives_interval": 2, "tcp_keepalives_count": 3}
KEEPALIVE_S = 5 + 2 * 3
#: the worker's side of its sign's connection: a check that gets no answer fails within
#: about 3 s (the network cut), before the server drops the connection (`KEEPALIVE_S`), so
#: the worker gives its leases up before a relay can take its sessions over
CLIENT_KEEPALIVES = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 2,
    "tcp_user_timeout": 3000,
}


def new_key() -> int:
    """A fresh key for a worker process's sign."""
    return 1 + secrets.randbelow(KEY_LIMIT - 1)


class Sign(Protocol):
    """A sign of life held by this process."""

    key: int

    def check(self) -> None:
        """Raise StoreUnavailable if the sign is no longer held (after trying to take it again)."""
        ...

    def release(self) -> None:
        """Give the sign up (a worker that stops): a check after it never takes it again."""
        ...


class Signs(Protocol):
    """How one database's workers hold their signs and how the relay reads them."""

    def hold(self, key: int) -> Sign:
        """Take sign `key` for this process; StoreUnavailable if it cannot."""
        ...

    def gone(self, conn: Connection, keys: set[int]) -> set[int]:
        """Those of `keys` whose holder is gone."""
        ...

    def absent(self, conn: Connection, *, limit: int) -> set[int]:
        """The signs named by the leases of runnable sessions whose holder is gone."""
        ...

    def any_held(self, conn: Connection) -> bool:
        """Whether any sign may be held now: False only when no worker holds one."""
        ...


def signs_for(engine: Engine) -> Signs | None:
    """The signs `engine`'s database supports, or None (an in-memory or other database:
    leases end by expiry only)."""
    if engine.dialect.name == "postgresql":
        return AdvisoryLocks(engine)
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database and database != ":memory:":
        return LockFiles(Path(f"{database}.live"))
    return None


def absent(engine: Engine, signs: Signs, *, limit: int = 500) -> set[int]:
    """The signs named by the leases of runnable sessions whose holder is gone."""
    with engine.connect() as conn:
        return signs.absent(conn, limit=limit)


def take_over(
    engine: Engine, signs: Signs, keys: Iterable[int], *, now: datetime, limit: int = 500
) -> list[Due]:
    """The runnable sessions leased under the signs `keys`, found gone once more in this
    transaction: their lease cleared and a tick written, as for an expired lease (the
    claim of that tick then applies the in-doubt rules to a call found started)."""
    wanted = set(keys)
    if not wanted:
        return []
    query = (
        select(sessions.c.id, sessions.c.version, sessions.c.lease_owner)
        .where(
            sessions.c.status.in_([s.value for s in RUNNABLE]),
            sessions.c.lease_expires_at.is_not(None),
            # only the gone signs' rows are locked (a key is digits: nothing to escape)
            or_(*(sessions.c.lease_owner.like(f"%@{key}") for key in sorted(wanted))),
        )
        .order_by(sessions.c.lease_expires_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    with engine.begin() as conn:
        found = [(r.id, r.version, r.lease_owner) for r in conn.execute(query).all()]
        found = [r for r in found if key_of(r[2]) in wanted]
        gone = signs.gone(conn, {k for r in found if (k := key_of(r[2])) is not None})
        found = [r for r in found if key_of(r[2]) in gone]
        revive(conn, found, now=now)
        if found:
            conn.execute(insert(events), [_taken_over(*r, now=now) for r in found])
    return [Due(session_id, version, owner=owner) for session_id, version, owner in found]


def _taken_over(session_id: str, version: int, owner: str, *, now: datetime) -> dict[str, Any]:
    """The event that says the session was taken over from `owner`, whose sign was gone."""
    event = Event(kind=EventKind.TAKEN_OVER, at=now, data={"from": owner})
    return rows.event_to_row(session_id, version, event)


def _leased(conn: Connection, *, limit: int) -> set[int]:
    """The signs the leases of runnable sessions name, at most `limit`: each sign once,
    those of the oldest leases first (a dead worker's are no longer renewed), so that many
    leases of live workers never hide a dead one's."""
    owner = sessions.c.lease_owner
    # the digits after the last "@" (`_SIGNED`): what is left once trailing digits are trimmed
    head = func.rtrim(owner, "0123456789")
    key = func.substr(owner, func.length(head) + 1)
    rows = conn.execute(
        select(key)
        .where(
            sessions.c.status.in_([s.value for s in RUNNABLE]),
            sessions.c.lease_expires_at.is_not(None),
            owner.like("%@%"),
            head.like("%@"),
        )
        .group_by(key)
        .order_by(func.min(sessions.c.lease_expires_at))
        .limit(limit)
    ).scalars()
    return {int(k) for k in rows if k and len(k) <= 18}


class AdvisoryLocks:
    """Postgres: sign K is `pg_advisory_lock(K)` held on a connection of its own."""

    #: the signs among `:keys` held now, by any connection to this database
    HELD = text(
        "SELECT (l.classid::bigint << 32) | l.objid::bigint AS key FROM pg_locks AS l "
        "WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND (l.classid::bigint << 32) | l.objid::bigint = ANY(:keys)"
    )

    #: the relay's look, one statement: the signs the leases of runnable sessions name
    #: (by the partial index of leased sessions), each once, less those `pg_locks` shows
    #: held, those of the oldest leases first (a dead worker's are no longer renewed), at
    #: most `:limit`; a session whose lease names no sign is left to expiry
    ABSENT = text(
        "SELECT k.key FROM ("
        "  SELECT substring(s.lease_owner from '@([0-9]{1,18})$')::bigint AS key,"
        "  min(s.lease_expires_at) AS oldest"
        f"  FROM {SESSIONS} AS s WHERE s.{RUNNABLE_SQL}"
        "  AND s.lease_expires_at IS NOT NULL AND s.lease_owner LIKE '%@%' GROUP BY 1"
        ") AS k WHERE k.key IS NOT NULL AND NOT EXISTS ("
        "  SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.objsubid = 1"
        "  AND l.granted AND (l.classid::bigint << 32) | l.objid::bigint = k.key"
        "  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
        " ORDER BY k.oldest LIMIT :limit"
    )

    #: any advisory lock of the kind signs are, held in this database (another program's
    #: counts too: this says only that no worker holds a sign when it finds none)
    ANY = text(
        "SELECT EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'advisory' "
        "AND l.objsubid = 1 AND l.granted "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
    )

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def hold(self, key: int) -> Sign:
        return _Lock(self.engine, key)

    def any_held(self, conn: Connection) -> bool:
        return bool(conn.execute(self.ANY).scalar())

    def absent(self, conn: Connection, *, limit: int) -> set[int]:
        return set(conn.execute(self.ABSENT, {"limit": limit}).scalars())

    def gone(self, conn: Connection, keys: set[int]) -> set[int]:
        if not keys:
            return set()
        held = set(conn.execute(self.HELD, {"keys": sorted(keys)}).scalars())
        return keys - held


class _Lock:
    def __init__(self, engine: Engine, key: int) -> None:
        self._engine, self.key = engine, key
        self._mutex = threading.Lock()
        self._conn: Any = None
        #: closes the connection held now if this sign is dropped without `release` (its
        #: holder forgot it): the lock goes with it, and no open connection is left to the
        #: garbage collector
        self._closing: weakref.finalize[Any, _Lock] | None = None
        #: given up: a check that comes late (its thread stalled past the stop) takes it not
        self._released = False
        self._take()

    def _take(self) -> None:
        # a connection of its own, not the pool's: after a restart of Postgres the pool
        # may hold dead ones, and this one must be taken again at once
        dialect = self._engine.dialect
        cargs, cparams = dialect.create_connect_args(self._engine.url)
        try:
            driver: Any = dialect.connect(*cargs, **{**cparams, **CLIENT_KEEPALIVES})
        except Exception as exc:
            raise StoreUnavailable(f"could not connect to take the sign {self.key}: {exc}") from exc
        try:
            driver.autocommit = True
            with driver.cursor() as cursor:
                for name, value in KEEPALIVES.items():
                    # ignored on a unix socket
                    cursor.execute("SELECT set_config(%s, %s, false)", (name, str(value)))
                cursor.execute("SELECT pg_try_advisory_lock(%s)", (self.key,))
                row = cursor.fetchone()
        except Exception as exc:
            driver.close()
            raise StoreUnavailable(f"could not take the sign {self.key}: {exc}") from exc
        if row is None or not row[0]:
            driver.close()
            raise StoreUnavailable(f"the sign {self.key} is still held by an earlier connection")
        self._conn = driver
        self._closing = weakref.finalize(self, _close_quietly, driver)

    def check(self) -> None:
        with self._mutex:
            if self._released:
                return
            if self._conn is None:
                self._take()
                return
            try:
                with self._conn.cursor() as cursor:
                    cursor.execute("SELECT 1")
            except Exception as exc:
                self._drop()
                raise StoreUnavailable(
                    f"the connection holding sign {self.key} ended: {exc}"
                ) from exc

    def release(self) -> None:
        with self._mutex:
            self._released = True
            if self._conn is not None:
                # now, not when the backend notices the closed connection a moment later
                with contextlib.suppress(Exception), self._conn.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
            self._drop()

    def _drop(self) -> None:
        closing, self._conn, self._closing = self._closing, None, None
        if closing is not None:
            closing()


def _close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):  # already gone: its lock with it
        conn.close()


class LockFiles:
    """SQLite: sign K is an exclusive `flock` on `folder/K`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def hold(self, key: int) -> Sign:
        return _File(self.folder, key)

    def gone(self, conn: Connection, keys: set[int]) -> set[int]:
        return {key for key in keys if not self._held(key)}

    def absent(self, conn: Connection, *, limit: int) -> set[int]:
        return self.gone(conn, _leased(conn, limit=limit))

    def any_held(self, conn: Connection) -> bool:
        # read from /proc/locks, not probed with a lock of our own: a probe taken while a
        # worker creates its file would make it fail to take its sign
        try:
            files = [f for f in self.folder.iterdir() if f.name.isascii() and f.name.isdigit()]
            inodes = {f.stat().st_ino for f in files}
        except FileNotFoundError:
            return False  # no worker has held a sign on this database, or its file went
        except OSError:
            return True  # not ours to look in: say nothing
        if not inodes:
            return False
        try:
            locks = Path("/proc/locks").read_text()
        except OSError:
            return True  # cannot tell without touching a sign: say nothing
        held = {
            int(field.rsplit(":", 1)[1])
            for line in locks.splitlines()
            if "FLOCK" in line
            for field in line.split()
            if field.count(":") == 2 and field.rsplit(":", 1)[1].isdigit()
        }
        return bool(inodes & held)

    def _held(self, key: int) -> bool:
        path = self.folder / str(key)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False  # given up, or found gone by another relay
        except OSError:
            return True  # not ours to probe (another user's): left to its lease
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return True
                raise
            path.unlink(missing_ok=True)  # its holder is dead: a key is never drawn again
            return False
        finally:
            os.close(fd)


class _File:
    def __init__(self, folder: Path, key: int) -> None:
        self.key = key
        self.folder, self.path = folder, folder / str(key)
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._released = False  # as `_Lock`'s
        self._take()

    def _take(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreUnavailable(f"could not create the sign file {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreUnavailable(
                f"the sign file {self.path} is locked by another process"
            ) from exc
        self._fd = fd

    def check(self) -> None:
        with self._mutex:
            if self._released:
                return
            if self._fd is None:
                self._take()  # lost at the last check: held again from now
                return
            if os.fstat(self._fd).st_nlink == 0:
                # removed (by hand, a cleaner): a relay sees it gone; this lock is worthless
                fd, self._fd = self._fd, None
                os.close(fd)
                raise StoreUnavailable(f"the sign file {self.path} was removed")

    def release(self) -> None:
        with self._mutex:
            self._released = True
            fd, self._fd = self._fd, None
            if fd is not None:
                self.path.unlink(missing_ok=True)
                os.close(fd)


__all__ = [
    "KEEPALIVE_S",
    "Sign",
    "Signs",
    "absent",
    "new_key",
    "signs_for",
    "take_over",
]
