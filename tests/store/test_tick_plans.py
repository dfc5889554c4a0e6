"""The tick's statements on Postgres read as many rows at a session's step 150 as at its
step 20, on a database never analyzed (a young deployment, or autovacuum off): their
lookups must not depend on the planner's statistics to stay flat (store/postgres.py).
Both plans count: the one made for a run's parameters, and the generic plan a prepared
statement settles on (a worker's connections run the tick's statements prepared)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Engine, event
from tickwork.fsm.values import Budgets, Status
from tickwork.store import make_engine, open_store
from tickwork.store.migrate import upgrade
from tickwork.store.postgres import CLAIM, SAVE, PostgresStore

from tests.conftest import Clock
from tests.services import postgres_database
from tests.store.conftest import (
    IDEMPOTENT,
    claim,
    execute_change,
    new_session,
    reply,
    run_step,
    think_change,
)

pytestmark = pytest.mark.postgres

#: what each row-reading plan node counts: the rows it returned and those it threw away
READ = ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Join Filter")


@pytest.fixture
def engine() -> Iterator[Engine]:
    with postgres_database() as url:
        upgrade(url)
        engine = make_engine(url, pool_size=2, max_overflow=0)
        try:
            yield engine
        finally:
            engine.dispose()


def rows_read(plan: dict[str, Any]) -> int:
    """The rows every node of `plan` read, over all its loops."""
    loops = int(plan.get("Actual Loops", 1))
    own = sum(int(plan.get(key, 0)) for key in READ) * loops
    return own + sum(rows_read(p) for p in plan.get("Plans", ()))


def positional(statement: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """`statement` with `$1, $2, ...` for its `%(name)s` parameters, and their values in
    that order (for a PREPARE)."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in order:
            order.append(match[1])
        return f"${order.index(match[1]) + 1}"

    return re.sub(r"%\((\w+)\)s", number, statement), [params[n] for n in order]


@contextmanager
def explaining(engine: Engine, url: str) -> Iterator[dict[str, list[int]]]:
    """Every CLAIM and SAVE run on `engine` meanwhile is first run under EXPLAIN ANALYZE on
    a connection of its own and rolled back; yields the rows each read, by statement."""
    read: dict[str, list[int]] = defaultdict(list)
    names = {CLAIM: "claim", SAVE: "save"}

    def explain(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        name = names.get(statement)
        if name is None:
            return
        with psycopg.connect(url) as other:
            # planned for these parameters (a statement's first runs), then the generic
            # plan a prepared statement settles on (the worker's, from its sixth run)
            custom = other.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
            (plan,) = custom.fetchone() or ((),)
            other.rollback()
            numbered, values = positional(statement, params)
            other.execute(f"PREPARE explained AS {numbered}")
            other.execute("SET plan_cache_mode = force_generic_plan")
            arguments = sql.SQL(", ").join(sql.Literal(v) for v in values)
            generic = other.execute(
                sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained ({})").format(arguments)
            )
            (generic_plan,) = generic.fetchone() or ((),)
            other.rollback()
        read[name].append(rows_read(plan[0]["Plan"]))
        read[f"{name} (generic)"].append(rows_read(generic_plan[0]["Plan"]))

    event.listen(engine, "before_cursor_execute", explain)
    try:
        yield read
    finally:
        event.remove(engine, "before_cursor_execute", explain)


def one_step(store: PostgresStore, session_id: str, n: int, *, now: datetime) -> None:
    """A THINK tick and an EXECUTE tick whose claim starts the step's idempotent call."""
    claimed = claim(store, session_id, now=now)
    answer = reply(("read_file", {"path": f"src/f{n:04d}.py"}), content=f"step {n}")
    head = store.save(
        think_change(claimed, answer, now=now),
        version=claimed.head.version,
        owner=claimed.owner,
        now=now,
    )
    assert head.status is Status.EXECUTING
    claimed = claim(store, session_id, now=now, idempotent=IDEMPOTENT)
    assert claimed.started is not None, "the claim should start the idempotent call"
    change = execute_change(store, claimed, now=now, idempotent=True)
    store.save(change, version=claimed.head.version, owner=claimed.owner, now=now)


def test_the_tick_reads_as_many_rows_late_in_a_session_as_early(
    engine: Engine, clock: Clock
) -> None:
    url = engine.url.render_as_string(hide_password=False).replace("+psycopg", "")
    store = open_store(engine)
    assert isinstance(store, PostgresStore)
    budgets = Budgets(max_steps=1000)
    store.create(new_session("long", now=clock(), budgets=budgets), now=clock())
    for n in range(20):
        run_step(store, "long", n, now=clock())

    with explaining(engine, url) as early:
        one_step(store, "long", 20, now=clock())
    for n in range(21, 150):
        run_step(store, "long", n, now=clock())
    with explaining(engine, url) as read:
        one_step(store, "long", 150, now=clock())

    assert [len(c) for c in early.values()] == [2, 2, 2, 2], early  # THINK and EXECUTE each
    assert read == early, f"rows read at step 150 {read} against step 20 {early}"
