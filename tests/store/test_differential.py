"""The Core store and the Postgres store on the same Postgres: the same ticks, the same rows.

`PostgresStore` writes the tick (claim, start a call, save) in one statement each where
`CoreStore` runs a transaction of several; both build what they write in `store/ticks.py`.
Here one script of ticks (think, execute, a claim that starts its call, an approval, a
model retry, a cancel, a failure with its dead letter, claims lost in every way) runs
through each on an emptied database, and every row of every table, and every value or
error the calls gave back, must match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select
from tickwork.fsm import machine
from tickwork.fsm.errors import ClaimLost
from tickwork.fsm.values import Budgets, CallState, ErrorCode, Status
from tickwork.store import CoreStore, PostgresStore, Store, open_store
from tickwork.store.files import FileChange
from tickwork.store.schema import metadata

from tests.conftest import Clock
from tests.store.conftest import (
    IDEMPOTENT,
    LEASE_S,
    awaiting_calls,
    claim,
    decision,
    execute,
    execute_change,
    new_session,
    reply,
    think,
    think_change,
)

#: columns numbered by the database: the order of the rows is compared, not the numbers
NUMBERED = {"id"}


def _empty(engine: Engine) -> None:
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())


def _rows(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows in primary-key order, without the numbers the database gave."""
    found = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            query = select(table).order_by(*table.primary_key.columns)
            found[table.name] = [
                {k: v for k, v in r.items() if k not in NUMBERED}
                for r in conn.execute(query).mappings()
            ]
    return found


def _outcome(call: Callable[[], Any]) -> Any:
    """What a store call gave back: its value, or its error's type and message."""
    try:
        return call()
    except ClaimLost as exc:
        return ("ClaimLost", str(exc))


def script(store: Store, clock: Clock) -> list[Any]:
    """Ticks through every kind of write; what each gave back, in order."""
    seen: list[Any] = []

    # a step whose call changes a file, then an approval, then the answer
    store.create(new_session("a", now=clock()), now=clock())
    seen.append(think(store, "a", reply(("read_file", {"path": "x"})), now=clock()))
    claimed = claim(store, "a", now=clock.advance(1), idempotent=IDEMPOTENT)
    seen.append(claimed)
    change = execute_change(store, claimed, now=clock(), idempotent=True)
    files = FileChange(step=1, call_id="s1c0", changes={"x": "h1"}, state="st1")
    seen.append(
        store.save(change, version=claimed.head.version, owner="worker-1", now=clock(), files=files)
    )
    proposal = reply(("danger", {"rm": "-rf"}), ("read_file", {"path": "y"}), content="two")
    seen.append(think(store, "a", proposal, now=clock.advance(1)))
    for call in awaiting_calls(store, "a"):
        seen.append(store.decide("a", decision(call, now=clock(), comment="ok"), now=clock()))
    while (head := store.get("a")).status is Status.EXECUTING:
        seen.append(execute(store, "a", now=clock.advance(1), output=f"out v{head.version}"))
    seen.append(think(store, "a", reply(content="done"), now=clock.advance(1)))

    # a transient model error: a delayed tick; then a cancel while the tick runs
    store.create(new_session("b", now=clock()), now=clock())
    claimed = claim(store, "b", now=clock.advance(1))
    retry = machine.model_failed(claimed.head, error="503", transient=True, now=clock())
    seen.append(store.save(retry, version=0, owner="worker-1", now=clock()))
    claimed = claim(store, "b", now=clock.advance(30))
    seen.append(store.request_cancel("b", now=clock(), by="bob"))
    change = think_change(claimed, reply(("read_file", {"path": "z"})), now=clock())
    seen.append(store.save(change, version=claimed.head.version, owner="worker-1", now=clock()))
    claimed = claim(store, "b", now=clock.advance(1))
    todo = machine.start_execute(
        claimed.head, claimed.calls, claimed.decisions, idempotent=False, now=clock()
    )
    assert isinstance(todo, machine.Change)
    seen.append(store.save(todo, version=claimed.head.version, owner="worker-1", now=clock()))

    # a spent budget, and a failure that closes a started call: both dead-lettered
    store.create(new_session("c", now=clock(), budgets=Budgets(max_steps=1)), now=clock())
    seen.append(think(store, "c", reply(("read_file", {"path": "c"})), now=clock.advance(1)))
    seen.append(execute(store, "c", now=clock.advance(1)))
    seen.append(think(store, "c", reply(("read_file", {"path": "d"})), now=clock.advance(1)))
    store.create(new_session("d", now=clock()), now=clock())
    think(store, "d", reply(("read_file", {"path": "e"})), now=clock.advance(1))
    claimed = claim(store, "d", now=clock.advance(1))
    store.start_call("d", claimed.head.version, claimed.calls[0], owner="worker-1", now=clock())
    started = [c.model_copy(update={"state": CallState.STARTED}) for c in claimed.calls]
    failed = machine.fail(
        claimed.head, ErrorCode.INTERNAL, "the tool crashed", now=clock(), open_calls=started
    )
    seen.append(store.save(failed, version=claimed.head.version, owner="worker-1", now=clock()))

    # claims lost in every way: taken, stale, expired and taken over, then a late start/save
    store.create(new_session("e", now=clock()), now=clock())
    think(store, "e", reply(("read_file", {"path": "f"})), now=clock.advance(1))
    mine = claim(store, "e", now=clock.advance(1), owner="w1")
    seen.append(store.claim("e", mine.head.version, owner="w2", now=clock(), lease_s=LEASE_S))
    seen.append(store.claim("e", 0, owner="w2", now=clock(), lease_s=LEASE_S))
    theirs = claim(store, "e", now=clock.advance(LEASE_S + 1), owner="w2")
    call = mine.calls[0]
    seen.append(
        _outcome(lambda: store.start_call("e", mine.head.version, call, owner="w1", now=clock()))
    )
    late = execute_change(store, theirs, now=clock())
    seen.append(
        _outcome(lambda: store.save(late, version=mine.head.version, owner="w1", now=clock()))
    )
    seen.append(store.save(late, version=theirs.head.version, owner="w2", now=clock()))
    seen.append(
        _outcome(lambda: store.save(late, version=theirs.head.version, owner="w2", now=clock()))
    )

    # an idempotent call the claim started, its worker gone before it ran: it runs again
    store.create(new_session("f", now=clock()), now=clock())
    think(store, "f", reply(("read_file", {"path": "g"})), now=clock.advance(1))
    seen.append(claim(store, "f", now=clock.advance(1), owner="w1", idempotent=IDEMPOTENT))
    later = claim(store, "f", now=clock.advance(LEASE_S + 1), owner="w2", idempotent=IDEMPOTENT)
    seen.append(later)
    again = execute_change(store, later, now=clock(), idempotent=True)
    seen.append(store.save(again, version=later.head.version, owner="w2", now=clock()))
    seen.append([store.load(s) for s in "abcdef"])
    return seen


