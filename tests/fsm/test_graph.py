"""Graph definitions refused when they are defined, and the pure graph steps: routing, state
updates checked against the schema, interrupts, loops, budgets and forks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypedDict

import pytest
from pydantic import BaseModel
from tickwork.fsm import graph_machine, transitions
from tickwork.fsm.errors import InvalidGraph, InvalidStateUpdate
from tickwork.fsm.forks import ForkPatch, fork
from tickwork.fsm.graph import END, START, Graph, add, append, fan_out
from tickwork.fsm.graph_machine import Decided, RunNode
from tickwork.fsm.values import (
    Budgets,
    CallState,
    Decision,
    DecisionKind,
    ErrorCode,
    Head,
    Observation,
    Session,
    Status,
    Usage,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class S(BaseModel):
    n: int = 0
    text: str = ""


def inc(state: S) -> dict[str, Any]:
    return {"n": state.n + 1}


def line(*names: str, **node: Any) -> Graph:
    graph = Graph("g", version="1", state=S)
    for name in names:
        graph.add_node(name, inc, **node)
    for a, b in zip((START, *names), (*names, END), strict=True):
        graph.add_edge(a, b)
    return graph


def test_a_valid_graph_compiles_and_routes() -> None:
    compiled = line("a", "b").compile()
    assert compiled.next(START, {}) == "a"
    assert compiled.next("a", {}) == "b"
    assert compiled.next("b", {}) == END


def to_missing() -> Graph:
    graph = line("a")
    graph.edges["a"] = "nowhere"
    return graph


def rejects_to_missing() -> Graph:
    graph = Graph("g", version="1", state=S)
    graph.add_node("a", inc, interrupt_before=True, on_reject="nowhere")
    return graph.add_edge(START, "a").add_edge("a", END)


def unreachable() -> Graph:
    return line("a").add_node("island", inc).add_edge("island", END)


def dead_end() -> Graph:
    graph = Graph("g", version="1", state=S)
    graph.add_node("a", inc).add_node("b", inc).add_node("c", inc)
    graph.add_edge(START, "a").add_conditional_edges("a", lambda s: "b", targets=["b", "c"])
    graph.add_edge("b", END).add_conditional_edges("c", lambda s: "c", targets=["c"])
    return graph


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (to_missing, "the edge 'a' -> 'nowhere' names a missing node 'nowhere'"),
        (rejects_to_missing, "node 'a' goes on reject to a missing node 'nowhere'"),
        (unreachable, "no path from START reaches island"),
        (dead_end, "no path from c to END"),
    ],
    ids=[
        "edge to a missing node",
        "reject to a missing node",
        "unreachable node",
        "no path to END",
    ],
)
def test_invalid_graphs_are_refused_at_compile(build: Any, message: str) -> None:
    with pytest.raises(InvalidGraph, match=message):
        build().compile()


def test_no_path_from_start_to_end_is_refused() -> None:
    graph = Graph("g", version="1", state=S)
    graph.add_node("a", inc).add_edge(START, "a")
    graph.add_conditional_edges("a", lambda s: "a", targets=["a"])
    with pytest.raises(InvalidGraph, match="no path from START to END"):
        graph.compile()


def test_a_node_without_an_edge_out_and_an_empty_start_are_refused() -> None:
    graph = Graph("g", version="1", state=S)
    graph.add_node("a", inc)
    with pytest.raises(InvalidGraph, match="nothing leaves START"):
        graph.compile()
    graph.add_edge(START, "a")
    with pytest.raises(InvalidGraph, match="node 'a' has no edge out"):
        graph.compile()


class Writes(TypedDict):
    n: int
    colour: str


def paints(state: S) -> Writes:
    return {"n": 1, "colour": "red"}


def test_a_node_declared_to_return_keys_not_in_the_state_is_refused_at_compile() -> None:
    graph = Graph("g", version="1", state=S)
    graph.add_node("paint", paints).add_edge(START, "paint").add_edge("paint", END)
    with pytest.raises(InvalidGraph, match="node 'paint' returns colour, not in the state S"):
        graph.compile()
    declared = Graph("g", version="1", state=S)
    declared.add_node("paint", inc, writes=["n", "size"])
    declared.add_edge(START, "paint").add_edge("paint", END)
    with pytest.raises(InvalidGraph, match="returns size"):
        declared.compile()


def test_definition_errors_name_what_to_fix() -> None:
    with pytest.raises(InvalidGraph, match="pydantic model"):
        Graph("g", version="1", state=dict)  # type: ignore[arg-type]
    graph = line("a")
    with pytest.raises(InvalidGraph, match="has a node 'a' already"):
        graph.add_node("a", inc)
    with pytest.raises(InvalidGraph, match="not a usable node name"):
        graph.add_node(END, inc)
    with pytest.raises(InvalidGraph, match="has an edge already"):
        graph.add_edge("a", END)
    with pytest.raises(InvalidGraph, match="must declare where"):
        Graph("h", version="1", state=S).add_conditional_edges("a", lambda s: "a")


def router(state: S) -> Literal["a", "__end__"]:
    return END if state.n >= 2 else "a"


def test_conditional_targets_come_from_a_literal_and_a_wrong_choice_is_named() -> None:
    graph = Graph("g", version="1", state=S)
    graph.add_node("a", inc).add_edge(START, "a").add_conditional_edges("a", router)
    compiled = graph.compile()
    assert compiled.next("a", {"n": 0}) == "a"
    assert compiled.next("a", {"n": 2}) == END
    bad = Graph("g", version="1", state=S)
    bad.add_node("a", inc).add_edge(START, "a")
    bad.add_conditional_edges("a", lambda s: "b", targets=["a", END])
    with pytest.raises(InvalidGraph, match="chose 'b', not one of its targets"):
        bad.compile().next("a", {})


def test_an_update_is_checked_against_the_schema_when_the_node_returns() -> None:
    compiled = line("a").compile()
    assert compiled.update({"n": 1, "text": ""}, {"n": 2}, by="node 'a'") == {"n": 2, "text": ""}
    with pytest.raises(
        InvalidStateUpdate, match="node 'a' of graph 'g' gives colour, which the state S"
    ):
        compiled.update({"n": 1}, {"colour": "red"}, by="node 'a'")
    with pytest.raises(InvalidStateUpdate, match="n: Input should be a valid integer"):
        compiled.update({"n": 1}, {"n": "many"}, by="node 'a'")
    with pytest.raises(InvalidStateUpdate, match="gives a list"):
        compiled.update({"n": 1}, [1], by="node 'a'")


def head(**fields: Any) -> Head:
    base = dict(
        id="g1",
        kind="g",
        created_at=NOW,
        updated_at=NOW,
        model="scripted:x",
        config={"graph": {"name": "g", "version": "1"}, "initial_state": {"n": 0, "text": ""}},
    )
    return Head(**{**base, **fields})


def test_the_first_tick_records_the_first_node_and_the_state_stays_in_the_head() -> None:
    change = graph_machine.start(head(), line("a", "b").compile(), now=NOW)
    assert change.head.status is Status.EXECUTING and change.head.step == 1
    assert change.step is not None and [c.name for c in change.step.calls] == ["a"]
    assert change.step.calls[0].arguments == {}  # the state is in the head, not every call
    assert change.head.result["state"] == {"n": 0, "text": ""}
    assert change.head.result["node"] == START
    assert change.enqueue


def test_a_finished_node_saves_its_delta_and_records_the_next_in_one_change() -> None:
    compiled = line("a", "b").compile()
    first = graph_machine.start(head(), compiled, now=NOW)
    assert first.step is not None
    call = first.step.calls[0]
    plan = graph_machine.start_node(first.head, (call,), {}, idempotent=False, now=NOW)
    assert isinstance(plan, RunNode) and not plan.rerun
    change = graph_machine.node_finished(
        first.head, compiled, call, state={"n": 1, "text": ""}, delta={"n": 1}, now=NOW
    )
    assert change.call_states == (("s1c0", CallState.DONE),)
    assert [json.loads(o.content) for o in change.observations] == [{"n": 1}]
    assert change.step is not None and change.step.calls[0].name == "b"
    assert change.head.result["state"]["n"] == 1 and change.head.step == 2
    last = graph_machine.node_finished(
        change.head, compiled, change.step.calls[0], state={"n": 2}, delta={"n": 2}, now=NOW
    )
    assert last.head.status is Status.COMPLETED and last.step is None
    assert json.loads(last.head.final_answer or "") == {"n": 2}


def test_interrupt_before_makes_the_state_a_call_awaiting_a_person() -> None:
    compiled = line("a", interrupt_before=True).compile()
    change = graph_machine.start(head(), compiled, now=NOW)
    assert change.head.status is Status.WAITING_APPROVAL and change.head.awaiting == ("s1c0",)
    assert change.step is not None
    call = change.step.calls[0]
    assert call.state is CallState.AWAITING_APPROVAL
    assert call.arguments == {"n": 0, "text": ""}  # what the approver sees and is bound to
    assert call.fingerprint == graph_machine.state_fingerprint("a", {"n": 0, "text": ""})


def test_an_approval_policy_asks_only_when_it_says_so() -> None:
    compiled = line("a", approval_policy=lambda s: "big" if s["n"] > 5 else None).compile()
    assert graph_machine.start(head(), compiled, now=NOW).head.status is Status.EXECUTING
    big = head(result={"state": {"n": 9, "text": ""}})
    change = graph_machine.start(big, compiled, now=NOW)
    assert change.head.status is Status.WAITING_APPROVAL
    assert change.step is not None and change.step.calls[0].approval_reason == "big"


def test_an_approval_policy_that_raised_asks_a_person_naming_the_node() -> None:
    def policy(state: Any) -> str | None:
        raise KeyError("budget")

    compiled = line("a", approval_policy=policy).compile()
    change = graph_machine.start(head(), compiled, now=NOW)
    assert change.head.status is Status.WAITING_APPROVAL
    assert change.step is not None and change.step.calls[0].approval_reason == (
        "the approval policy of node 'a' raised KeyError: 'budget', so a person decides"
    )


def decision(kind: DecisionKind, call_id: str = "s1c0", **kw: Any) -> Decision:
    return Decision(call_id=call_id, kind=kind, approver="ann", at=NOW, fingerprint="f" * 64, **kw)


def test_an_edit_is_a_state_patch_and_a_rejection_goes_to_on_reject() -> None:
    compiled = line("a", "b", interrupt_before=True).compile()
    waiting = graph_machine.start(head(), compiled, now=NOW)
    assert waiting.step is not None
    call = waiting.step.calls[0].model_copy(update={"state": CallState.EDITED})
    executing = waiting.head.model_copy(update={"status": Status.EXECUTING})
    edit = decision(DecisionKind.EDIT, arguments={"n": 7})
    plan = graph_machine.start_node(executing, (call,), {"s1c0": edit}, idempotent=False, now=NOW)
    assert isinstance(plan, RunNode) and plan.patch == {"n": 7}
    rejected = call.model_copy(update={"state": CallState.REJECTED})
    no = decision(DecisionKind.REJECT, feedback="no")
    plan = graph_machine.start_node(executing, (rejected,), {"s1c0": no}, idempotent=False, now=NOW)
    assert isinstance(plan, Decided)
    change = graph_machine.node_rejected(executing, compiled, rejected, no, now=NOW)
    assert change.head.status is Status.COMPLETED  # on_reject defaults to END
    assert (
        change.observations[0].is_error and "rejected by ann: no" in change.observations[0].content
    )
    silent = decision(DecisionKind.REJECT)
    change = graph_machine.node_rejected(executing, compiled, rejected, silent, now=NOW)
    said = change.observations[0].content
    assert said.startswith(f"rejected by ann, who gave no reason: {call.name} did not run")


def test_no_node_runs_once_the_deadline_has_passed() -> None:
    """A node approved after the deadline does not run: the session fails DEADLINE, as an
    agent's call does (it ran, and the session failed at the tick after)."""
    compiled = line("a", "b", interrupt_before=True).compile()
    waiting = graph_machine.start(head(), compiled, now=NOW)
    assert waiting.step is not None
    call = waiting.step.calls[0].model_copy(update={"state": CallState.APPROVED})
    executing = waiting.head.model_copy(update={"status": Status.EXECUTING})
    approved = {"s1c0": decision(DecisionKind.APPROVE)}
    deadline = timedelta(seconds=executing.budgets.deadline_s)
    before = graph_machine.start_node(
        executing, (call,), approved, idempotent=False, now=NOW + deadline / 2
    )
    assert isinstance(before, RunNode)
    late = graph_machine.start_node(
        executing, (call,), approved, idempotent=False, now=NOW + deadline
    )
    assert not isinstance(late, (RunNode, Decided))
    assert late.head.status is Status.FAILED and late.head.error_code is ErrorCode.DEADLINE
    assert late.call_states == (("s1c0", CallState.DONE),)
    assert "not run" in late.observations[0].content


