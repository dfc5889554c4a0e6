"""Dead-letter stats from the daily counts equal a count of the table: after records, after
retention prunes some, from any `since`, with NULL values; and the migration's backfill
counts what was there (SQLite and Postgres)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from tickwork.fsm import machine
from tickwork.fsm.values import ErrorCode
from tickwork.store import Store, make_engine, open_store
from tickwork.store.archive import DirectoryArchive
from tickwork.store.dead_letter_counts import GROUPS
from tickwork.store.dead_letters import Closing, close, stats
from tickwork.store.migrate import downgrade, upgrade
from tickwork.store.retention import Policy, archive_pass
from tickwork.store.schema import dead_letter_counts, dead_letter_totals, dead_letters

from tests.conftest import Clock
from tests.services import postgres_database
from tests.store.conftest import claim, new_session, run_step

#: (session id, code, message, model, last tool or None), failed in this order
LETTERS = [
    ("a1", ErrorCode.LOOP, "stagnation loop at step 4", "m1", "read_file"),
    ("a2", ErrorCode.MODEL_ERROR, "HTTP 401 for key abcdef0123456789", "m2", None),
    ("a3", ErrorCode.LOOP, "ping_pong loop at step 9", "m1", "run_tests"),
    ("b1", ErrorCode.DEADLINE, "deadline of 30 s passed", "m2", None),
    ("b2", ErrorCode.LOOP, "stagnation loop at step 7", "m1", "read_file"),
    ("b3", ErrorCode.MODEL_ERROR, "HTTP 404 for key 9876543210fedcba", "m1", "read_file"),
    ("c1", ErrorCode.LOOP, "stagnation loop at step 2", "m2", None),
    ("c2", ErrorCode.DEADLINE, "deadline of 60 s passed", "m2", "run_tests"),
]


def fail(
    store: Store,
    clock: Clock,
    session_id: str,
    code: ErrorCode,
    message: str,
    model: str,
    tool: str | None,
) -> None:
    now = clock()
    store.create(new_session(session_id, now=now, model=model), now=now)
    if tool is not None:
        run_step(store, session_id, 1, now=now, tool=tool)
    claimed = claim(store, session_id, now=now)
    change = machine.fail(claimed.head, code, message, now=now)
    store.save(change, version=claimed.head.version, owner="worker-1", now=now)


def fill(store: Store, clock: Clock) -> None:
    """LETTERS over three UTC days from 2026-01-01: a* on the first, b* on the second, c* on
    the third, each day's at 20:00, 21:00 and 22:00."""
    start = clock()
    for letter in LETTERS:
        day, n = "abc".index(letter[0][0]), int(letter[0][1]) - 1
        clock.now = start.replace(hour=20) + timedelta(days=day, hours=n)
        fail(store, clock, *letter)


def counted(engine: Engine, by: str, since: datetime | None = None) -> list[dict[str, Any]]:
    """What stats answered before the daily counts: a GROUP BY over the whole table."""
    column = dead_letters.c[by]
    query = select(
        column.label("value"), func.count().label("count"), func.max(dead_letters.c.at)
    ).group_by(column)
    if since is not None:
        query = query.where(dead_letters.c.at >= since)
    with engine.connect() as conn:
        found = [{"value": v, "count": n, "latest": at} for v, n, at in conn.execute(query)]
    return sorted(found, key=lambda g: (-g["count"], g["value"] is None, g["value"] or ""))


def assert_counted(engine: Engine, since: datetime | None = None) -> None:
    for by in GROUPS:
        assert stats(engine, by=by, since=since) == counted(engine, by, since), (by, since)


def test_stats_equal_a_count_of_the_table(store: Store, clock: Clock) -> None:
    fill(store, clock)
    first = datetime(2026, 1, 1, tzinfo=UTC)

    assert_counted(store.engine)
    assert {g["value"] for g in stats(store.engine, by="last_tool")} == {
        None,
        "read_file",
        "run_tests",
    }
    for since in (
        first,  # before them all, on a day boundary
        first + timedelta(hours=21),  # inside the first day
        first + timedelta(hours=21, microseconds=1),  # just after a dead letter
        first + timedelta(days=1),  # the second day's midnight
        first + timedelta(days=1, hours=21, minutes=30),
        first + timedelta(days=2, hours=23),  # inside the last day, after its last one
        first + timedelta(days=5),  # after them all
        (first + timedelta(days=1, hours=20)).astimezone(timezone(timedelta(hours=-5))),
    ):
        assert_counted(store.engine, since)


