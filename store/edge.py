"""The store's edge: SQLAlchemy's and the driver's exceptions become tickwork's own.

Inside store/ the code catches SQLAlchemy's exceptions where it means to (a unique key that
tells of a race, a dropped connection that stops a retention pass); what leaves it is one of
`tickwork.fsm.errors`' store errors, so that nothing above store/ imports SQLAlchemy or
psycopg. `guarded` puts the translation on every public method of a class the port hands
out (the stores, retention, cards, environments, the database's blobs); `translating` is it
for a block (the migrations).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import psycopg
from sqlalchemy import Engine, QueuePool
from sqlalchemy import exc as sa
from tickwork.fsm.errors import (
    SchemaMissing,
    StoreBusy,
    StoreConflict,
    StoreError,
    StoreUnavailable,
    UnstorableValue,
)
from tickwork.store.urls import shown

C = TypeVar("C", bound=type)

#: what SQLAlchemy and the driver raise; anything else goes through as it is
DATABASE_ERRORS = (sa.SQLAlchemyError, psycopg.Error)
#: the database did not answer, not a refusal of this request
_AWAY = (sa.OperationalError, sa.InterfaceError, sa.DisconnectionError)
_DRIVER_AWAY = (psycopg.OperationalError, psycopg.InterfaceError)
#: a table or column the query names is not there: SQLite's words, Postgres' errors
_NO_SCHEMA = ("no such table", "no such column")
_UNDEFINED = (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)


def translate(
    exc: BaseException, *, database: str, pool_timeout_s: float | None = None
) -> BaseException:
    """The error to raise instead of `exc`, a database's failure seen by a store of
    `database` (a URL without its password) whose pool waits `pool_timeout_s` for a
    connection: a `StoreError`, or the caller's own mistake SQLAlchemy wrapped (a naive
    datetime refused before it was sent) as it was raised."""
    orig = getattr(exc, "orig", None)
    wrapped = isinstance(exc, sa.StatementError) and not isinstance(exc, sa.DBAPIError)
    if wrapped and isinstance(orig, Exception) and not isinstance(orig, DATABASE_ERRORS):
        return orig
    detail = (str(orig or exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, (sa.IntegrityError, psycopg.IntegrityError)):
        return StoreConflict(f"the database {database} refused the write: {detail}")
    if isinstance(exc, (sa.DataError, psycopg.DataError)):
        return UnstorableValue(
            f"the database {database} refused a value ({detail}); check the text and numbers given"
        )
    if isinstance(orig or exc, _UNDEFINED) or any(sign in detail for sign in _NO_SCHEMA):
        return SchemaMissing(
            f"the database {database} has no tickwork schema, or an older one ({detail}); run "
            "`tickwork db upgrade`"
        )
    if isinstance(exc, sa.TimeoutError):  # the pool's: its connections are all in use
        return StoreBusy(
            f"every connection to the database {database} stayed in use ({detail}); this "
            "process had more requests at once than its pool holds connections",
            waited_s=pool_timeout_s,
        )
    if isinstance(exc, _AWAY) or isinstance(orig or exc, _DRIVER_AWAY):
        return StoreUnavailable(
            f"cannot use the database {database}: {detail}; check that it runs and that "
            "TICKWORK_DATABASE_URL names it"
        )
    return StoreError(f"the database {database} failed: {detail}")


@contextlib.contextmanager
def translating(database: str, *, pool_timeout_s: float | None = None) -> Iterator[None]:
    """Inside the block, a database error is raised as `translate` makes it."""
    try:
        yield
    except DATABASE_ERRORS as exc:
        _raise(exc, database, pool_timeout_s)


def _pool_wait_s(engine: Engine) -> float | None:
    """How long `engine`'s pool waits for a connection when all are in use (None: a pool
    that never waits, as an in-memory SQLite database's one connection)."""
    pool = engine.pool
    return pool.timeout() if isinstance(pool, QueuePool) else None


def _raise(exc: BaseException, database: str, pool_timeout_s: float | None = None) -> NoReturn:
    found = translate(exc, database=database, pool_timeout_s=pool_timeout_s)
    if found is getattr(exc, "orig", None):
        raise found.with_traceback(found.__traceback__) from None
    raise found from exc


def guarded(cls: C) -> C:
    """`cls` with each public method (and property) raising `translate`'s errors; the
    instances must have the `engine` they use. A method that returns a generator has the
    generator guarded too (its rows are read as it is iterated)."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(cls, name)
        if isinstance(member, property) and member.fget is not None:
            setattr(cls, name, property(_guard(member.fget), doc=member.__doc__))
        elif inspect.isfunction(member) and not getattr(member, "_guarded", False):
            setattr(cls, name, _guard(member))
    return cls


def _guard(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        engine: Engine = self.engine
        try:
            result = method(self, *args, **kwargs)
        except DATABASE_ERRORS as exc:
            _raise(exc, shown(engine.url), _pool_wait_s(engine))
        if inspect.isgenerator(result):
            return _rows(result, engine)
        return result

    call._guarded = True  # type: ignore[attr-defined]
    return call


def _rows(rows: Iterator[Any], engine: Engine) -> Iterator[Any]:
    with translating(shown(engine.url), pool_timeout_s=_pool_wait_s(engine)):
        yield from rows