def test_a_node_found_started_runs_again_only_if_idempotent() -> None:
    compiled = line("a").compile()
    first = graph_machine.start(head(), compiled, now=NOW)
    assert first.step is not None
    started = first.step.calls[0].model_copy(update={"state": CallState.STARTED})
    again = graph_machine.start_node(first.head, (started,), {}, idempotent=True, now=NOW)
    assert isinstance(again, RunNode) and again.rerun
    doubt = graph_machine.start_node(first.head, (started,), {}, idempotent=False, now=NOW)
    assert not isinstance(doubt, (RunNode, Decided))
    assert doubt.head.status is Status.WAITING_APPROVAL
    assert doubt.call_states == (("s1c0", CallState.IN_DOUBT),)


@pytest.mark.parametrize("ending", ["deadline", "cancel"])
def test_a_node_found_started_that_a_deadline_or_cancel_closes_reads_not_run_if_idempotent(
    ending: str,
) -> None:
    """Its tick was lost after the node's start (a worker gone); the next tick ends the
    session. An idempotent node would have run again from the start, its update never
    saved: it did not run, as an agent's idempotent call found started reads; only a node
    that may not run twice may or may not have run."""
    compiled = line("a").compile()
    first = graph_machine.start(head(), compiled, now=NOW)
    assert first.step is not None
    started = first.step.calls[0].model_copy(update={"state": CallState.STARTED})
    executing = first.head
    now = NOW
    if ending == "cancel":
        executing = executing.model_copy(update={"cancel_requested": True})
    else:
        now = NOW + timedelta(seconds=executing.budgets.deadline_s)
    why = "not run: session cancelled" if ending == "cancel" else "not run: the session failed"
    for idempotent, said in [
        (True, why),
        (False, why.replace("not run", "interrupted; it may or may not have run")),
    ]:
        change = graph_machine.start_node(executing, (started,), {}, idempotent=idempotent, now=now)
        assert not isinstance(change, (RunNode, Decided))
        assert change.head.status.terminal
        assert change.call_states == (("s1c0", CallState.DONE),)
        assert [o.content for o in change.observations] == [said]


