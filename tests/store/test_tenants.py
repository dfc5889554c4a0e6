"""Tenants in the store: a session's tenant is stored and read back, its forks stay in it,
listings and dead letters (list, stats, export, timeline) filter by it, and what was stored
before tenants is the default tenant's."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from tickwork.fsm import machine
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import ErrorCode, Session
from tickwork.store import Store
from tickwork.store import dead_letters as dl
from tickwork.store.dead_letter_counts import GROUPS
from tickwork.store.schema import dead_letters

from tests.conftest import Clock
from tests.store.conftest import claim, new_session


def create(store: Store, clock: Clock, session_id: str, tenant: str, by: str = "") -> None:
    session = new_session(session_id, now=clock())
    head = session.head.model_copy(update={"tenant": tenant, "submitted_by": by})
    store.create(Session(head=head), now=clock())


def fail(store: Store, clock: Clock, session_id: str, tenant: str, code: ErrorCode) -> None:
    create(store, clock, session_id, tenant, by=f"{tenant}-sam")
    claimed = claim(store, session_id, now=clock())
    change = machine.fail(claimed.head, code, f"{code.value} in {session_id}", now=clock())
    store.save(change, version=claimed.head.version, owner="worker-1", now=clock())
    clock.advance(60)


def test_the_tenant_is_stored_and_listings_filter_by_it(store: Store, clock: Clock) -> None:
    create(store, clock, "a1", "team-a", by="ann")
    clock.advance(1)
    create(store, clock, "b1", "team-b", by="bob")
    clock.advance(1)
    create(store, clock, "a2", "team-a", by="amy")
    clock.advance(1)
    create(store, clock, "d1", "default")

    assert store.get("b1").tenant == "team-b" and store.load("a1").head.tenant == "team-a"
    ids = lambda **f: [h.id for h in store.list_sessions(**f)]  # noqa: E731
    assert ids(tenant="team-a") == ["a2", "a1"]
    assert ids(tenant="team-b") == ["b1"]
    assert ids(tenant="team-c") == []
    assert ids(tenant="team-a", submitted_by="ann") == ["a1"]
    assert ids() == ["d1", "a2", "b1", "a1"]  # no tenant given: every tenant's

    fork = store.fork(
        "b1", new_id="b1-fork", from_step=0, patch=ForkPatch(), by="carol", now=clock()
    )
    assert fork.tenant == "team-b" and store.get("b1-fork").tenant == "team-b"


def test_dead_letters_are_read_per_tenant(store: Store, clock: Clock) -> None:
    plan = [
        ("a1", "team-a", ErrorCode.LOOP),
        ("b1", "team-b", ErrorCode.LOOP),
        ("a2", "team-a", ErrorCode.DEADLINE),
        ("b2", "team-b", ErrorCode.LOOP),
        ("b3", "team-b", ErrorCode.MODEL_ERROR),
    ]
    start = clock()
    for session_id, tenant, code in plan:
        fail(store, clock, session_id, tenant, code)

    letters = store.dead_letters(tenant="team-a")
    assert [d.session_id for d in letters] == ["a2", "a1"]
    assert {d.tenant for d in letters} == {"team-a"} and letters[0].submitted_by == "team-a-sam"
    assert store.dead_letters(tenant="team-a", submitted_by="someone-else") == []
    assert len(store.dead_letters()) == len(plan)
    assert store.dead_letter("b2").tenant == "team-b"

    for tenant in ("team-a", "team-b"):
        for by in GROUPS:
            column = dead_letters.c[by]
            query = (
                select(column, func.count()).where(dead_letters.c.tenant == tenant).group_by(column)
            )
            with store.engine.connect() as conn:
                expected = {v: n for v, n in conn.execute(query)}
            for since in (None, start + timedelta(seconds=90)):
                found = store.dead_letter_stats(by=by, tenant=tenant, since=since)
                if since is None:
                    assert {g["value"]: g["count"] for g in found} == expected, (tenant, by)
                else:
                    assert sum(g["count"] for g in found) < sum(expected.values())
    every = store.dead_letter_stats(by="code")
    assert {g["value"]: g["count"] for g in every} == {"LOOP": 3, "DEADLINE": 1, "MODEL_ERROR": 1}

    rows = list(store.dead_letter_rows(tenant="team-b"))
    assert [r["session_id"] for r in rows] == ["b1", "b2", "b3"]
    assert {r["tenant"] for r in rows} == {"team-b"}
    timeline = store.dead_letter_timeline(since=start, now=clock(), tenant="team-a")
    assert timeline["total"] == 2
    assert store.dead_letter_timeline(since=start, now=clock())["total"] == len(plan)

    dl.close(store.engine, "b3", state=dl.Closing.DISMISSED, by="x", reason="t", now=clock())
    assert [d.session_id for d in store.dead_letters(tenant="team-b", unresolved=True)] == [
        "b2",
        "b1",
    ]
