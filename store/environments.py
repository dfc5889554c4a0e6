"""Environments' rows: one build per key across the fleet, and who uses each
(docs/DESIGN.md section 13).

A build is claimed like a tick: a compare-and-swap on the key's row that succeeds only if
no live lease is held, setting an owner and a lease the builder renews. A builder killed
mid-build leaves a `building` row whose lease runs out; the next session that needs the
key takes the build over (one more attempt) and does it again. Every write is one short
transaction, on SQLite and Postgres alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import Engine, case, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from tickwork.fsm.errors import EnvironmentInUse
from tickwork.fsm.values import Status
from tickwork.store.schema import environment_uses, environments, sessions

#: builds of one key in a row, taken over after their builder died, before it is failed
MAX_ATTEMPTS = 3
#: the build log kept in the row (its end)
MAX_LOG_CHARS = 20_000
#: statuses of sessions that may still run a command in their environment
LIVE = tuple(s.value for s in Status if not s.terminal)


class EnvStatus(StrEnum):
    BUILDING = "building"  #: a worker holds the build (owner, lease)
    READY = "ready"  #: packed in the artifact store (`chunks`)
    FAILED = "failed"  #: the setup failed; `log` says why


class Verdict(StrEnum):
    """What a session asking for a key is to do."""

    BUILD = "build"  #: this caller holds the build now
    WAIT = "wait"  #: another worker builds it; look again later
    READY = "ready"  #: use it
    FAILED = "failed"  #: its build failed (after this session asked): the session fails


@dataclass(frozen=True)
class Environment:
    key: str
    status: EnvStatus
    owner: str | None
    lease_expires_at: datetime | None
    attempts: int
    size: int
    chunks: tuple[str, ...]
    log: str
    detail: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None
    used_at: datetime
    #: live sessions using it (listings only; 0 when not counted)
    live_sessions: int = 0
    #: all sessions recorded as using it (listings only)
    sessions: int = 0


def _row(row: Any, live: int = 0, total: int = 0) -> Environment:
    return Environment(
        key=row.key,
        status=EnvStatus(row.status),
        owner=row.owner,
        lease_expires_at=row.lease_expires_at,
        attempts=row.attempts,
        size=row.size,
        chunks=tuple(row.chunks or ()),
        log=row.log,
        detail=dict(row.detail or {}),
        created_at=row.created_at,
        finished_at=row.finished_at,
        used_at=row.used_at,
        live_sessions=live,
        sessions=total,
    )


class Environments:
    """The environments table of one database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def claim(
        self,
        key: str,
        *,
        owner: str,
        now: datetime,
        lease_s: float,
        asked_at: datetime,
        detail: dict[str, Any],
    ) -> tuple[Verdict, Environment]:
        """Say what a session asking for `key` at `now` does; `BUILD` means the caller
        holds the build until its lease runs out (renew it). `asked_at`: when the session
        first asked (its creation): a failure after it is the session's, one before it is
        an old build's, done again."""
        lease = now + timedelta(seconds=lease_s)
        for _ in range(5):  # each pass ends, or loses a race and reads the new row
            with self.engine.begin() as conn:
                row = conn.execute(select(environments).where(environments.c.key == key)).first()
                if row is None:
                    try:
                        with conn.begin_nested():
                            conn.execute(
                                insert(environments).values(
                                    key=key,
                                    status=EnvStatus.BUILDING.value,
                                    owner=owner,
                                    lease_expires_at=lease,
                                    attempts=1,
                                    size=0,
                                    chunks=[],
                                    log="",
                                    detail=detail,
                                    created_at=now,
                                    used_at=now,
                                )
                            )
                    except IntegrityError:
                        continue  # another worker inserted it first
                    return Verdict.BUILD, self._get(conn, key)
                found = _row(row)
                if found.status is EnvStatus.READY:
                    conn.execute(
                        update(environments).where(environments.c.key == key).values(used_at=now)
                    )
                    return Verdict.READY, found
                expired = found.lease_expires_at is None or found.lease_expires_at <= now
                if found.status is EnvStatus.BUILDING and not expired:
                    return Verdict.WAIT, found
                if found.status is EnvStatus.FAILED and (
                    found.finished_at is None or found.finished_at >= asked_at
                ):
                    return Verdict.FAILED, found
                interrupted = found.status is EnvStatus.BUILDING
                if interrupted and found.attempts >= MAX_ATTEMPTS:
                    why = (
                        f"the build was interrupted {found.attempts} times (its worker died "
                        "or lost its lease); not tried again for this session"
                    )
                    values: dict[str, Any] = {
                        "status": EnvStatus.FAILED.value,
                        "owner": None,
                        "lease_expires_at": None,
                        "log": (found.log + "\n" + why).strip()[-MAX_LOG_CHARS:],
                        "finished_at": now,
                    }
                else:
                    values = {
                        "status": EnvStatus.BUILDING.value,
                        "owner": owner,
                        "lease_expires_at": lease,
                        "attempts": found.attempts + 1 if interrupted else 1,
                        "detail": detail,
                        "used_at": now,
                    }
                taken = conn.execute(
                    update(environments)
                    .where(
                        environments.c.key == key,
                        environments.c.status == found.status.value,
                        environments.c.attempts == found.attempts,
                        _same(environments.c.owner, found.owner),
                    )
                    .values(**values)
                ).rowcount
                if taken != 1:
                    continue
                now_row = self._get(conn, key)
                return (Verdict.FAILED if values["status"] == "failed" else Verdict.BUILD), now_row
        raise RuntimeError(f"environment {key}: the build's row kept changing under the claim")

    def renew(self, key: str, *, owner: str, now: datetime, lease_s: float) -> bool:
        """Extend the builder's lease; False if the build is no longer `owner`'s."""
        with self.engine.begin() as conn:
            return bool(
                conn.execute(
                    update(environments)
                    .where(*self._held(key, owner))
                    .values(lease_expires_at=now + timedelta(seconds=lease_s))
                ).rowcount
            )

    def finish(
        self,
        key: str,
        *,
        owner: str,
        now: datetime,
        ok: bool,
        log: str,
        size: int = 0,
        chunks: tuple[str, ...] = (),
        detail: dict[str, Any] | None = None,
    ) -> bool:
        """Record the build's end (ready with its chunks, or failed with its log); False if
        the build was no longer `owner`'s (taken over: its result is not used)."""
        values: dict[str, Any] = {
            "status": (EnvStatus.READY if ok else EnvStatus.FAILED).value,
            "owner": None,
            "lease_expires_at": None,
            "size": size,
            "chunks": list(chunks),
            "log": log[-MAX_LOG_CHARS:],
            "finished_at": now,
            "used_at": now,
        }
        if detail is not None:
            values["detail"] = detail
        with self.engine.begin() as conn:
            return bool(
                conn.execute(
                    update(environments).where(*self._held(key, owner)).values(**values)
                ).rowcount
            )

    def spoil(self, key: str, *, why: str, now: datetime) -> bool:
        """A ready environment whose stored copy turned out corrupt is failed, so the next
        session asking for `key` builds it again; False if it was not ready."""
        with self.engine.begin() as conn:
            return bool(
                conn.execute(
                    update(environments)
                    .where(
                        environments.c.key == key,
                        environments.c.status == EnvStatus.READY.value,
                    )
                    .values(
                        status=EnvStatus.FAILED.value,
                        log=why[-MAX_LOG_CHARS:],
                        finished_at=now,
                    )
                ).rowcount
            )

    def use(self, key: str, session_id: str, *, now: datetime) -> None:
        """Record that `session_id` uses `key` (once; a later call changes nothing)."""
        with self.engine.begin() as conn:
            known = conn.execute(
                select(environment_uses.c.key).where(
                    environment_uses.c.key == key, environment_uses.c.session_id == session_id
                )
            ).first()
            if known is None:
                try:
                    with conn.begin_nested():
                        conn.execute(
                            insert(environment_uses).values(key=key, session_id=session_id, at=now)
                        )
                except IntegrityError:
                    pass  # recorded by a concurrent tick of the same session, or key removed

    def get(self, key: str) -> Environment | None:
        """One environment with its use counts; None if there is none with this key."""
        found = self.find(keys=(key,))
        return found[0] if found else None

    def find(self, *, keys: tuple[str, ...] = (), limit: int = 1000) -> list[Environment]:
        """Environments, most recently used first, with how many (live) sessions use each."""
        live = func.sum(case((sessions.c.status.in_(LIVE), 1), else_=0))
        counts = (
            select(
                environment_uses.c.key,
                func.count(environment_uses.c.session_id).label("total"),
                live.label("live"),
            )
            .join(sessions, sessions.c.id == environment_uses.c.session_id)
            .group_by(environment_uses.c.key)
            .subquery()
        )
        query = (
            select(environments, counts.c.total, counts.c.live)
            .outerjoin(counts, counts.c.key == environments.c.key)
            .order_by(environments.c.used_at.desc(), environments.c.key)
            .limit(limit)
        )
        if keys:
            query = query.where(environments.c.key.in_(keys))
        with self.engine.connect() as conn:
            return [_row(r, int(r.live or 0), int(r.total or 0)) for r in conn.execute(query)]

    def delete(self, key: str, *, force: bool = False) -> Environment | None:
        """Remove the row (and its uses); `EnvironmentInUse` if a live session uses it and
        not `force`. Returns the removed row (its chunks are for the caller to drop)."""
        found = self.get(key)
        if found is None:
            return None
        with self.engine.begin() as conn:
            # the row locked, so a use recorded meanwhile (its foreign key waits for the lock)
            # is counted here or comes after the row is gone, never lost between the two
            locked = select(environments.c.key).where(environments.c.key == key).with_for_update()
            if conn.execute(locked).first() is None:
                return None
            live = conn.execute(
                select(func.count())
                .select_from(
                    environment_uses.join(sessions, sessions.c.id == environment_uses.c.session_id)
                )
                .where(environment_uses.c.key == key, sessions.c.status.in_(LIVE))
            ).scalar_one()
            if live and not force:
                raise EnvironmentInUse(
                    f"environment {key} is used by {live} live session(s); "
                    "wait for them to end, or remove it anyway with --force"
                )
            conn.execute(delete(environment_uses).where(environment_uses.c.key == key))
            conn.execute(delete(environments).where(environments.c.key == key))
        return found

    def unused(self, *, before: datetime, limit: int = 100) -> list[Environment]:
        """Environments last used before `before` that no live session uses, and no build
        holds: what retention drops."""
        return [
            e
            for e in self.find(limit=100_000)
            if e.used_at < before and e.live_sessions == 0 and e.status is not EnvStatus.BUILDING
        ][:limit]

    @staticmethod
    def _held(key: str, owner: str) -> tuple[Any, ...]:
        return (
            environments.c.key == key,
            environments.c.status == EnvStatus.BUILDING.value,
            environments.c.owner == owner,
        )

    @staticmethod
    def _get(conn: Any, key: str) -> Environment:
        return _row(conn.execute(select(environments).where(environments.c.key == key)).one())


def _same(column: Any, value: Any) -> Any:
    return column.is_(None) if value is None else column == value


__all__ = ["EnvStatus", "Environment", "EnvironmentInUse", "Environments", "Verdict"]