def test_a_node_that_ran_and_raised_reads_failed_with_its_error_cut_to_a_bound() -> None:
    """A node that raised did run: its call is closed as failed with the error (a
    `tool_finished` error before the session's `failed`), not as not run, and the session
    fails with the same words; an error of any size is kept to ERROR_CHARS, its start (the
    node and the exception's type) and its end kept."""
    first = graph_machine.start(head(), line("a").compile(), now=NOW)
    assert first.step is not None
    call = first.step.calls[0].model_copy(update={"state": CallState.STARTED})
    why = "node 'a' raised LookupError: " + "the ledger is closed; " * 1_000 + "for good"
    change = graph_machine.node_failed(
        first.head, call, ErrorCode.INTERNAL, why, now=NOW, duration_ms=12.5
    )
    assert (change.head.status, change.head.error_code) == (Status.FAILED, ErrorCode.INTERNAL)
    message = change.head.error_message
    assert len(message) <= transitions.ERROR_CHARS + 100 < len(why)
    assert message.startswith("node 'a' raised LookupError: the ledger is closed")
    assert message.endswith("for good") and "characters cut from the middle" in message
    assert change.call_states == (("s1c0", CallState.DONE),)
    (observed,) = change.observations
    assert (observed.content, observed.is_error) == (f"failed: {message}", True)
    assert observed.duration_ms == 12.5
    kinds = [e.kind.value for e in change.events]
    assert kinds == ["tool_finished", "failed", "dead_lettered"]
    assert change.events[0].data["is_error"] is True


