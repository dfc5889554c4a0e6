"""tickwork.store.dead_letters: the export's flat rows and the timeline by cause, on both
backends."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import update
from tickwork.fsm import machine
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.joins import JoinMode
from tickwork.fsm.values import ErrorCode, Usage
from tickwork.store import Store
from tickwork.store import dead_letters as dl
from tickwork.store.schema import dead_letters

from tests.conftest import T0, Clock
from tests.store.conftest import claim, new_session, run_step
from tests.store.test_dead_letters import _fail, failed
from tickwork.testing.store_contract.deliveries import take, wait
from tickwork.testing.store_contract.trees import finish, spawn

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


def _fail_after(store: Store, session_id: str, steps: range, *, now: datetime) -> None:
    for number in steps:
        run_step(store, session_id, number, now=now)  # 120 tokens and $0.01 each
    claimed = claim(store, session_id, now=now)
    store.save(
        machine.fail(claimed.head, ErrorCode.BUDGET_COST, "cost $N of $N", now=now),
        version=claimed.head.version,
        owner="worker-1",
        now=now,
    )


def test_a_fork_chain_is_counted_once_in_the_own_columns(store: Store, clock: Clock) -> None:
    """A fork starts with its parent's kept steps: its `steps`, `tokens` and `cost_usd`
    include them (as its budgets count them), its `own_*` columns do not, so summing
    `own_cost_usd` over the export is what was spent (found by an outside run)."""
    now = clock()
    store.create(new_session("root", now=now), now=now)
    _fail_after(store, "root", range(1, 4), now=now)
    store.fork(
        "root",
        new_id="fix",
        from_step=2,
        patch=ForkPatch(),
        by="bob",
        now=now,
        resolve_dead_letter=True,
    )
    _fail_after(store, "fix", range(3, 5), now=now)  # two steps of its own, after 1..2 kept

    rows = {r["session_id"]: r for r in dl.export_rows(store.engine)}
    root, fix = rows["root"], rows["fix"]
    assert (root["steps"], root["tokens"], root["cost_usd"]) == (3, 360, pytest.approx(0.03))
    assert (root["inherited_steps"], root["inherited_tokens"], root["inherited_cost_usd"]) == (
        0,
        0,
        0,
    )
    assert (root["own_steps"], root["own_tokens"], root["own_cost_usd"]) == (3, 360, 0.03)
    assert (fix["steps"], fix["tokens"], fix["cost_usd"]) == (4, 480, pytest.approx(0.04))
    assert (fix["inherited_steps"], fix["inherited_tokens"]) == (2, 240)
    assert fix["inherited_cost_usd"] == pytest.approx(0.02)
    assert (fix["own_steps"], fix["own_tokens"], fix["own_cost_usd"]) == (2, 240, 0.02)
    assert sum(r["own_cost_usd"] for r in rows.values()) == pytest.approx(0.05)
    assert sum(r["own_tokens"] for r in rows.values()) == 600


def test_the_cost_columns_are_to_the_nano_dollar(store: Store, clock: Clock) -> None:
    """A session's cost is a float sum over its calls (six of $0.01 are
    0.060000000000000005): the export writes every cost column to the nano-dollar, as the
    own and children columns were (found by an outside run: CSV rows read
    `cost_usd=0.07564700000000002`)."""
    now = clock()
    store.create(new_session("six", now=now), now=now)
    _fail_after(store, "six", range(1, 7), now=now)
    store.fork("six", new_id="six-fix", from_step=6, patch=ForkPatch(), by="bob", now=now)
    _fail_after(store, "six-fix", range(7, 8), now=now)

    rows = {r["session_id"]: r for r in dl.export_rows(store.engine)}
    assert repr(rows["six"]["cost_usd"]) == "0.06"
    assert repr(rows["six-fix"]["inherited_cost_usd"]) == "0.06"
    assert repr(rows["six-fix"]["cost_usd"]) == "0.07"


def test_a_retried_reply_billed_is_the_sessions_own_cost_not_its_childrens(
    store: Store, clock: Clock
) -> None:
    """An empty reply retried is billed (`machine.model_failed` with its usage): no step
    records it, but it is the session's own model call, not a child's."""
    now = clock()
    store.create(new_session("empty", now=now), now=now)
    run_step(store, "empty", 1, now=now)  # 120 tokens and $0.01
    for attempt in range(2):
        claimed = claim(store, "empty", now=now)
        retry = machine.model_failed(
            claimed.head,
            error="the model returned an empty reply",
            transient=attempt == 0,
            now=now,
            usage=Usage(prompt_tokens=900, completion_tokens=100),
            cost_usd=0.005,
        )
        store.save(retry, version=claimed.head.version, owner="worker-1", now=now)

    [row] = [r for r in dl.export_rows(store.engine) if r["session_id"] == "empty"]
    assert (row["tokens"], row["cost_usd"]) == (2_120, 0.02)
    assert (row["own_tokens"], row["own_cost_usd"]) == (2_120, 0.02)
    assert (row["children_tokens"], row["children_cost_usd"]) == (0, 0.0)


def test_a_tree_is_counted_once_in_the_own_columns(store: Store, clock: Clock) -> None:
    """A parent's `cost_usd` and `tokens` hold its children's trees, charged at their joins
    (docs/DESIGN.md section 16): with a parent and its child both dead letters, the child's
    cost was in both rows' `own_cost_usd`. It is in the child's own, and in the parent's
    `children_*` columns, with the cost of a child that completed (which has no row)."""
    ids = spawn(store, clock, "p", 2, mode=JoinMode.EACH)  # the parent's step 1
    finish(store, clock, ids[1])  # one step, and it completes
    take(store, clock, "p")  # its end charged to the parent
    _fail_after(store, ids[0], range(1, 3), now=clock())  # two steps, and it fails
    wait(store, clock, "p")  # the parent's step 2, and the failed child's end charged
    _fail_after(store, "p", range(0), now=clock())

    rows = {r["session_id"]: r for r in dl.export_rows(store.engine)}
    parent, child = rows["p"], rows[ids[0]]
    assert (parent["steps"], parent["tokens"], parent["cost_usd"]) == (
        2,
        600,
        pytest.approx(0.05),
    )
    assert (parent["own_steps"], parent["own_tokens"], parent["own_cost_usd"]) == (2, 240, 0.02)
    assert (parent["children_tokens"], parent["children_cost_usd"]) == (360, 0.03)
    assert (child["own_steps"], child["own_tokens"], child["own_cost_usd"]) == (2, 240, 0.02)
    assert (child["children_tokens"], child["children_cost_usd"]) == (0, 0.0)
    assert sum(r["own_cost_usd"] for r in rows.values()) == pytest.approx(0.04)
    for row in rows.values():
        parts = row["inherited_cost_usd"] + row["own_cost_usd"] + row["children_cost_usd"]
        assert parts == pytest.approx(row["cost_usd"])
        assert row["inherited_tokens"] + row["own_tokens"] + row["children_tokens"] == row["tokens"]


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


def test_the_export_lists_every_fork_of_the_session(
    store: Store, clock: Clock, failed: list[str]
) -> None:
    """QA4 #10: `forks` held only the forks the dead letter recorded, so a fork the dead
    letter did not (made before this release by `tickwork fork`) was left out, while `dlq
    show` listed it."""
    for new_id, resolve in (("d4-plain", False), ("d4-fix", True)):
        store.fork(
            "d4",
            new_id=new_id,
            from_step=0,
            patch=ForkPatch(),
            by="olga",
            now=clock.advance(1),
            resolve_dead_letter=resolve,
        )

    rows = {r["session_id"]: r for r in dl.export_rows(store.engine)}
    assert (rows["d4"]["status"], rows["d4"]["forks"]) == ("forked", ["d4-plain", "d4-fix"])
    assert rows["d5"]["forks"] == []