def test_stats_stay_equal_after_retention_prunes_some(
    store: Store, clock: Clock, tmp_path: Path
) -> None:
    fill(store, clock)
    for session_id in ("a2", "b1", "b3", "c1"):  # two of the NULL tools among them
        close(store.engine, session_id, state=Closing.DISMISSED, by="olga", reason="t", now=clock())
    clock.advance(120)

    report = archive_pass(
        store.engine,
        store.load,
        DirectoryArchive(tmp_path / "archive"),
        Policy(failed_s=60),
        now=clock(),
    )

    assert report.archived == 4
    with store.engine.connect() as conn:
        left = conn.execute(select(dead_letters.c.session_id)).scalars().all()
        counts = conn.execute(select(dead_letter_counts.c.count)).scalars().all()
        counts += conn.execute(select(dead_letter_totals.c.count)).scalars().all()
    assert sorted(left) == ["a1", "a3", "b2", "c2"]
    assert min(counts) > 0  # a value counted down to none is gone
    assert_counted(store.engine)
    assert_counted(store.engine, datetime(2026, 1, 2, 21, tzinfo=UTC))


def test_closing_a_dead_letter_leaves_it_counted(store: Store, clock: Clock) -> None:
    fill(store, clock)
    close(store.engine, "a1", state=Closing.RESOLVED, by="olga", reason="fixed", now=clock())

    assert sum(g["count"] for g in stats(store.engine, by="code")) == len(LETTERS)
    assert_counted(store.engine)


def test_a_recount_counts_what_older_workers_wrote(store: Store, clock: Clock) -> None:
    """A worker older than migration 0009 records a dead letter without counting it (a
    rolling upgrade); `dlq stats --recount` makes the stats exact again."""
    fill(store, clock)
    with store.engine.begin() as conn:
        row = dict(conn.execute(select(dead_letters)).mappings().first() or {})
        row.pop("id")
        conn.execute(dead_letters.insert(), [{**row, "session_id": "older-worker"}])
    assert sum(g["count"] for g in stats(store.engine, by="code")) == len(LETTERS)

    assert store.recount_dead_letters() > 0

    assert sum(g["count"] for g in stats(store.engine, by="code")) == len(LETTERS) + 1
    assert_counted(store.engine)
    fail(store, clock, "d1", ErrorCode.LOOP, "stagnation loop at step 3", "m1", None)
    assert_counted(store.engine)  # counted on top of the recount


def test_a_recount_derives_the_stored_signatures_again(store: Store, clock: Clock) -> None:
    """Signatures are stored per dead letter and in the counts: those an older tickwork
    derived (digits as N, request ids kept) group with today's after `dlq stats --recount`."""
    fill(store, clock)
    message = "permanent error: 503 Service Unavailable (request id: req_3f2ab1c9e0d4)"
    fail(store, clock, "new", ErrorCode.MODEL_ERROR, message, "m1", None)
    older = "MODEL_ERROR: permanent error: N Service Unavailable (request id: req_NfNabNcNeNdN)"
    with store.engine.begin() as conn:
        row = dict(conn.execute(select(dead_letters)).mappings().first() or {})
        row.pop("id")
        conn.execute(
            dead_letters.insert(),
            [
                {
                    **row,
                    "session_id": "old",
                    "code": "MODEL_ERROR",
                    "message": message.replace("3f2ab1c9e0d4", "b7e2d9f4a1"),
                    "error_signature": older,
                }
            ],
        )

    store.recount_dead_letters()

    grouped = {g["value"]: g["count"] for g in stats(store.engine, by="error_signature")}
    assert older not in grouped
    assert (
        grouped["MODEL_ERROR: permanent error: 503 Service Unavailable (request id: req_<id>)"] == 2
    )
    assert_counted(store.engine)


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    with postgres_database() as url:
        yield url


def test_the_upgrade_counts_the_dead_letters_already_there(fresh_url: str) -> None:
    upgrade(fresh_url)
    engine = make_engine(fresh_url)
    try:
        fill(open_store(engine), Clock())
        with engine.connect() as conn:
            kept = sorted(conn.execute(select(dead_letter_counts)).all())
            kept_totals = sorted(conn.execute(select(dead_letter_totals)).all())
        engine.dispose()
        downgrade(fresh_url, "0008_lifecycle")

        upgrade(fresh_url)  # 0009's backfill, then 0017_tenants' recount per tenant

        with engine.connect() as conn:
            assert sorted(conn.execute(select(dead_letter_counts)).all()) == kept
            assert sorted(conn.execute(select(dead_letter_totals)).all()) == kept_totals
        assert len(kept) > len(kept_totals) > len(GROUPS)
        assert_counted(engine)
    finally:
        engine.dispose()