def test_a_branch_that_failed_closes_the_node_that_fanned_out_as_failed_naming_it() -> None:
    graph = Graph("g", "1", S, reducers={"n": add})
    graph.add_node("split", lambda s: fan_out("part", [{}]))
    graph.add_node("part", inc, branch=True)
    compiled = graph.add_edge(START, "split").add_edge("split", END).compile()
    first = graph_machine.start(head(), compiled, now=NOW)
    assert first.step is not None
    call = first.step.calls[0].model_copy(update={"state": CallState.STARTED})
    branch = head(
        id="g1-000",
        status=Status.FAILED,
        error_code=ErrorCode.INTERNAL,
        error_message="node 'part' raised KeyError: 'n'",
    )
    change = graph_machine.branches_joined(
        first.head, compiled, call, [branch], cost_usd=0.0, tokens=0, now=NOW
    )
    why = "branch g1-000 of node 'split' failed: INTERNAL: node 'part' raised KeyError: 'n'"
    assert (change.head.status, change.head.error_message) == (Status.FAILED, why)
    assert [o.content for o in change.observations] == [f"failed: {why}"]


def test_the_same_node_on_the_same_state_is_a_loop() -> None:
    graph = Graph("g", version="1", state=S)
    graph.add_node("a", lambda s: {}).add_edge(START, "a")
    graph.add_conditional_edges("a", router)
    compiled = graph.compile()
    change = graph_machine.start(head(), compiled, now=NOW)
    for _ in range(5):
        if change.head.status is not Status.EXECUTING:
            break
        assert change.step is not None
        change = graph_machine.node_finished(
            change.head,
            compiled,
            change.step.calls[0],
            state={"n": 0, "text": ""},
            delta={},
            now=NOW,
        )
    assert change.head.status is Status.FAILED and change.head.error_code is ErrorCode.LOOP
    assert change.head.step == 2  # the third run on the same state is not recorded
    assert "node 'a' would run on the same state 3 times" in change.head.error_message
    assert change.dead_letter


