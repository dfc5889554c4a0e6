"""tickwork.store.dead_letters: the export's flat rows and the timeline by cause, on both
backends."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import ErrorCode
from tickwork.store import Store
from tickwork.store import dead_letters as dl
from tickwork.store.schema import dead_letters

from tests.conftest import T0, Clock
from tests.store.test_dead_letters import _fail, failed

__all__ = ["failed"]  # the fixture: five dead letters a minute apart from T0 + 1 min


def test_export_rows_are_flat_oldest_first_and_read_in_batches(
    store: Store, clock: Clock, failed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dl, "EXPORT_BATCH", 2)  # five rows: three round trips
    engine = store.engine
    dl.close(engine, "d3", state=dl.Closing.DISMISSED, by="erin", reason="noise", now=clock())
    with engine.begin() as conn:  # a dead letter forked before resolutions had a state
        conn.execute(
            update(dead_letters)
            .where(dead_letters.c.session_id == "d2")
            .values(resolved_at=clock(), resolution={"fork": "d2-fix", "by": "olga"})
        )

    rows = list(dl.export_rows(engine))
    assert [r["session_id"] for r in rows] == failed
    assert all(list(r) == [name for name, _ in dl.EXPORT_COLUMNS] for r in rows)
    by_id = {r["session_id"]: r for r in rows}
    assert by_id["d1"]["status"] == "open" and by_id["d1"]["forks"] == []
    assert by_id["d1"]["closed_by"] is None and by_id["d1"]["resolved_at"] is None
    assert (by_id["d2"]["status"], by_id["d2"]["forks"], by_id["d2"]["closed_by"]) == (
        "forked",
        ["d2-fix"],
        "olga",
    )
    assert (by_id["d3"]["status"], by_id["d3"]["reason"]) == ("dismissed", "noise")
    assert by_id["d4"]["failed_at"] == T0 + timedelta(minutes=4)
    assert by_id["d4"]["last_tool"] == "run_tests" and by_id["d4"]["steps"] == 1
    assert by_id["d3"]["steps"] == 0 and by_id["d3"]["last_tool"] is None
    assert "snapshot" not in by_id["d1"]
    with_snapshot = next(dl.export_rows(engine, with_snapshot=True))
    assert with_snapshot["snapshot"]["session"]["head"]["id"] == "d1"

    assert [r["session_id"] for r in dl.export_rows(engine, code="LOOP")] == ["d1", "d2", "d5"]
    assert [r["session_id"] for r in dl.export_rows(engine, unresolved=True)] == [
        "d1",
        "d4",
        "d5",
    ]
    later = T0 + timedelta(minutes=4)
    assert [r["session_id"] for r in dl.export_rows(engine, since=later)] == ["d4", "d5"]


def test_timeline_counts_every_bucket_by_code(
    store: Store, clock: Clock, failed: list[str]
) -> None:
    engine = store.engine
    # one more the next day, just after midnight UTC, and one long before
    _fail(store, "late", ErrorCode.DEADLINE, "deadline", now=T0 + timedelta(hours=12, minutes=1))
    _fail(store, "early", ErrorCode.LOOP, "loop", now=T0 - timedelta(days=40))

    days = dl.timeline(engine, bucket="day", since=T0 - timedelta(days=1), now=T0 + timedelta(2))
    assert days["buckets"] == [T0.replace(hour=0) + timedelta(days=d) for d in (-1, 0, 1, 2)]
    assert days["codes"] == [
        {"code": "LOOP", "counts": [0, 3, 0, 0], "total": 3},
        {"code": "MODEL_ERROR", "counts": [0, 2, 0, 0], "total": 2},
        {"code": "DEADLINE", "counts": [0, 0, 1, 0], "total": 1},
    ]
    assert days["total"] == 6

    hours = dl.timeline(engine, bucket="hour", since=T0, now=T0 + timedelta(hours=12, minutes=5))
    assert len(hours["buckets"]) == 13 and hours["buckets"][0] == T0
    counts = {c["code"]: c["counts"] for c in hours["codes"]}
    assert counts["LOOP"][0] == 3 and counts["DEADLINE"][12] == 1 and sum(counts["LOOP"]) == 3

    empty = dl.timeline(engine, bucket="day", since=T0 + timedelta(days=5), now=T0 + timedelta(6))
    assert empty["codes"] == [] and empty["total"] == 0 and len(empty["buckets"]) == 2
    with pytest.raises(InvalidInput, match="bucket=day"):
        dl.timeline(engine, bucket="hour", since=T0, now=T0 + timedelta(days=30))
    with pytest.raises(InvalidInput, match="after now"):
        dl.timeline(engine, bucket="day", since=T0 + timedelta(days=2), now=T0)
    with pytest.raises(InvalidInput, match="week"):
        dl.timeline(engine, bucket="week", since=T0, now=T0)
