"""The claim that starts a call: an EXECUTE claim given the worker's idempotent tools marks
the step's next call started in its own transaction (`tickwork.store.ticks.startable`),
saving the tick the commit of `start_call`; such a call left unrun runs again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tickwork.fsm import machine
from tickwork.fsm.kinds import graph_config
from tickwork.fsm.machine import RunTool
from tickwork.fsm.values import CallState, EventKind, Status
from tickwork.store.port import Store
from tickwork.testing.store_contract.base import Contract
from tickwork.testing.store_ticks import (
    IDEMPOTENT,
    LEASE_S,
    Clock,
    awaiting_calls,
    claim,
    decision,
    execute_change,
    new_session,
    reply,
    think,
)


def _started_events(store: Store, session_id: str) -> list[dict[str, Any]]:
    return [e.data for _, e in store.events_after(session_id) if e.kind is EventKind.TOOL_STARTED]


def _state(store: Store, session_id: str, call_id: str) -> CallState:
    call = store.load(session_id).call(call_id)
    assert call is not None
    return call.state


def _configured(store: Store, clock: Clock, session_id: str, **config: Any) -> str:
    """A fresh session whose config has `config` too."""
    session = new_session(session_id, now=clock())
    head = session.head.model_copy(update={"config": {**session.head.config, **config}})
    store.create(session.model_copy(update={"head": head}), now=clock())
    return session_id


def _not_idempotent(store: Store, clock: Clock, sid: str) -> tuple[str, Any]:
    think(store, sid, reply(("write_file", {"path": "a"})), now=clock())
    return sid, IDEMPOTENT


def _another_kind(store: Store, clock: Clock, sid: str) -> tuple[str, Any]:
    think(store, sid, reply(("read_file", {"path": "a"})), now=clock())
    return sid, {"other": {"read_file"}}


def _cancel_asked(store: Store, clock: Clock, sid: str) -> tuple[str, Any]:
    think(store, sid, reply(("read_file", {"path": "a"})), now=clock())
    store.request_cancel(sid, now=clock(), by="bob")
    return sid, IDEMPOTENT


def _approved(store: Store, clock: Clock, sid: str) -> tuple[str, Any]:
    think(store, sid, reply(("danger", {"rm": "x"})), now=clock())
    [call] = awaiting_calls(store, sid)
    store.decide(sid, decision(call, now=clock()), now=clock())
    return sid, {"repair": {"danger"}}


def _no_arguments(store: Store, clock: Clock, sid: str) -> tuple[str, Any]:
    think(store, sid, reply(("read_file", "{not json")), now=clock())
    return sid, IDEMPOTENT


def _not_offered(store: Store, clock: Clock, sid: str) -> tuple[str, Any]:
    other = _configured(store, clock, "sess-role", tools=["write_file"])
    think(store, other, reply(("read_file", {"path": "a"})), now=clock())
    return other, IDEMPOTENT


def _a_graph(store: Store, clock: Clock, sid: str) -> tuple[str, Any]:
    other = _configured(store, clock, "sess-graph", **graph_config("g", "1"))
    think(store, other, reply(("read_file", {"path": "a"})), now=clock())
    return other, IDEMPOTENT


#: sessions whose next call the claim cannot tell is safe to start: the session and the
#: idempotent tools the claim is given
UNSAFE: dict[str, Callable[[Store, Clock, str], tuple[str, Any]]] = {
    "its tool is not idempotent": _not_idempotent,
    "its tool is idempotent for another kind": _another_kind,
    "a cancel is asked": _cancel_asked,
    "it was approved by a person": _approved,
    "its arguments are not JSON": _no_arguments,
    "its role is not offered the tool": _not_offered,
    "a graph session": _a_graph,
}


class StartContract(Contract):
    """An EXECUTE claim that starts an idempotent call in its own transaction."""

    def test_claim_starts_the_next_call_of_an_idempotent_tool(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(("read_file", {"path": "a"})), now=clock())

        claimed = claim(store, session_id, now=clock(), idempotent=IDEMPOTENT)

        assert claimed.started == "s1c0"
        # the calls as the claim found them: the tick runs it as a first run
        assert [c.state for c in claimed.calls] == [CallState.PENDING]
        assert _state(store, session_id, "s1c0") is CallState.STARTED
        expected = {"call_id": "s1c0", "name": "read_file", "rerun": False}
        assert _started_events(store, session_id) == [expected]
        change = execute_change(store, claimed, now=clock(), output="read", idempotent=True)
        head = store.save(change, version=claimed.head.version, owner=claimed.owner, now=clock())
        assert head.status is Status.READY
        assert _state(store, session_id, "s1c0") is CallState.DONE
        assert len(_started_events(store, session_id)) == 1

    def test_a_call_the_claim_started_but_never_ran_runs_again(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(("read_file", {"path": "a"})), now=clock())
        dead = claim(store, session_id, now=clock(), owner="dead", idempotent=IDEMPOTENT)
        assert dead.started == "s1c0"

        later = claim(
            store, session_id, now=clock.advance(LEASE_S + 1), owner="w2", idempotent=IDEMPOTENT
        )

        assert later.started is None
        assert [c.state for c in later.calls] == [CallState.STARTED]
        todo = machine.start_execute(
            later.head, later.calls, later.decisions, idempotent=True, now=clock()
        )
        assert isinstance(todo, RunTool) and todo.rerun
        change = execute_change(store, later, now=clock(), output="read again", idempotent=True)
        store.save(change, version=later.head.version, owner="w2", now=clock())
        assert [d["rerun"] for d in _started_events(store, session_id)] == [False, True]
        assert store.load(session_id).observation("s1c0").content == "read again"  # type: ignore[union-attr]

    @pytest.mark.parametrize("why", list(UNSAFE))
    def test_claim_starts_no_call_it_cannot_tell_is_safe(
        self, store: Store, clock: Clock, session_id: str, why: str
    ) -> None:
        sid, idempotent = UNSAFE[why](store, clock, session_id)
        before = store.load(sid).steps[-1].calls[0].state

        claimed = claim(store, sid, now=clock(), idempotent=idempotent)

        assert claimed.head.status is Status.EXECUTING
        assert claimed.started is None
        assert _state(store, sid, "s1c0") is before is not CallState.STARTED
        assert _started_events(store, sid) == []

    def test_a_claim_refused_starts_nothing(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        head = think(store, session_id, reply(("read_file", {"path": "a"})), now=clock())
        claim(store, session_id, now=clock(), owner="w1")

        refused = store.claim(
            session_id,
            head.version,
            owner="w2",
            now=clock(),
            lease_s=LEASE_S,
            idempotent=IDEMPOTENT,
        )

        assert refused is None
        assert _state(store, session_id, "s1c0") is CallState.PENDING
        assert _started_events(store, session_id) == []
