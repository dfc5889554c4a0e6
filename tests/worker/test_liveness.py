"""A worker's sign of life (worker/tick/liveness.py) on a real database: a sign whose
connection Postgres ends is given up with every lease held under it, then taken again; the
relay's look takes a gone sign's sessions over only after its grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from tickwork.store import Store
from tickwork.store.liveness import signed
from tickwork.worker.tick.liveness import Liveness, Takeover
from tickwork.worker.tick.runtime import Leases

from tickwork.testing import until
from tickwork.testing.store_ticks import LEASE_S, claim, new_session


def _now() -> datetime:
    return datetime.now(UTC)


def _backend(store: Store, key: int) -> int | None:
    """The Postgres backend holding sign `key`, or None."""
    with store.engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
                "AND granted AND (classid::bigint << 32) | objid::bigint = :key"
            ),
            {"key": key},
        ).scalar()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_sign_whose_connection_ends_loses_its_leases_and_is_taken_again(store: Store) -> None:
    leases = Leases(store, lease_s=LEASE_S, clock=_now)
    liveness = Liveness(store, every_s=0.05, lose_all=leases.lose_all)
    liveness.start()
    try:
        first = _backend(store, liveness.key)
        assert first is not None
        assert liveness.owner("w") == signed("w", liveness.key)
        with leases.hold("s1", 0, liveness.owner("w")):
            assert leases.lost("s1", 0) is None
            with store.engine.connect() as conn:
                conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
            reason = until(lambda: leases.lost("s1", 0), timeout=30, what="the lease given up")
            assert "sign of life is lost" in reason
        again = until(lambda: _backend(store, liveness.key), timeout=30, what="the sign again")
        assert again != first
    finally:
        liveness.stop()
    # its backend ends (and lets the lock go) a moment after the connection is closed
    until(lambda: _backend(store, liveness.key) is None, timeout=30, what="the sign given up")


def test_a_gone_sign_is_taken_over_after_its_grace_only(store: Store) -> None:
    published: list[tuple[str, int]] = []
    liveness = Liveness(store, every_s=60, lose_all=lambda _: None)
    liveness.start()
    store.create(new_session("s1", now=_now()), now=_now())
    claim(store, "s1", now=_now(), owner=liveness.owner("w"))
    look = Takeover(store, lambda s, v: published.append((s, v)), grace_s=3600, clock=_now)
    at_once = Takeover(store, lambda s, v: published.append((s, v)), grace_s=0, clock=_now)
    assert look() == [] and at_once() == []  # alive
    liveness.stop()
    assert look() == [] and published == [], "gone, but not yet for its grace"
    # (on Postgres the lock goes with its backend, a moment after the connection closes)
    taken = until(at_once, timeout=30, what="the session taken over")
    assert [(t.session_id, t.version) for t in taken] == [("s1", 0)] == published
    assert store.lease("s1") is None


def test_leases_given_up_with_a_lost_sign_are_still_renewed_while_they_are_ours(
    store: Store,
) -> None:
    clock = {"now": _now()}
    leases = Leases(store, lease_s=LEASE_S, clock=lambda: clock["now"])
    for session_id in ("kept", "taken"):
        store.create(new_session(session_id, now=_now()), now=_now())
        claim(store, session_id, now=_now(), owner="w@1")
    with leases.hold("kept", 0, "w@1"), leases.hold("taken", 0, "w@1"):
        leases.lose_all("this worker's sign of life is lost (test)")
        assert leases.lost("kept", 0) == leases.lost("taken", 0)
        # another worker took "taken" over meanwhile; "kept" was left alone
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE tickwork_sessions SET lease_owner = 'w2' WHERE id = 'taken'"))
        before = store.lease("kept")
        clock["now"] += timedelta(seconds=10)
        leases.renew_all()
        kept = store.lease("kept")
        assert before is not None and kept is not None
        assert kept[1] - before[1] >= timedelta(seconds=9), "not renewed"
        assert "sign of life is lost" in (leases.lost("kept", 0) or "")
        assert "no longer this worker's" in (leases.lost("taken", 0) or "")
