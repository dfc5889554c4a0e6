"""The `DeadLetterQueue` sub-port: a failed session's dead letter."""

from __future__ import annotations

import pytest

from tickwork.fsm import machine
from tickwork.fsm.errors import DeadLetterClosed
from tickwork.fsm.values import (
    ErrorCode,
    Head,
)
from tickwork.store.dead_letters import Closing, DeadLetterNotFound
from tickwork.store.port import Store
from tickwork.testing.store_contract.base import Contract
from tickwork.testing.store_ticks import (
    Clock,
    claim,
    new_session,
    run_step,
)


class DeadLetterContract(Contract):
    """A failed session's dead letter: found by id or session, listed, closed once (the
    `DeadLetterQueue` sub-port)."""

    def _fail(self, store: Store, clock: Clock, session_id: str) -> Head:
        claimed = claim(store, session_id, now=clock())
        change = machine.fail(claimed.head, ErrorCode.INTERNAL, "boom at step 1", now=clock())
        return store.save(change, version=claimed.head.version, owner="worker-1", now=clock())

    def test_a_failed_save_writes_the_dead_letter_with_its_snapshot(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        head = self._fail(store, clock, session_id)

        dead = store.dead_letter(session_id)
        assert dead.session_id == session_id and dead.code == ErrorCode.INTERNAL.value
        assert "boom" in dead.message and dead.resolved_at is None
        assert store.dead_letter(dead.id) == dead
        assert store.dead_letters(with_snapshot=True)[0].session().head == head
        assert [d.session_id for d in store.dead_letters(unresolved=True)] == [session_id]

    def test_a_session_id_filter_lists_that_sessions_letter_whatever_its_id_looks_like(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        first = self._fail(store, clock, session_id)
        number = store.dead_letter(session_id).id
        # a session whose id is another letter's number: by key, that number names the other
        store.create(new_session(str(number), now=clock()), now=clock())
        self._fail(store, clock, str(number))

        (own,) = store.dead_letters(session_id=str(number))
        assert own.session_id == str(number) and own.id != number
        assert [d.session_id for d in store.dead_letters(session_id=first.id)] == [first.id]
        assert store.dead_letters(session_id="nope") == []

    def test_a_session_that_did_not_fail_has_none(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        with pytest.raises(DeadLetterNotFound):
            store.dead_letter(session_id)
        with pytest.raises(DeadLetterNotFound):
            store.dead_letter("nope")
        assert store.dead_letters() == []

    def test_a_dead_letter_is_closed_once(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        self._fail(store, clock, session_id)

        closed = store.close_dead_letter(
            session_id, state=Closing.DISMISSED, by="alice", reason="flaky", now=clock()
        )

        assert closed.resolved_at == clock()
        assert closed.resolution is not None and closed.resolution["state"] == "dismissed"
        assert store.dead_letters(unresolved=True) == []
        with pytest.raises(DeadLetterClosed):
            store.close_dead_letter(
                session_id, state=Closing.RESOLVED, by="bob", reason="again", now=clock()
            )
