"""A worker's sign of life (worker/tick/liveness.py) on a real database: a sign whose
connection Postgres ends is given up with every lease held under it, then taken again; the
relay's look takes a gone sign's sessions over only after its grace."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import threading
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text
from tickwork.store import Store
from tickwork.store.liveness import Sign, absent, new_key, signs_for
from tickwork.store.owners import signed
from tickwork.worker.config.process import owner_name
from tickwork.worker.config.settings import Settings
from tickwork.worker.tick.app import make_app, runtime
from tickwork.worker.tick.liveness import Liveness, Takeover
from tickwork.worker.tick.relay import counted
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
        leases.close()  # its renewal thread, which would go on with the store closed
    # its backend ends (and lets the lock go) a moment after the connection is closed
    until(lambda: _backend(store, liveness.key) is None, timeout=30, what="the sign given up")


def test_a_gone_sign_is_taken_over_after_its_grace_only(store: Store) -> None:
    published: list[tuple[str, int]] = []
    liveness = Liveness(store, every_s=60, lose_all=lambda _: None)
    liveness.start()
    store.create(new_session("s1", now=_now()), now=_now())
    claim(store, "s1", now=_now(), owner=liveness.owner("w"))
    look = Takeover(store, lambda s, v: published.append((s, v)), grace_s=3600, clock=_now)
    at_once = counted(Takeover(store, lambda s, v: published.append((s, v)), grace_s=0, clock=_now))
    assert look() == [] and at_once() == []  # alive
    liveness.stop()
    assert look() == [] and published == [], "gone, but not yet for its grace"
    # a relay whose process cannot publish takes nothing over: the others' relays do
    cut = Takeover(
        store, lambda s, v: published.append((s, v)), grace_s=0, clock=_now, paused=lambda: True
    )
    until(store.absent_signs, timeout=30, what="the sign seen gone")
    assert cut() == [] and published == []
    assert store.lease("s1") is not None
    # (on Postgres the lock goes with its backend, a moment after the connection closes)
    before = REGISTRY.get_sample_value("tickwork_relay_taken_over_total") or 0.0
    taken = until(at_once, timeout=30, what="the session taken over")
    assert [(t.session_id, t.version) for t in taken] == [("s1", 0)] == published
    assert store.lease("s1") is None
    # counted, as revived leases are: the alert on dying workers sees it
    assert REGISTRY.get_sample_value("tickwork_relay_taken_over_total") == before + 1


def test_leases_given_up_with_a_lost_sign_are_still_renewed_while_they_are_ours(
    store: Store,
) -> None:
    clock = {"now": _now()}
    leases = Leases(store, lease_s=LEASE_S, clock=lambda: clock["now"])
    for session_id in ("kept", "taken"):
        store.create(new_session(session_id, now=_now()), now=_now())
        claim(store, session_id, now=_now(), owner="w@1")
    try:
        with leases.hold("kept", 0, "w@1"), leases.hold("taken", 0, "w@1"):
            leases.lose_all("this worker's sign of life is lost (test)")
            assert leases.lost("kept", 0) == leases.lost("taken", 0)
            # another worker took "taken" over meanwhile; "kept" was left alone
            with store.engine.begin() as conn:
                conn.execute(
                    text("UPDATE tickwork_sessions SET lease_owner = 'w2' WHERE id = 'taken'")
                )
            before = store.lease("kept")
            clock["now"] += timedelta(seconds=10)
            leases.renew_all()
            kept = store.lease("kept")
            assert before is not None and kept is not None
            assert kept[1] - before[1] >= timedelta(seconds=9), "not renewed"
            assert "sign of life is lost" in (leases.lost("kept", 0) or "")
            assert "no longer this worker's" in (leases.lost("taken", 0) or "")
    finally:
        leases.close()  # its renewal thread, which would go on with the store closed


@contextlib.contextmanager
def _held_elsewhere(store: Store, key: int) -> Iterator[None]:
    """Sign `key` held, while inside, by another connection (Postgres) or open file
    (SQLite): a Liveness cannot take it until the end."""
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
        return
    folder = Path(f"{store.engine.url.database}.live")
    folder.mkdir(exist_ok=True)
    fd = os.open(folder / str(key), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _sign_lost_and_held_elsewhere(store: Store, key: int) -> Iterator[None]:
    """Sign `key` taken from its holder (Postgres: its backend terminated; SQLite: its file
    removed, by hand or by a cleaner of old files), then `_held_elsewhere`."""
    if store.engine.dialect.name == "postgresql":
        with store.engine.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": _backend(store, key)})
        until(lambda: _backend(store, key) is None, timeout=30, what="the sign let go")
    else:
        (Path(f"{store.engine.url.database}.live") / str(key)).unlink()
    with _held_elsewhere(store, key):
        yield


def test_while_the_sign_is_lost_leases_are_unsigned_and_it_is_taken_again(store: Store) -> None:
    lost: list[str] = []
    liveness = Liveness(store, every_s=3600, lose_all=lost.append)  # looks by hand below
    liveness.start()
    try:
        assert liveness.owner("w") == signed("w", liveness.key)
        with _sign_lost_and_held_elsewhere(store, liveness.key):
            liveness._check()
            assert lost and "sign of life is lost" in lost[0]
            # a relay may take over any lease under the lost sign while this worker runs
            # the session: a lease taken now ends by expiry only
            assert liveness.owner("w") == "w"
            liveness._check()  # cannot take it again yet
            assert liveness.owner("w") == "w"
        liveness._check()  # takes it again (on SQLite too, after its file was removed)
        assert liveness.owner("w") == signed("w", liveness.key)
        store.create(new_session("s1", now=_now()), now=_now())
        claim(store, "s1", now=_now(), owner=liveness.owner("w"))
        assert liveness.key not in store.absent_signs(), "held again, yet seen gone"
        lost.clear()
        liveness._check()
        assert lost == [], "held again, yet lost"
    finally:
        liveness.stop()


def test_the_relays_look_sees_a_gone_sign_behind_many_leases_of_live_ones(store: Store) -> None:
    signs = signs_for(store.engine)
    assert signs is not None
    live, dead = signs.hold(new_key()), new_key()  # `dead`: never held, so gone
    try:
        start = _now()
        for n in range(4):  # live leases first, renewed later than the dead one's
            store.create(new_session(f"live{n}", now=start), now=start)
            claim(store, f"live{n}", now=start + timedelta(seconds=5), owner=signed("w", live.key))
        store.create(new_session("dead", now=start), now=start)
        claim(store, "dead", now=start, owner=signed("w", dead))
        assert absent(store.engine, signs, limit=1) == {dead}
        assert absent(store.engine, signs, limit=2) == {dead}
    finally:
        live.release()


def test_a_sign_not_taken_at_the_start_is_taken_later_and_then_signs(store: Store) -> None:
    liveness = Liveness(store, every_s=3600, lose_all=lambda _: None)  # looks by hand below
    try:
        with _held_elsewhere(store, liveness.key):
            liveness.start()
            assert liveness.owner("w") == "w"
            liveness._check()
            assert liveness.owner("w") == "w"
        liveness._check()
        assert liveness.owner("w") == signed("w", liveness.key)
    finally:
        liveness.stop()


class _SlowSigns:
    """The store's signs, but taking one waits until `go` is set (a database slow to answer
    a tick's first lease), and remembers what it took."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.asked, self.go = threading.Event(), threading.Event()
        self.taken: list[Sign] = []

    def hold_sign(self, key: int) -> Sign | None:
        self.asked.set()
        assert self.go.wait(30)
        sign = self._store.hold_sign(key)
        if sign is not None:
            self.taken.append(sign)
        return sign


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_sign_taken_while_the_worker_stops_is_given_up_not_left_open(store: Store) -> None:
    # a tick's first lease takes the sign (`owner`) while the worker shuts down: the sign's
    # connection must not outlive the worker's stop, holding its lock
    signs = _SlowSigns(store)
    liveness = Liveness(signs, every_s=3600, lose_all=lambda _: None, enabled=True)  # type: ignore[arg-type]
    owners: list[str] = []
    tick = threading.Thread(target=lambda: owners.append(liveness.owner("w")))
    tick.start()
    assert signs.asked.wait(30)
    stopping = threading.Thread(target=liveness.stop)
    stopping.start()
    until(lambda: liveness._loop.stopped.is_set(), timeout=30, what="the stop to begin")
    signs.go.set()
    tick.join(30)
    stopping.join(30)
    assert not tick.is_alive() and not stopping.is_alive()
    [sign] = signs.taken
    # its backend ends (and lets the lock go) a moment after the connection is closed
    until(lambda: _backend(store, liveness.key) is None, timeout=30, what="the sign given up")
    assert sign._conn is None  # type: ignore[attr-defined]


