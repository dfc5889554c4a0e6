"""The environments' rows on SQLite and Postgres: one build per key however many ask at
once, a build whose lease ran out taken over (and given up after MAX_ATTEMPTS), failures
seen by the sessions that waited for them, uses, removal and what retention may drop."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tickwork.fsm.errors import EnvironmentInUse
from tickwork.fsm.values import Status
from tickwork.store import Store
from tickwork.store.environments import MAX_ATTEMPTS, EnvStatus, Verdict

from tests.conftest import Clock
from tests.store.conftest import new_session, together

KEY = "a" * 64


def _claim(store: Store, clock: Clock, owner: str, asked_s: float = 0.0) -> tuple[Verdict, int]:
    verdict, row = store.environments.claim(
        KEY,
        owner=owner,
        now=clock(),
        lease_s=30.0,
        asked_at=clock.now - timedelta(seconds=asked_s),
        detail={"setup": "auto"},
    )
    return verdict, row.attempts


def test_ten_at_once_one_builds_the_others_wait(store: Store, clock: Clock) -> None:
    results = together([lambda i=i: _claim(store, clock, f"w{i}") for i in range(10)])
    verdicts = sorted(r[0].value for r in results if not isinstance(r, BaseException))
    assert verdicts == ["build"] + ["wait"] * 9, results
    found = store.environments.get(KEY)
    assert found is not None and found.status is EnvStatus.BUILDING and found.attempts == 1


def test_a_ready_build_is_used_and_only_its_owner_finishes_it(store: Store, clock: Clock) -> None:
    assert _claim(store, clock, "w1")[0] is Verdict.BUILD
    assert not store.environments.finish(KEY, owner="w2", now=clock(), ok=True, log="")
    assert store.environments.renew(KEY, owner="w1", now=clock(), lease_s=30)
    assert store.environments.finish(
        KEY, owner="w1", now=clock(), ok=True, log="built", size=10, chunks=("c1", "c2")
    )
    clock.advance(5)
    verdict, _ = _claim(store, clock, "w3")
    found = store.environments.get(KEY)
    assert verdict is Verdict.READY and found is not None
    assert (found.chunks, found.size, found.used_at) == (("c1", "c2"), 10, clock())


def test_an_expired_build_is_taken_over_once_then_given_up(store: Store, clock: Clock) -> None:
    assert _claim(store, clock, "dead") == (Verdict.BUILD, 1)
    clock.advance(10)
    assert _claim(store, clock, "other")[0] is Verdict.WAIT  # the lease still holds
    clock.advance(25)
    together_ = together([lambda i=i: _claim(store, clock, f"t{i}") for i in range(5)])
    assert sorted(str(r[0]) for r in together_ if not isinstance(r, BaseException)) == [
        "build",
        "wait",
        "wait",
        "wait",
        "wait",
    ]
    found = store.environments.get(KEY)
    assert found is not None and found.attempts == 2 and found.owner in {f"t{i}" for i in range(5)}
    # the first builder, come back, cannot finish what is no longer its build
    assert not store.environments.finish(KEY, owner="dead", now=clock(), ok=True, log="")
    for attempt in range(3, MAX_ATTEMPTS + 1):
        clock.advance(31)
        assert _claim(store, clock, f"again{attempt}") == (Verdict.BUILD, attempt)
    clock.advance(31)
    verdict, _ = _claim(store, clock, "last")
    found = store.environments.get(KEY)
    assert verdict is Verdict.FAILED and found is not None
    assert "interrupted 3 times" in found.log


def test_a_failure_fails_those_who_waited_and_is_retried_by_later_ones(
    store: Store, clock: Clock
) -> None:
    assert _claim(store, clock, "w1")[0] is Verdict.BUILD
    clock.advance(1)
    store.environments.finish(KEY, owner="w1", now=clock(), ok=False, log="exit code: 1")
    clock.advance(1)
    assert _claim(store, clock, "waiter", asked_s=5)[0] is Verdict.FAILED
    clock.advance(1)
    assert _claim(store, clock, "later", asked_s=0) == (Verdict.BUILD, 1)


def test_uses_removal_and_what_retention_drops(store: Store, clock: Clock) -> None:
    store.create(new_session("live", now=clock()), now=clock())
    store.create(new_session("done", now=clock(), status=Status.COMPLETED), now=clock())
    _claim(store, clock, "w1")
    store.environments.finish(KEY, owner="w1", now=clock(), ok=True, log="", chunks=("c",))
    for sid in ("live", "done", "live"):
        store.environments.use(KEY, sid, now=clock())
    found = store.environments.get(KEY)
    assert found is not None and (found.sessions, found.live_sessions) == (2, 1)
    clock.advance(3600)
    assert store.environments.unused(before=clock()) == []
    with pytest.raises(EnvironmentInUse, match="1 live session"):
        store.environments.delete(KEY)
    removed = store.environments.delete(KEY, force=True)
    assert removed is not None and removed.chunks == ("c",)
    assert store.environments.get(KEY) is None and store.environments.find() == []


def test_retention_drops_an_unused_one_after_the_period(store: Store, clock: Clock) -> None:
    store.create(new_session("done", now=clock(), status=Status.COMPLETED), now=clock())
    _claim(store, clock, "w1")
    store.environments.finish(KEY, owner="w1", now=clock(), ok=True, log="")
    store.environments.use(KEY, "done", now=clock())
    assert store.environments.unused(before=clock() - timedelta(seconds=1)) == []
    clock.advance(10)
    assert [e.key for e in store.environments.unused(before=clock())] == [KEY]


def test_a_spoiled_environment_is_built_again_by_the_next_session(
    store: Store, clock: Clock
) -> None:
    assert _claim(store, clock, "w1")[0] is Verdict.BUILD
    assert store.environments.finish(KEY, owner="w1", now=clock(), ok=True, log="", chunks=("c",))
    clock.advance(5)
    assert store.environments.spoil(KEY, why="stored copy corrupt: c", now=clock())
    assert not store.environments.spoil(KEY, why="again", now=clock())  # only a ready one
    found = store.environments.get(KEY)
    assert found is not None and found.status is EnvStatus.FAILED and "corrupt" in found.log
    clock.advance(5)
    # a session that asks after the spoiling builds it again, not fails on the old build
    assert _claim(store, clock, "w2")[0] is Verdict.BUILD
