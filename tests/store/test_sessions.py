"""create, get, load, list_sessions and events_after, on SQLite and Postgres."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select
from tickwork.fsm.values import (
    EventKind,
    Session,
    Status,
)
from tickwork.store import Store
from tickwork.store.schema import calls, observations, outbox, steps

from tests.conftest import Clock
from tests.store.conftest import (
    count_rows,
    execute,
    new_session,
    reply,
    run_step,
    table_rows,
    think,
)


def test_create_inserts_the_head_an_event_and_the_first_tick(store: Store, clock: Clock) -> None:
    head = store.create(new_session("sess-1", now=clock()), now=clock())

    assert head.version == 0
    assert store.get("sess-1") == head
    assert table_rows(store.engine, outbox) == [
        {
            "session_id": "sess-1",
            "version": 0,
            "due_at": clock(),
            "republished": 0,
            "published_at": clock(),
        }
    ]
    assert [(e.kind, e.data) for _, e in store.events_after("sess-1")] == [
        (EventKind.CREATED, {"kind": "repair", "model": "gpt-test", "status": "ready"})
    ]


def test_create_of_a_session_that_is_not_runnable_enqueues_nothing(
    store: Store, clock: Clock
) -> None:
    store.create(new_session("done", now=clock(), status=Status.COMPLETED), now=clock())

    assert table_rows(store.engine, outbox) == []


def test_create_of_a_fork_with_steps_inserts_them(store: Store, clock: Clock) -> None:
    store.create(new_session("parent", now=clock()), now=clock())
    run_step(store, "parent", 1, now=clock())
    run_step(store, "parent", 2, now=clock())
    parent = store.load("parent")
    child_head = parent.head.model_copy(
        update={"id": "copy", "version": 0, "parent_id": "parent", "fork_step": 2}
    )
    child = Session(head=child_head, steps=parent.steps, observations=parent.observations)

    store.create(child, now=clock())

    assert len(table_rows(store.engine, steps, steps.c.session_id == "copy")) == 2
    assert len(table_rows(store.engine, calls, calls.c.session_id == "copy")) == 2
    assert len(table_rows(store.engine, observations, observations.c.session_id == "copy")) == 2
    loaded = store.load("copy")
    assert loaded.steps == parent.steps
    assert loaded.observations == parent.observations
    assert loaded.head == child_head


def test_events_after_only_returns_that_sessions_events(store: Store, clock: Clock) -> None:
    store.create(new_session("a", now=clock()), now=clock())
    store.create(new_session("b", now=clock()), now=clock())
    run_step(store, "b", 1, now=clock())

    assert [e.kind for _, e in store.events_after("a")] == [EventKind.CREATED]
    assert count_rows(store.engine)["tickwork_events"] == 6


def test_times_come_back_as_the_same_instant_in_utc(store: Store) -> None:
    paris = timezone(timedelta(hours=2))
    created = datetime(2026, 3, 1, 14, 30, 15, 123456, tzinfo=paris)

    store.create(new_session("tz", now=created), now=created)

    head = store.get("tz")
    assert head.created_at == created
    assert head.created_at.utcoffset() == timedelta(0)
    assert head.created_at.microsecond == 123456
    assert table_rows(store.engine, outbox)[0]["due_at"] == created


def test_a_naive_time_is_refused(store: Store) -> None:
    naive = datetime(2026, 1, 1, 12, 0)
    with pytest.raises(ValueError, match="naive datetime"):
        store.create(new_session("naive", now=naive.replace(tzinfo=UTC)), now=naive)
    assert count_rows(store.engine)["tickwork_sessions"] == 0


def test_calls_keep_unparsable_and_nested_arguments(
    store: Store, clock: Clock, session_id: str
) -> None:
    nested = {"edits": [{"line": 3, "text": "x = '\u00e9'"}], "opts": {"dry": True, "n": None}}
    think(
        store,
        session_id,
        reply(("apply", nested), ("read_file", "{not json"), ("read_file", "[1, 2]")),
        now=clock(),
    )

    first, second, third = store.load(session_id).steps[0].calls
    assert (first.arguments, second.arguments, third.arguments) == (nested, None, None)
    assert (second.raw_arguments, third.raw_arguments) == ("{not json", "[1, 2]")
    with store.engine.connect() as conn:  # JSON null, as every other path stores None
        missing = conn.execute(select(func.count()).where(calls.c.arguments.is_(None)))
        assert missing.scalar() == 0
    execute(store, session_id, now=clock())
    head = execute(store, session_id, now=clock())
    assert head.status is Status.EXECUTING
    observation = store.load(session_id).observation(second.call_id)
    assert observation is not None and observation.is_error
    assert "not a valid JSON object" in observation.content


def test_a_step_written_without_cache_counts_reads_as_none_cached(
    store: Store, clock: Clock, session_id: str
) -> None:
    """A worker not yet upgraded (or an older row) leaves the cache columns NULL."""
    think(store, session_id, reply(("read_file", {"path": "a"})), now=clock.advance(1))
    with store.engine.begin() as conn:
        conn.execute(steps.update().values(cached_prompt_tokens=None, cache_creation_tokens=None))

    (step,) = store.load(session_id).steps
    assert (step.usage.cached_prompt_tokens, step.usage.cache_creation_tokens) == (0, 0)
