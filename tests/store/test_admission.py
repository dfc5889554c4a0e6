"""tickwork.store.admission: queued at submit, admitted by the relay, on every backend."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from sqlalchemy import Engine, func, select, update
from tickwork.fsm.admission import Admission, TenantLimit
from tickwork.fsm.values import IN_FLIGHT, EventKind, Head, Session, Status
from tickwork.store import Store
from tickwork.store.relay import Due
from tickwork.store.schema import events, outbox, sessions

from tests.conftest import Clock
from tests.store.conftest import new_session, table_rows, together

_ids = itertools.count()


def submit(
    store: Store,
    clock: Clock,
    tenant: str = "a",
    *,
    limit: TenantLimit | None = None,
    priority: int = 0,
    key: str | None = None,
    per_key: int | None = None,
    name: str | None = None,
) -> Head:
    clock.advance(1)  # each one younger than the one before
    base = new_session(name or f"s{next(_ids)}", now=clock())
    head = base.head.model_copy(
        update={
            "tenant": tenant,
            "priority": priority,
            "concurrency_key": key,
            "max_per_key": per_key if key is None else per_key or 1,
        }
    )
    return store.create(Session(head=head), now=clock(), limit=limit or TenantLimit())


def finish(engine: Engine, *session_ids: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            update(sessions)
            .where(sessions.c.id.in_(session_ids))
            .values(status=Status.COMPLETED.value)
        )


def in_flight(engine: Engine, tenant: str, key: str | None = None) -> int:
    query = select(func.count()).where(
        sessions.c.tenant == tenant, sessions.c.status.in_([s.value for s in IN_FLIGHT])
    )
    if key is not None:
        query = query.where(sessions.c.concurrency_key == key)
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def status(store: Store, *heads: Head) -> list[str]:
    return [store.get(h.id).status.value for h in heads]


def ticks(engine: Engine) -> set[tuple[str, int]]:
    return {(r["session_id"], r["version"]) for r in table_rows(engine, outbox)}


LIMIT_2 = TenantLimit(max_in_flight=2)


def test_beyond_the_in_flight_limit_a_session_is_queued_with_no_tick(
    store: Store, clock: Clock
) -> None:
    first, second, third = (submit(store, clock, limit=LIMIT_2) for _ in range(3))
    other = submit(store, clock, "b", limit=LIMIT_2)

    assert [first.status, second.status, third.status] == [
        Status.READY,
        Status.READY,
        Status.QUEUED,
    ]
    assert other.status is Status.READY  # another tenant's limit is its own
    assert ticks(store.engine) == {(first.id, 0), (second.id, 0), (other.id, 0)}
    assert status(store, third) == ["queued"]


def test_waiting_for_a_person_holds_a_slot(store: Store, clock: Clock) -> None:
    waiting = submit(store, clock, limit=LIMIT_2)
    with store.engine.begin() as conn:
        conn.execute(
            update(sessions)
            .where(sessions.c.id == waiting.id)
            .values(status=Status.WAITING_APPROVAL.value)
        )
    submit(store, clock, limit=LIMIT_2)
    assert submit(store, clock, limit=LIMIT_2).status is Status.QUEUED


def test_the_relay_admits_when_a_slot_frees_with_its_tick_and_event(
    store: Store, clock: Clock
) -> None:
    policy = Admission(default=LIMIT_2)
    first, _, third, fourth = (submit(store, clock, limit=LIMIT_2) for _ in range(4))

    assert store.admit(policy, now=clock()) == []
    finish(store.engine, first.id)
    assert store.admit(policy, now=clock()) == [Due(third.id, 1)]

    head = store.get(third.id)
    assert (head.status, head.version) == (Status.READY, 1)
    assert (third.id, 1) in ticks(store.engine)
    kinds = [e.kind for _, e in store.events_after(third.id)]
    assert kinds[-1] is EventKind.ADMITTED
    assert status(store, fourth) == ["queued"]
    assert store.admit(policy, now=clock()) == []
    assert in_flight(store.engine, "a") == 2


def test_a_new_submit_does_not_jump_the_queue(store: Store, clock: Clock) -> None:
    first, _, queued = (submit(store, clock, limit=LIMIT_2) for _ in range(3))
    finish(store.engine, first.id)
    # a slot is free, but an older session waits for it: the new one queues behind
    assert submit(store, clock, limit=LIMIT_2).status is Status.QUEUED
    # one of higher priority goes ahead
    assert submit(store, clock, limit=LIMIT_2, priority=5).status is Status.READY
    assert status(store, queued) == ["queued"]


def test_admission_goes_by_priority_then_age(store: Store, clock: Clock) -> None:
    one = TenantLimit(max_in_flight=1)
    running = submit(store, clock, limit=one)
    low = submit(store, clock, limit=one, priority=-5)
    old = submit(store, clock, limit=one)
    young = submit(store, clock, limit=one)
    high = submit(store, clock, limit=one, priority=9)
    order = []
    current = running
    for _ in range(4):
        finish(store.engine, current.id)
        (admitted,) = store.admit(Admission(default=one), now=clock())
        order.append(admitted.session_id)
        current = store.get(admitted.session_id)
    assert order == [high.id, old.id, young.id, low.id]


def test_a_pass_goes_to_the_least_busy_tenant_for_its_weight_first(
    store: Store, clock: Clock
) -> None:
    policy = Admission(
        tenants={"a": TenantLimit(max_in_flight=10), "b": TenantLimit(max_in_flight=10)}
    )
    one = TenantLimit(max_in_flight=1)
    for _ in range(4):  # a: 4 in flight
        submit(store, clock, "a")
    a_queued = [submit(store, clock, "a", limit=one) for _ in range(5)]
    b_running = submit(store, clock, "b")
    b_queued = [submit(store, clock, "b", limit=one) for _ in range(3)]
    finish(store.engine, b_running.id)
    assert {h.status for h in (*a_queued, *b_queued)} == {Status.QUEUED}

    admitted = [t.session_id for t in store.admit(policy, now=clock(), budget=5)]
    # b (nothing in flight) gets its three before a's turn comes; each in age order
    assert admitted == [
        b_queued[0].id,
        b_queued[1].id,
        b_queued[2].id,
        a_queued[0].id,
        a_queued[1].id,
    ]


def test_weights_share_a_pass(store: Store, clock: Clock) -> None:
    policy = Admission(tenants={"b": TenantLimit(weight=3.0)})
    blocked = TenantLimit(max_in_flight=0)
    for tenant in ("a", "b"):
        for _ in range(12):
            submit(store, clock, tenant, limit=blocked)
    admitted = store.admit(policy, now=clock(), budget=8)
    by_tenant = Counter(store.get(t.session_id).tenant for t in admitted)
    assert by_tenant == {"a": 2, "b": 6}


def test_a_concurrency_key_lets_one_in_at_a_time_without_blocking_others(
    store: Store, clock: Clock
) -> None:
    policy = Admission()
    repo = "github.com/org/repo"
    first = submit(store, clock, key=repo)
    second = submit(store, clock, key=repo)
    free = submit(store, clock, key="github.com/org/other")
    assert [first.status, second.status, free.status] == [
        Status.READY,
        Status.QUEUED,
        Status.READY,
    ]
    # the same key in another tenant is another key
    assert submit(store, clock, "b", key=repo).status is Status.READY
    assert store.admit(policy, now=clock()) == []
    finish(store.engine, first.id)
    assert store.admit(policy, now=clock()) == [Due(second.id, 1)]
    assert in_flight(store.engine, "a", repo) == 1


def test_a_full_key_does_not_hold_up_the_sessions_behind_it(store: Store, clock: Clock) -> None:
    policy = Admission(default=TenantLimit(max_in_flight=3))
    blocked = TenantLimit(max_in_flight=0)
    keyed = [submit(store, clock, limit=blocked, priority=5, key="k", per_key=2) for _ in range(40)]
    plain = submit(store, clock, limit=blocked)
    admitted = {t.session_id for t in store.admit(policy, now=clock())}
    assert admitted == {keyed[0].id, keyed[1].id, plain.id}
    assert in_flight(store.engine, "a", "k") == 2


def test_cancelling_a_queued_session_cancels_it_at_once(store: Store, clock: Clock) -> None:
    policy = Admission(default=LIMIT_2)
    first, _, queued = (submit(store, clock, limit=LIMIT_2) for _ in range(3))
    head = store.request_cancel(queued.id, now=clock(), by="ann")
    assert head.status is Status.CANCELLED
    assert all(sid != queued.id for sid, _ in ticks(store.engine))
    finish(store.engine, first.id)
    assert store.admit(policy, now=clock()) == []


def test_concurrent_submits_never_pass_the_limit(store: Store, clock: Clock) -> None:
    limit = TenantLimit(max_in_flight=3)
    now = clock()

    def one(i: int) -> Head:
        head = new_session(f"race-{i}", now=now).head.model_copy(update={"tenant": "a"})
        return store.create(Session(head=head), now=now, limit=limit)

    results = together(lambda i=i: one(i) for i in range(16))
    heads = [r for r in results if isinstance(r, Head)]
    assert len(heads) == 16, [r for r in results if not isinstance(r, Head)]
    assert Counter(h.status for h in heads) == {Status.READY: 3, Status.QUEUED: 13}
    assert in_flight(store.engine, "a") == 3


def test_concurrent_passes_never_pass_the_limit(store: Store, clock: Clock) -> None:
    policy = Admission(default=TenantLimit(max_in_flight=5))
    blocked = TenantLimit(max_in_flight=0)
    queued = [submit(store, clock, limit=blocked) for _ in range(30)]
    now = clock()
    passes: list[Any] = together(lambda: store.admit(policy, now=now) for _ in range(6))
    admitted = [t for p in passes if isinstance(p, list) for t in p]
    assert all(isinstance(p, list) for p in passes), passes
    assert len(admitted) == len({t.session_id for t in admitted}) == 5
    assert in_flight(store.engine, "a") == 5
    assert {t.session_id for t in admitted} == {h.id for h in queued[:5]}
    with store.engine.connect() as conn:
        kinds = conn.execute(
            select(func.count()).where(events.c.kind == EventKind.ADMITTED.value)
        ).scalar_one()
    assert kinds == 5