def test_the_core_and_the_postgres_writes_leave_the_same_rows(postgres_engine: Engine) -> None:
    found = {}
    for core in (True, False):
        _empty(postgres_engine)
        store = open_store(postgres_engine, core=core)
        assert type(store) is (CoreStore if core else PostgresStore)
        said = script(store, Clock())
        found[core] = (said, _rows(postgres_engine))
    (core_said, core_rows), (pg_said, pg_rows) = found[True], found[False]
    assert pg_rows == core_rows
    assert pg_said == core_said
    # the script did what it says: every kind of row is there
    assert {t for t, r in core_rows.items() if r} >= {
        "tickwork_sessions", "tickwork_steps", "tickwork_calls", "tickwork_observations",
        "tickwork_decisions", "tickwork_events", "tickwork_outbox", "tickwork_dead_letters",
        "tickwork_file_changes",
    }  # fmt: skip
    statuses = {s.head.id: s.head.status for s in core_said[-1]}
    assert statuses == {
        "a": Status.COMPLETED,
        "b": Status.CANCELLED,
        "c": Status.FAILED,
        "d": Status.FAILED,
        "e": Status.READY,
        "f": Status.READY,
    }
    assert sum(1 for s in core_said if isinstance(s, tuple) and s[0] == "ClaimLost") == 3


def test_a_change_naming_a_call_that_is_not_tickworks_is_refused(postgres_engine: Engine) -> None:
    """Both saves find a call by its step, read from its id; an id the machine never makes
    is a bug, refused before anything is written."""
    _empty(postgres_engine)
    clock = Clock()
    for core in (True, False):
        store = open_store(postgres_engine, core=core)
        sid = f"bad-{core}"
        store.create(new_session(sid, now=clock()), now=clock())
        claimed = claim(store, sid, now=clock())
        change = think_change(claimed, reply(("read_file", {"path": "b"})), now=clock())
        odd = change.model_copy(update={"call_states": (("call-7", CallState.DONE),)})
        with pytest.raises(ValueError, match="'call-7' is not a call id"):
            store.save(odd, version=0, owner=claimed.owner, now=clock())
        assert store.get(sid).version == 0