def test_the_step_budget_and_the_deadline_stop_a_graph() -> None:
    compiled = line("a", "b").compile()
    spent = head(step=3, budgets=Budgets(max_steps=3))
    change = graph_machine.start(spent, compiled, now=NOW)
    assert change.head.error_code is ErrorCode.BUDGET_STEPS
    late = graph_machine.start(head(), compiled, now=NOW + timedelta(days=1))
    assert late.head.error_code is ErrorCode.DEADLINE


def test_a_fork_recomputes_the_state_from_the_kept_updates_and_the_patch() -> None:
    compiled = line("a", "b").compile()
    first = graph_machine.start(head(), compiled, now=NOW)
    assert first.step is not None
    second = graph_machine.node_finished(
        first.head,
        compiled,
        first.step.calls[0],
        state={"n": 1, "text": ""},
        delta={"n": 1},
        now=NOW,
    )
    assert second.step is not None
    steps = (
        first.step.model_copy(
            update={"calls": (first.step.calls[0].model_copy(update={"state": CallState.DONE}),)}
        ),
        second.step,
    )
    parent = Session(
        head=second.head,
        steps=steps,
        observations=(Observation(call_id="s1c0", content='{"n": 1}', at=NOW),),
    )
    child = fork(
        parent, new_id="g2", from_step=1, patch=ForkPatch(state={"text": "hi"}), by="x", now=NOW
    )
    assert child.head.status is Status.READY
    assert child.head.result["state"] == {"n": 1, "text": "hi"}
    assert child.head.result["node"] == "a"
    nxt = graph_machine.start(child.head, compiled, now=NOW)
    assert nxt.step is not None and nxt.step.calls[0].name == "b" and nxt.head.step == 2


