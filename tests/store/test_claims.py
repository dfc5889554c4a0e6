"""claim, save, renew and start_call: the compare-and-swap that makes a tick run once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, event
from tickwork.fsm import machine, snapshots
from tickwork.fsm.errors import ClaimLost
from tickwork.fsm.machine import RunTool
from tickwork.fsm.values import Budgets, CallState, ErrorCode, EventKind, Status
from tickwork.store import PostgresStore, Store, open_store
from tickwork.store.dead_letters import get_dead_letter
from tickwork.store.schema import calls, dead_letters, outbox, sessions

from tests.conftest import Clock
from tests.store.conftest import (
    IDEMPOTENT,
    LEASE_S,
    claim,
    count_rows,
    execute,
    lease,
    new_session,
    reply,
    run_step,
    table_rows,
    think,
    think_change,
)


def _outbox(engine: Engine) -> list[tuple[str, int]]:
    return sorted((r["session_id"], r["version"]) for r in table_rows(engine, outbox))


class TestClaim:
    def test_deletes_the_outbox_row_of_that_version(self, store: Store, clock: Clock) -> None:
        store.create(new_session("a", now=clock()), now=clock())
        store.create(new_session("b", now=clock()), now=clock())
        assert _outbox(store.engine) == [("a", 0), ("b", 0)]

        claim(store, "a", now=clock())

        assert _outbox(store.engine) == [("b", 0)]

    def test_a_session_created_again_under_its_id_is_read_afresh(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        for n in (1, 2):
            run_step(store, session_id, n, now=clock())
        claim(store, session_id, now=clock())  # this Store has read two steps
        with store.engine.begin() as conn:
            conn.execute(sessions.delete().where(sessions.c.id == session_id))
        # the same id and the same creation time: only its steps tell it apart
        store.create(new_session(session_id, now=clock()), now=clock())
        # another worker runs its first steps
        elsewhere = open_store(store.engine, core=not isinstance(store, PostgresStore))
        for n in (7, 8, 9):
            run_step(elsewhere, session_id, n, now=clock())

        claimed = claim(store, session_id, now=clock())

        assert [s.thought for s in claimed.steps] == ["step 0007", "step 0008", "step 0009"]
        assert claimed.steps == store.load(session_id).steps

    def test_a_new_sessions_first_claim_reads_no_steps_after_it(
        self, store: Store, clock: Clock
    ) -> None:
        """A session at step 0 has no history: its first THINK, a miss of every worker's
        transcripts, reads none (one that has taken a step, missed, does)."""
        for session_id in ("new", "old"):
            store.create(new_session(session_id, now=clock()), now=clock())
        run_step(store, "old", 1, now=clock())
        statements: list[str] = []

        def count(*args: object) -> None:
            statements.append(str(args[2]))

        fresh = [open_store(store.engine, core=not isinstance(store, PostgresStore)) for _ in "ab"]
        event.listen(store.engine, "before_cursor_execute", count)
        try:
            first = claim(fresh[0], "new", now=clock())
            firsts, statements[:] = len(statements), []
            missed = claim(fresh[1], "old", now=clock())
        finally:
            event.remove(store.engine, "before_cursor_execute", count)

        assert first.steps == () and first.observations == {}
        assert [s.step for s in missed.steps] == [1]
        assert firsts < len(statements)


class TestSave:
    def test_moves_the_version_clears_the_lease_and_appends(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claimed = claim(store, session_id, now=clock())
        change = think_change(
            claimed,
            reply(("read_file", {"path": "a"}), ("search", {"q": "b"})),
            now=clock.advance(1),
        )
        before = count_rows(store.engine)

        head = store.save(change, version=0, owner="worker-1", now=clock())

        assert head.version == 1
        assert head.status is Status.EXECUTING
        assert store.get(session_id) == head
        assert lease(store.engine, session_id) == (None, None)
        after = count_rows(store.engine)
        delta = {t: after[t] - before[t] for t in after}
        assert delta == {
            "tickwork_sessions": 0,
            "tickwork_steps": 1,
            "tickwork_calls": 2,
            "tickwork_observations": 0,
            "tickwork_decisions": 0,
            "tickwork_events": 2,
            "tickwork_outbox": 1,
            "tickwork_dead_letters": 0,
            "tickwork_dead_letter_counts": 0,
            "tickwork_dead_letter_totals": 0,
            "tickwork_blobs": 0,
            "tickwork_file_changes": 0,
            "tickwork_archived": 0,
            "tickwork_deliveries": 0,
            "tickwork_environments": 0,
            "tickwork_environment_uses": 0,
            "tickwork_joins": 0,
        }
        assert store.load(session_id).steps == (change.step,)
        assert [e.kind for _, e in store.events_after(session_id)][-2:] == [
            EventKind.MODEL_CALLED,
            EventKind.STEP_RECORDED,
        ]

    def test_enqueues_the_next_tick_iff_runnable_after_its_delay(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        claimed = claim(store, session_id, now=clock())
        retry = machine.model_failed(
            claimed.head, error="429", transient=True, now=clock(), jitter=0.0, retry_after_s=7.5
        )
        assert retry.delay_s == 7.5
        store.save(retry, version=0, owner="worker-1", now=clock())
        assert table_rows(store.engine, outbox) == [
            {
                "session_id": session_id,
                "version": 1,
                "due_at": clock() + timedelta(seconds=7.5),
                "republished": 0,
                "published_at": None,  # it waits here: the relay publishes it when due
            }
        ]

        think(store, session_id, reply(("danger", {"rm": "x"})), now=clock())
        assert table_rows(store.engine, outbox) == []

    def test_a_finished_session_gets_no_tick(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        head = think(store, session_id, reply(content="done"), now=clock())

        assert head.status is Status.COMPLETED
        assert head.final_answer == "done"
        assert table_rows(store.engine, outbox) == []

    @pytest.mark.parametrize("wrong", ["version", "owner", "no lease"])
    def test_a_lost_claim_raises_and_writes_nothing(
        self, store: Store, clock: Clock, session_id: str, wrong: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        claimed = claim(store, session_id, now=clock(), owner="w1")
        change = think_change(claimed, reply(("read_file", {"path": "z"})), now=clock())
        version, owner = claimed.head.version, "w1"
        if wrong == "version":
            version -= 1
        elif wrong == "owner":
            owner = "w2"
        else:
            owner = None  # type: ignore[assignment]
        before = count_rows(store.engine), table_rows(store.engine, sessions)

        with pytest.raises(ClaimLost, match=session_id):
            store.save(change, version=version, owner=owner, now=clock())

        assert (count_rows(store.engine), table_rows(store.engine, sessions)) == before

    def test_the_same_change_saves_once(self, store: Store, clock: Clock, session_id: str) -> None:
        claimed = claim(store, session_id, now=clock())
        change = think_change(claimed, reply(("read_file", {"path": "a"})), now=clock())
        store.save(change, version=0, owner="worker-1", now=clock())
        before = count_rows(store.engine)

        with pytest.raises(ClaimLost):
            store.save(change, version=0, owner="worker-1", now=clock())
        assert count_rows(store.engine) == before

    def test_a_failed_session_is_dead_lettered_with_its_whole_snapshot(
        self, store: Store, clock: Clock
    ) -> None:
        store.create(new_session("f", now=clock(), kind="review", model="m-1"), now=clock())
        run_step(store, "f", 1, now=clock.advance(1), tool="run_tests")
        claimed = claim(store, "f", now=clock.advance(1))
        failure = machine.fail(
            claimed.head,
            ErrorCode.INTERNAL,
            "job config broken at 3 places for id deadbeef01",
            now=clock(),
        )

        head = store.save(failure, version=claimed.head.version, owner="worker-1", now=clock())

        assert head.status is Status.FAILED
        [row] = table_rows(store.engine, dead_letters)
        assert row["session_id"] == "f"
        assert row["code"] == "INTERNAL"
        assert row["message"] == "job config broken at 3 places for id deadbeef01"
        assert row["kind"] == "review"
        assert row["model"] == "m-1"
        assert row["last_tool"] == "run_tests"
        assert row["error_signature"] == "INTERNAL: job config broken at N places for id <id>"
        assert row["at"] == clock()
        assert row["resolved_at"] is None
        loaded = store.load("f")
        assert snapshots.load(row["snapshot"]) == loaded
        assert get_dead_letter(store.engine, "f").session() == loaded
        assert [e.kind for e in loaded.events][-2:] == [EventKind.FAILED, EventKind.DEAD_LETTERED]

    def test_a_budget_failure_closes_nothing_and_is_dead_lettered(
        self, store: Store, clock: Clock
    ) -> None:
        store.create(new_session("b", now=clock(), budgets=Budgets(max_tokens=100)), now=clock())
        run_step(store, "b", 1, now=clock())
        head = think(store, "b", reply(), now=clock())

        assert head.error_code is ErrorCode.BUDGET_TOKENS
        dead = get_dead_letter(store.engine, "b")
        assert dead.code == "BUDGET_TOKENS"
        assert dead.last_tool == "read_file"
        assert dead.session() == store.load("b")


class TestStartCall:
    def test_marks_the_call_started_with_an_event(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(("read_file", {"path": "a"})), now=clock())
        claimed = claim(store, session_id, now=clock.advance(1))
        run = machine.start_execute(
            claimed.head, claimed.calls, claimed.decisions, idempotent=False, now=clock()
        )
        assert isinstance(run, RunTool)

        store.start_call(session_id, claimed.head.version, run.call, owner="worker-1", now=clock())

        [row] = table_rows(store.engine, calls)
        assert (row["state"], row["started_at"]) == ("started", clock())
        _, event = store.events_after(session_id)[-1]
        assert (event.kind, event.data) == (
            EventKind.TOOL_STARTED,
            {"call_id": "s1c0", "name": "read_file", "rerun": False},
        )
        assert store.get(session_id).version == claimed.head.version

    def test_a_call_the_claim_started_and_the_deadline_closed_reads_not_run(
        self, store: Store, clock: Clock
    ) -> None:
        """Its tick was lost before it ran (a worker gone, a tick refused), and the next
        one came past the deadline: the call read "interrupted; it may or may not have
        run", though an idempotent call runs again from the start and its earlier attempt
        counted for nothing, like the calls after it, which read "not run"."""
        store.create(new_session("s", now=clock(), budgets=Budgets(deadline_s=60)), now=clock())
        answer = reply(("read_file", {"path": "a"}), ("read_file", {"path": "b"}))
        think(store, "s", answer, now=clock())
        lost = claim(store, "s", now=clock(), owner="gone", idempotent=IDEMPOTENT)
        assert lost.started == "s1c0"

        later = claim(store, "s", now=clock.advance(61), owner="w2", idempotent=IDEMPOTENT)
        assert [c.state for c in later.calls] == [CallState.STARTED, CallState.PENDING]
        change = machine.start_execute(
            later.head, later.calls, later.decisions, idempotent=True, now=clock()
        )
        assert not isinstance(change, RunTool)
        head = store.save(change, version=later.head.version, owner="w2", now=clock())

        assert (head.status, head.error_code) == (Status.FAILED, ErrorCode.DEADLINE)
        session = store.load("s")
        assert {o.call_id: o.content for o in session.observations} == {
            "s1c0": "not run: the session failed",
            "s1c1": "not run: the session failed",
        }

    @pytest.mark.parametrize("wrong", ["owner", "version", "taken over"])
    def test_with_a_lost_lease_raises_and_writes_nothing(
        self, store: Store, clock: Clock, session_id: str, wrong: str
    ) -> None:
        think(store, session_id, reply(("read_file", {"path": "a"})), now=clock())
        claimed = claim(store, session_id, now=clock(), owner="w1")
        [call] = claimed.calls
        version, owner = claimed.head.version, "w1"
        if wrong == "owner":
            owner = "w2"
        elif wrong == "version":
            version -= 1
        else:
            claim(store, session_id, now=clock.advance(LEASE_S + 1), owner="w2")
        before = count_rows(store.engine), table_rows(store.engine, calls)

        with pytest.raises(ClaimLost, match="s1c0"):
            store.start_call(session_id, version, call, owner=owner, now=clock())

        assert (count_rows(store.engine), table_rows(store.engine, calls)) == before


class TestLoops:
    def test_an_intervention_saves_the_step_with_its_calls_closed(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        same = reply(("read_file", {"path": "same.py"}), ("search", {"q": "x"}))
        for _ in range(2):
            think(store, session_id, same, now=clock())
            execute(store, session_id, now=clock())
            execute(store, session_id, now=clock())

        head = think(store, session_id, same, now=clock())

        assert (head.status, head.loop_interventions, head.step) == (Status.READY, 1, 3)
        session = store.load(session_id)
        assert [c.state for c in session.steps[2].calls] == [CallState.DONE, CallState.DONE]
        blocked = [session.observation(c.call_id) for c in session.steps[2].calls]
        assert all(
            o is not None and o.is_error and o.content.startswith("Loop detected") for o in blocked
        )
        assert session.events[-1].kind is EventKind.LOOP_INTERVENTION
        assert [r["version"] for r in table_rows(store.engine, outbox)] == [head.version]

    def test_one_intervention_too_many_fails_with_the_step_in_the_dead_letter(
        self, store: Store, clock: Clock
    ) -> None:
        store.create(
            new_session("loopy", now=clock(), budgets=Budgets(max_loop_interventions=1)),
            now=clock(),
        )
        same = reply(("run_tests", {}))
        for _ in range(3):
            think(store, "loopy", same, now=clock())
            if store.get("loopy").status is Status.EXECUTING:
                execute(store, "loopy", now=clock())

        head = think(store, "loopy", same, now=clock())

        assert (head.status, head.error_code) == (Status.FAILED, ErrorCode.LOOP)
        dead = get_dead_letter(store.engine, "loopy")
        assert (dead.code, dead.last_tool) == ("LOOP", "run_tests")
        assert dead.session() == store.load("loopy")
        assert len(dead.session().steps) == 4
        assert table_rows(store.engine, outbox) == []
