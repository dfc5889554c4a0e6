"""The `Sessions` sub-port: create, get, load, list, and read the events of sessions."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest

from tickwork.fsm.errors import SessionNotFound
from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.values import (
    Budgets,
    CallState,
    DecisionKind,
    ErrorCode,
    EventKind,
    Observation,
    Status,
    Usage,
)
from tickwork.store.port import Store
from tickwork.testing.store_contract.base import Contract
from tickwork.testing.store_ticks import (
    Clock,
    awaiting_calls,
    claim,
    decision,
    execute,
    new_session,
    reply,
    run_step,
    think,
    think_change,
    wait_for_approval,
)


class SessionContract(Contract):
    """create, get, load, list and read the events of sessions (the `Sessions` sub-port)."""

    def test_get_and_load_of_an_unknown_session_raise_session_not_found(self, store: Store) -> None:
        with pytest.raises(SessionNotFound, match="nope"):
            store.get("nope")
        with pytest.raises(SessionNotFound):
            store.load("nope")

    def test_load_returns_steps_with_calls_observations_decisions_and_events_in_order(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock.advance(1))
        head = think(
            store,
            session_id,
            reply(("read_file", {"path": "a"}), ("danger", {"rm": "b"}), content="two calls"),
            now=clock.advance(1),
        )
        assert head.status is Status.WAITING_APPROVAL
        [awaited] = awaiting_calls(store, session_id)
        store.decide(
            session_id, decision(awaited, now=clock.advance(1), comment="fine"), now=clock()
        )
        execute(store, session_id, now=clock.advance(1), output="first")
        execute(store, session_id, now=clock.advance(1), output="second")

        session = store.load(session_id)

        assert session.head.version == 6
        assert session.head.status is Status.READY
        assert [s.step for s in session.steps] == [1, 2]
        assert [s.thought for s in session.steps] == ["step 0001", "two calls"]
        assert [[c.call_id for c in s.calls] for s in session.steps] == [["s1c0"], ["s2c0", "s2c1"]]
        assert [c.name for c in session.steps[1].calls] == ["read_file", "danger"]
        assert session.steps[1].calls[1].needs_approval
        assert all(c.state is CallState.DONE for s in session.steps for c in s.calls)
        assert session.steps[1].usage.total == 120
        assert session.steps[1].trace_id == "trace-0002"
        assert [(o.call_id, o.content) for o in session.observations] == [
            ("s1c0", "contents of f0001"),
            ("s2c0", "first"),
            ("s2c1", "second"),
        ]
        assert [(d.call_id, d.kind, d.approver, d.comment) for d in session.decisions] == [
            ("s2c1", DecisionKind.APPROVE, "alice", "fine")
        ]
        assert [e.kind for e in session.events] == [
            EventKind.CREATED,
            EventKind.MODEL_CALLED,
            EventKind.STEP_RECORDED,
            EventKind.TOOL_STARTED,
            EventKind.TOOL_FINISHED,
            EventKind.MODEL_CALLED,
            EventKind.STEP_RECORDED,
            EventKind.APPROVAL_REQUESTED,
            EventKind.APPROVAL_DECIDED,
            EventKind.TOOL_STARTED,
            EventKind.TOOL_FINISHED,
            EventKind.TOOL_STARTED,
            EventKind.TOOL_FINISHED,
        ]
        assert session.head.tokens == 240
        assert session.head.cost_usd == pytest.approx(0.02)

    def test_load_keeps_an_observation_whole(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        think(store, session_id, reply(("read_file", {"path": "big"})), now=clock())
        big = "x" * 100_000 + "\n\u00e9\u4e2d"
        execute(store, session_id, now=clock(), output=big)

        assert store.load(session_id).observations == (
            Observation(call_id="s1c0", content=big, at=clock(), duration_ms=3.0),
        )

    def test_list_sessions_filters_by_status_kind_and_error_code_newest_first(
        self, store: Store, clock: Clock
    ) -> None:
        store.create(new_session("a", now=clock.advance(1), kind="repair"), now=clock())
        store.create(new_session("b", now=clock.advance(1), kind="review"), now=clock())
        store.create(
            new_session("c", now=clock.advance(1), kind="repair", budgets=Budgets(max_steps=1)),
            now=clock(),
        )
        run_step(store, "c", 1, now=clock.advance(1))
        failed = think(store, "c", reply(), now=clock.advance(1))
        assert failed.error_code is ErrorCode.BUDGET_STEPS
        store.create(new_session("d", now=clock.advance(1), kind="repair"), now=clock())
        think(store, "d", reply(content="done"), now=clock.advance(1))

        def ids(**filters: object) -> list[str]:
            return [h.id for h in store.list_sessions(**filters)]  # type: ignore[arg-type]

        assert ids() == ["d", "c", "b", "a"]
        assert ids(status=[Status.READY]) == ["b", "a"]
        assert ids(status=["completed", "failed"]) == ["d", "c"]
        assert ids(kind="repair") == ["d", "c", "a"]
        assert ids(error_code="BUDGET_STEPS") == ["c"]
        assert ids(kind="review", status=["failed"]) == []
        assert ids(limit=2) == ["d", "c"]
        assert ids(limit=2, offset=2) == ["b", "a"]

    def test_list_sessions_waited_longest_first_orders_by_the_last_request(
        self, store: Store, clock: Clock
    ) -> None:
        """The approvals queue's order, and what its limit keeps: a session made first but
        asked last comes last, and a decision on one of a session's waiting calls, which
        updates it last, does not move it back."""
        for session_id in ("late", "many", "one"):
            store.create(new_session(session_id, now=clock.advance(1)), now=clock())
        clock.advance(1)
        wait_for_approval(store, "many", clock, "danger", "danger")
        clock.advance(1)
        wait_for_approval(store, "one", clock, "danger")
        clock.advance(1)
        wait_for_approval(store, "late", clock, "danger")
        first, _ = awaiting_calls(store, "many")
        store.decide("many", decision(first, now=clock.advance(1)), now=clock())
        assert store.get("many").status is Status.WAITING_APPROVAL

        def ids(**filters: object) -> list[str]:
            return [h.id for h in store.list_sessions(**filters)]  # type: ignore[arg-type]

        assert ids(waited_longest_first=True) == ["many", "one", "late"]
        assert ids(waited_longest_first=True, limit=1) == ["many"]
        assert ids() == ["one", "many", "late"]

    def test_ids_starting_finds_the_ids_with_a_prefix_in_order_case_and_wildcards_exact(
        self, store: Store, clock: Clock
    ) -> None:
        """What the CLI's short ids rest on: a prefix matches from the start, with its case,
        and `_`, `%` or `.` in it match only themselves."""
        for session_id in ("cafe01b", "cafe01a", "Cafe01c", "cafe0_x", "cafe011", "xcafe01"):
            store.create(new_session(session_id, now=clock.advance(1)), now=clock())
        assert store.ids_starting("cafe01", limit=10) == ["cafe011", "cafe01a", "cafe01b"]
        assert store.ids_starting("cafe01", limit=2) == ["cafe011", "cafe01a"]
        assert store.ids_starting("cafe01a", limit=10) == ["cafe01a"]
        assert store.ids_starting("Cafe", limit=10) == ["Cafe01c"]
        assert store.ids_starting("cafe0_", limit=10) == ["cafe0_x"]
        assert store.ids_starting("cafe%", limit=10) == []
        assert store.ids_starting("nothing", limit=10) == []
        assert store.ids_starting("caf\x00", limit=10) == []

    def test_ids_starting_of_a_tenant_finds_that_tenant_s_ids_only(
        self, store: Store, clock: Clock
    ) -> None:
        """`show --tenant` looks for a start of an id among the tenant's sessions only."""
        for session_id, tenant in (("cafe01a", "team-a"), ("cafe01b", "team-b")):
            found = new_session(session_id, now=clock.advance(1))
            head = found.head.model_copy(update={"tenant": tenant})
            store.create(found.model_copy(update={"head": head}), now=clock())
        assert store.ids_starting("cafe01", limit=10) == ["cafe01a", "cafe01b"]
        assert store.ids_starting("cafe01", limit=10, tenant="team-b") == ["cafe01b"]
        assert store.ids_starting("cafe01", limit=10, tenant="team-c") == []

    def test_list_sessions_by_id_prefix_matches_the_start_exactly_with_the_other_filters(
        self, store: Store, clock: Clock
    ) -> None:
        """The API's `id_prefix`: the sessions whose ids start with it (its case, no
        wildcard), newest first, within the tenant and every other filter."""
        for session_id, tenant in (
            ("cafe01a", "team-a"),
            ("cafe01b", "team-b"),
            ("Cafe01c", "team-a"),
            ("cafe0_x", "team-a"),
            ("cafe01d", "team-a"),
        ):
            found = new_session(session_id, now=clock.advance(1))
            head = found.head.model_copy(update={"tenant": tenant})
            store.create(found.model_copy(update={"head": head}), now=clock())

        def ids(**filters: object) -> list[str]:
            return [h.id for h in store.list_sessions(**filters)]  # type: ignore[arg-type]

        assert ids(id_prefix="cafe01") == ["cafe01d", "cafe01b", "cafe01a"]
        assert ids(id_prefix="cafe01", tenant="team-a") == ["cafe01d", "cafe01a"]
        assert ids(id_prefix="cafe01", limit=1) == ["cafe01d"]
        assert ids(id_prefix="Cafe") == ["Cafe01c"]
        assert ids(id_prefix="cafe0_") == ["cafe0_x"]
        assert ids(id_prefix="cafe%") == []
        assert ids(id_prefix="cafe01", status=["failed"]) == []
        assert ids(id_prefix="caf\x00") == []

    def test_list_sessions_filters_by_the_outcome_a_completing_save_records(
        self, store: Store, clock: Clock
    ) -> None:
        """The outcome a job's finish puts in the result is stored by the save (both write
        paths) and filters the list; a session without one has none (an earlier version's)."""
        for session_id, outcome in (("r", "repaired"), ("f", "tests_failing"), ("o", None)):
            store.create(new_session(session_id, now=clock.advance(1)), now=clock())
            claimed = claim(store, session_id, now=clock.advance(1), owner="worker-1")
            change = think_change(claimed, reply(content="done"), now=clock())
            assert change.head.status is Status.COMPLETED
            result = {"patch": "", "outcome": outcome} if outcome else {"patch": ""}
            change = change.model_copy(
                update={"head": change.head.model_copy(update={"result": result})}
            )
            store.save(change, version=claimed.head.version, owner="worker-1", now=clock())

        def ids(outcome: str) -> list[str]:
            return [h.id for h in store.list_sessions(outcome=outcome)]

        assert ids("repaired") == ["r"]
        assert ids("tests_failing") == ["f"]
        assert ids("no_changes") == []
        assert [h.id for h in store.list_sessions(status=["completed"])] == ["o", "f", "r"]
        assert store.get("r").result["outcome"] == "repaired"
        assert "outcome" not in store.get("o").result

    def test_list_sessions_filters_by_who_submitted_them(self, store: Store, clock: Clock) -> None:
        """Exact names: another person's sessions, and a name that only begins the same, are
        left out; the filter joins the others."""
        for session_id, by, kind in (
            ("a", "sam", "repair"),
            ("b", "samuel", "repair"),
            ("c", "sam", "review"),
            ("d", "", "repair"),
        ):
            found = new_session(session_id, now=clock.advance(1), kind=kind)
            head = found.head.model_copy(update={"submitted_by": by})
            store.create(found.model_copy(update={"head": head}), now=clock())

        def ids(**filters: object) -> list[str]:
            return [h.id for h in store.list_sessions(**filters)]  # type: ignore[arg-type]

        assert ids(submitted_by="sam") == ["c", "a"]
        assert ids(submitted_by="samuel") == ["b"]
        assert ids(submitted_by="sam", kind="repair") == ["a"]
        assert ids(submitted_by="nobody") == []
        assert ids(submitted_by="") == ["d", "c", "b", "a"]  # no name given: no filter

    def test_a_session_keeps_its_tenant_and_its_forks_too(self, store: Store, clock: Clock) -> None:
        """The tenant is stored and read back, listings filter by it exactly, and a fork
        stays in its parent's tenant."""
        for session_id, tenant in (("a", "team-a"), ("b", "team-ab"), ("c", "team-a")):
            found = new_session(session_id, now=clock.advance(1))
            head = found.head.model_copy(update={"tenant": tenant})
            store.create(found.model_copy(update={"head": head}), now=clock())
        store.create(new_session("d", now=clock.advance(1)), now=clock())

        def ids(**filters: object) -> list[str]:
            return [h.id for h in store.list_sessions(**filters)]  # type: ignore[arg-type]

        assert ids(tenant="team-a") == ["c", "a"]
        assert ids(tenant="team-ab") == ["b"]
        assert ids(tenant="default") == ["d"]
        assert ids() == ["d", "c", "b", "a"]
        assert store.load("b").head.tenant == "team-ab"
        forked = store.fork(
            "b", new_id="b2", from_step=0, patch=ForkPatch(), by="olga", now=clock.advance(1)
        )
        assert forked.tenant == store.get("b2").tenant == "team-ab"

    def test_day_spent_counts_the_tenant_s_sessions_of_that_utc_day(
        self, store: Store, clock: Clock
    ) -> None:
        """What the tenant's `max_usd_per_day` counts, read before each model call: its
        sessions created that UTC day, a fork's kept steps once (its parent spent them)."""
        day = clock().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        for session_id, tenant in (("a", "team-a"), ("b", "team-b")):
            found = new_session(session_id, now=clock.advance(1))
            head = found.head.model_copy(update={"tenant": tenant})
            store.create(found.model_copy(update={"head": head}), now=clock())
            run_step(store, session_id, 1, now=clock.advance(1))  # $0.01
        assert store.day_spent("team-a", day=day) == pytest.approx(0.01)
        assert store.day_spent("team-a", day=day + timedelta(days=1)) == 0
        assert store.day_spent("team-a", day=day - timedelta(days=1)) == 0
        assert store.day_spent("team-c", day=day) == 0
        store.fork("a", new_id="a2", from_step=1, patch=ForkPatch(), by="olga", now=clock())
        assert store.get("a2").cost_usd == pytest.approx(0.01)
        assert store.day_spent("team-a", day=day) == pytest.approx(0.01)

    def test_list_sessions_filters_by_parent(self, store: Store, clock: Clock) -> None:
        store.create(new_session("p", now=clock.advance(1)), now=clock())
        run_step(store, "p", 1, now=clock.advance(1))
        for child in ("f1", "f2"):
            store.fork(
                "p", new_id=child, from_step=1, patch=ForkPatch(), by="olga", now=clock.advance(1)
            )
        store.fork(
            "f1", new_id="g", from_step=0, patch=ForkPatch(), by="olga", now=clock.advance(1)
        )

        assert [h.id for h in store.list_sessions(parent_id="p")] == ["f2", "f1"]
        assert [h.id for h in store.list_sessions(parent_id="f1")] == ["g"]
        assert store.list_sessions(parent_id="g") == []

    def test_events_after_resumes_after_an_id(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        run_step(store, session_id, 1, now=clock())
        everything = store.events_after(session_id)
        ids = [i for i, _ in everything]
        assert len(ids) == 5
        assert ids == sorted(ids) and len(set(ids)) == len(ids)

        assert store.events_after(session_id, after_id=ids[1]) == everything[2:]
        assert store.events_after(session_id, after_id=ids[-1]) == []
        assert store.events_after(session_id, after_id=ids[0], limit=2) == everything[1:3]

        run_step(store, session_id, 2, now=clock())
        more = store.events_after(session_id, after_id=ids[-1])
        assert [e.kind for _, e in more] == [
            EventKind.MODEL_CALLED,
            EventKind.STEP_RECORDED,
            EventKind.TOOL_STARTED,
            EventKind.TOOL_FINISHED,
        ]
        assert min(i for i, _ in more) > ids[-1]

    def test_a_replys_prompt_estimate_is_kept_and_forked(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:
        """The context policy's scale divides the server's count of a reply's prompt by
        the estimate it was sent with (`Step.prompt_estimate`); None: a step stored
        without one (by a tickwork before it), whose prompt is built again."""
        asked = reply(("read_file", {"path": "a"}), prompt_tokens=1_300)
        think(store, session_id, asked, now=clock.advance(1), prompt_estimate=1_000)
        execute(store, session_id, now=clock.advance(1))
        think(store, session_id, reply(("read_file", {"path": "b"})), now=clock.advance(1))

        steps = store.load(session_id).steps
        assert [s.prompt_estimate for s in steps] == [1_000, None]
        store.fork(
            session_id, new_id="fork-1", from_step=2, patch=ForkPatch(), by="olga", now=clock()
        )
        assert [s.prompt_estimate for s in store.load("fork-1").steps] == [1_000, None]

    def test_a_steps_cached_prompt_tokens_are_kept(
        self, store: Store, clock: Clock, session_id: str
    ) -> None:

        cached = reply(("read_file", {"path": "a"}), prompt_tokens=900).model_copy(
            update={
                "usage": Usage(
                    prompt_tokens=900,
                    completion_tokens=20,
                    cached_prompt_tokens=700,
                    cache_creation_tokens=150,
                )
            }
        )
        think(store, session_id, cached, now=clock.advance(1))

        (step,) = store.load(session_id).steps
        assert step.usage == cached.usage