def test_a_graph_fork_s_token_budget_counts_no_prompt_of_its_last_node() -> None:
    """A graph fork was refused a budget its kept node runs fit ("the next model call's
    prompt is estimated at 500 more tokens"), their last run's usage taken for a prompt:
    a node builds its own, which no kept step holds."""
    compiled = line("a", "b").compile()
    first = graph_machine.start(head(), compiled, now=NOW)
    assert first.step is not None
    ran = first.step.model_copy(
        update={
            "calls": (first.step.calls[0].model_copy(update={"state": CallState.DONE}),),
            "usage": Usage(prompt_tokens=400, completion_tokens=100),
        }
    )
    parent = Session(
        head=first.head.model_copy(update={"status": Status.FAILED, "tokens": 500}),
        steps=(ran,),
        observations=(Observation(call_id="s1c0", content='{"n": 1}', at=NOW),),
    )
    patch = ForkPatch(budgets={"max_tokens": 501})
    child = fork(parent, new_id="g2", from_step=1, patch=patch, by="x", now=NOW)
    assert child.head.tokens == 500 and child.head.budgets.max_tokens == 501


def test_a_proposed_update_is_a_call_and_a_fork_before_it_runs_the_node_again() -> None:
    graph = Graph("g", version="1", state=S)
    graph.add_node("a", inc, approve_update=lambda u: "big" if u["n"] > 5 else None)
    graph.add_edge(START, "a").add_edge("a", END)
    compiled = graph.compile()
    with pytest.raises(InvalidGraph, match="not a usable node name"):
        graph.add_node("b#update", inc)
    first = graph_machine.start(head(), compiled, now=NOW)
    assert first.step is not None
    call = first.step.calls[0]
    change = graph_machine.update_proposed(first.head, call, delta={"n": 9}, reason="big", now=NOW)
    assert change.head.status is Status.WAITING_APPROVAL and change.head.awaiting == ("s2c0",)
    assert change.step is not None
    proposal = change.step.calls[0]
    assert (proposal.name, proposal.arguments, proposal.approval_reason) == (
        "a#update",
        {"n": 9},
        "big",
    )
    assert graph_machine.is_proposal(proposal) and compiled.node(proposal.name).name == "a"
    assert change.head.result.get("state", {}).get("n", 0) == 0
    done = first.step.model_copy(
        update={"calls": (call.model_copy(update={"state": CallState.DONE}),)}
    )
    parent = Session(head=change.head, steps=(done, change.step), observations=change.observations)
    child = fork(parent, new_id="g2", from_step=1, patch=ForkPatch(), by="x", now=NOW)
    assert child.head.status is Status.EXECUTING  # the node runs (and proposes) again
    assert child.steps[0].calls[0].state is CallState.PENDING


def test_branches_merge_through_the_reducers_in_their_order() -> None:
    class Sums(BaseModel):
        seen: list[int] = []
        total: int = 0
        last: str = ""

    def split(state: Sums) -> object:
        return fan_out("part", [{"last": "a"}, {"last": "b"}])

    graph = Graph("sums", "1", Sums, reducers={"seen": append, "total": add})
    graph.add_node("split", split).add_node("part", lambda s: {}, branch=True)
    compiled = graph.add_edge(START, "split").add_edge("split", END).compile()

    state, delta = compiled.merge(
        {"seen": [0], "total": 1, "last": ""},
        [{"seen": [1], "total": 2, "last": "a"}, {"seen": 2, "total": 3, "last": "b"}],
    )

    assert state == {"seen": [0, 1, 2], "total": 6, "last": "b"}
    assert delta == state
    assert split(Sums()) == fan_out("part", [{"last": "a"}, {"last": "b"}])


def test_a_reducer_of_a_field_the_state_lacks_is_refused() -> None:
    class One(BaseModel):
        n: int = 0

    graph = Graph("one", "1", One, reducers={"m": add})
    graph.add_node("a", lambda s: {}).add_edge(START, "a").add_edge("a", END)
    with pytest.raises(InvalidGraph, match="reducer is declared for 'm'"):
        graph.compile()