def test_a_closed_runtime_gives_its_sign_up(
    database_url: str, store: Store, tmp_path: Path
) -> None:
    # a worker's runtime, as `runtime(app)` builds it, takes its sign at its first lease;
    # before, only a worker's shutdown gave it up: a runtime a test or a script built and
    # closed kept it, and its connection was left open to the garbage collector
    with make_app(Settings(database_url=database_url, state_dir=tmp_path), relay=False) as app:
        rt = runtime(app)
        assert rt.owner() == signed(owner_name(), rt.liveness.key)
        rt.close()
        again = store.hold_sign(rt.liveness.key)  # another holder can take it: it was let go
        assert again is not None
        again.release()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_closed_runtime_used_again_signs_its_leases_again(
    database_url: str, store: Store, tmp_path: Path
) -> None:
    # before, a closed runtime's sign of life was never taken again: a worker started again
    # on the same app (or a runtime closed by a test and used on) leased unsigned, and its
    # sessions waited out their lease when it was killed instead of being taken over
    def watches() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "tickwork-liveness"}

    with make_app(Settings(database_url=database_url, state_dir=tmp_path), relay=False) as app:
        rt = runtime(app)
        key = rt.liveness.key
        others = watches()  # earlier tests' runtimes in this process
        assert rt.owner() == signed(owner_name(), key)
        first = watches() - others
        rt.close()
        until(lambda: _backend(store, key) is None, timeout=30, what="the sign given up")
        # its watch may take a moment past the close's wait on a busy machine
        until(lambda: not any(t.is_alive() for t in first), timeout=30, what="the watch ended")

        assert rt.owner() == signed(owner_name(), key), "a lease after the close is unsigned"
        assert _backend(store, key) is not None, "the sign it names is not held"
        watching = list(watches() - others - first)
        assert [t.is_alive() for t in watching] == [True], "one new watch of the sign"

        rt.close()
        until(lambda: _backend(store, key) is None, timeout=30, what="the sign given up again")
        until(lambda: not watching[0].is_alive(), timeout=30, what="the new watch ended")


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_sign_dropped_without_its_release_closes_its_connection(store: Store) -> None:
    sign = store.hold_sign(new_key())
    assert sign is not None
    key = sign.key
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del sign
        gc.collect()
    # before, the connection was left open to the garbage collector: psycopg warned
    assert [str(w.message) for w in caught] == []
    until(lambda: _backend(store, key) is None, timeout=30, what="the sign given up")


def test_a_released_sign_is_not_taken_again_by_a_late_check(store: Store) -> None:
    # the liveness thread's check, stalled past the worker's stop, came after the release:
    # it took the sign again, on a connection nobody would close, and kept it
    sign = store.hold_sign(new_key())
    assert sign is not None
    sign.release()
    sign.check()
    again = store.hold_sign(sign.key)  # another holder can take it
    assert again is not None
    again.release()
