"""Forking a session from step K with a declared patch (docs/DESIGN.md section 6)."""

from __future__ import annotations

from typing import Any

import pytest
from tickwork.fsm.budgets import NextCall, exhausted_budget
from tickwork.fsm.errors import ForkOutOfRange, InvalidBudget, InvalidInput
from tickwork.fsm.forks import (
    MAX_INSTRUCTION_CHARS,
    ForkPatch,
    KeptUsage,
    TokenPrice,
    fork,
    kept_usage,
)
from tickwork.fsm.machine import CallModel, start_think
from tickwork.fsm.transcript import messages
from tickwork.fsm.values import CallState, EventKind, Session, Status, Step, StepKind


def forked(build: Any, parent: Session, from_step: int, **patch: Any) -> Session:
    return fork(
        parent,
        new_id="fork-1",
        from_step=from_step,
        patch=ForkPatch(**patch),
        by="alice",
        now=build.at(1000),
    )


def transcript(session: Session) -> list[dict[str, Any]]:
    return messages(session.head, session.steps, {o.call_id: o for o in session.observations})


@pytest.fixture(scope="module")
def parent(build: Any) -> Session:
    return build.failed_session()


def test_the_parent_is_what_the_tests_expect(parent: Session) -> None:
    assert parent.head.status is Status.FAILED
    assert [s.step for s in parent.steps] == [1, 2, 3]
    assert parent.head.step == 3


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_fork_keeps_steps_one_to_k(build: Any, parent: Session, k: int) -> None:
    child = forked(build, parent, k, budgets={"max_steps": 10})
    assert child.steps == parent.steps[:k]
    assert child.head.step == k
    kept = {c.call_id for s in child.steps for c in s.calls}
    assert {o.call_id for o in child.observations} == kept
    assert all(child.observation(i) == parent.observation(i) for i in kept)
    assert {d.call_id for d in child.decisions} == kept & {"s2c0"}
    assert child.head.status is Status.READY


def test_patched_tool_output_replaces_the_observation(build: Any, parent: Session) -> None:
    child = forked(build, parent, 2, tool_outputs={"s1c0": "def f(): return 2"})
    observation = child.observation("s1c0")
    assert observation is not None
    assert (observation.content, observation.is_error) == ("def f(): return 2", False)
    assert child.observation("s2c0") == parent.observation("s2c0")
    tool = next(m for m in transcript(child) if m.get("tool_call_id") == "s1c0")
    assert tool["content"] == "def f(): return 2"


@pytest.mark.parametrize("call_id", ["s3c0", "nope"])
def test_patching_a_call_outside_the_kept_steps_is_refused(
    build: Any, parent: Session, call_id: str
) -> None:
    with pytest.raises(InvalidInput, match=call_id):
        forked(build, parent, 2, tool_outputs={call_id: "x"})


def test_a_refused_output_patch_says_which_calls_may_be_patched(
    build: Any, parent: Session
) -> None:
    with pytest.raises(InvalidInput) as later:
        forked(build, parent, 1, tool_outputs={"s2c0": "x"})
    message = str(later.value)
    # the call is a later step's: the step to fork from to patch it
    assert "s2c0 is a call of step 2: fork from step 2 or later (`from_step` 2)" in message
    assert "steps 1..1" not in message and "kept: step 1 (s1c0)" in message
    with pytest.raises(InvalidInput) as unknown:
        forked(build, parent, 2, tool_outputs={"nope": "x"})
    assert "nope is no call of session" in str(unknown.value)
    assert "kept: steps 1..2 (s1c0, s2c0)" in str(unknown.value)


@pytest.mark.parametrize("k", [-1, 4, 100])
def test_fork_step_out_of_range_names_the_valid_range(build: Any, parent: Session, k: int) -> None:
    with pytest.raises(ForkOutOfRange) as raised:
        forked(build, parent, k)
    message = str(raised.value)
    assert "between 0 and 3" in message
    assert str(k) in message and parent.head.id in message
    assert isinstance(raised.value, InvalidInput)


def test_system_prompt_and_instruction_appear_in_the_transcript(
    build: Any, parent: Session
) -> None:
    child = forked(
        build,
        parent,
        1,
        system_prompt="You are careful.",
        append_instruction="Run the tests before writing.",
    )
    before = transcript(child)
    assert before[0] == {"role": "system", "content": "You are careful."}
    assert before[-1] == {"role": "user", "content": "Run the tests before writing."}
    assert before[-2]["tool_call_id"] == "s1c0"
    assert "Run the tests before writing." not in str(transcript(parent))

    store = build.store(child.head)
    store.steps, store.calls = (
        list(child.steps),
        {c.call_id: c for s in child.steps for c in s.calls},
    )
    store.observations = {o.call_id: [o] for o in child.observations}
    build.drive(store, build.reply(("run_tests", {})), [("2 passed", False)], at_s=1010)
    after = transcript(store.session())
    at = after.index({"role": "user", "content": "Run the tests before writing."})
    assert after[at - 1]["tool_call_id"] == "s1c0"
    assert after[at + 1]["role"] == "assistant"
    assert after[at + 1]["tool_calls"][0]["id"] == "s2c0"


def test_raised_budgets_are_applied(build: Any, parent: Session) -> None:
    child = forked(build, parent, 3, budgets={"max_steps": 10})
    assert child.head.budgets == parent.head.budgets.model_copy(update={"max_steps": 10})
    assert (
        start_think(parent.head.model_copy(update={"status": Status.READY}), now=build.at(1000))
        != CallModel()
    )
    assert start_think(child.head, now=build.at(1000)) == CallModel()


@pytest.mark.parametrize(
    "budgets", [{"max_steps": 0}, {"max_cost_usd": float("nan")}, {"max_stepz": 3}]
)
def test_invalid_budget_patch_is_refused(
    build: Any, parent: Session, budgets: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInput, match=next(iter(budgets))):
        forked(build, parent, 3, budgets=budgets)


@pytest.mark.parametrize(
    ("budgets", "said"),
    [
        (
            {"max_steps": 2},
            "count against `max_steps`, which is 2; give `max_steps` above 2",
        ),
        (
            {"max_tokens": 330},
            "used 330 tokens, which count against `max_tokens` (330), and the next model "
            "call's prompt is estimated at 220 more tokens (the transcript the fork sends it); "
            "give `max_tokens` above 550",
        ),
        (
            {"max_cost_usd": 0.01},
            "spent $0.02, which counts against `max_cost_usd` ($0.01); "
            "give `max_cost_usd` above 0.02",
        ),
        ({}, "count against `max_steps`, which is 3"),  # the parent's, used up by step 3
    ],
)
def test_a_budget_the_kept_steps_used_up_is_refused(
    build: Any, parent: Session, budgets: dict[str, Any], said: str
) -> None:
    """QA4 #3: a fork counts its kept steps against its budgets, so one they used up made
    a fork that failed at once (and closed the dead letter): it is refused, naming both."""
    k = 3 if not budgets else 2
    with pytest.raises(InvalidBudget) as raised:
        forked(build, parent, k, budgets=budgets)
    assert f"session {parent.head.id}: steps 1..{k} are kept and " in str(raised.value)
    assert said in str(raised.value)


@pytest.mark.parametrize(
    "budgets", [{"max_steps": 3}, {"max_tokens": 551}, {"max_cost_usd": 0.021}, {"max_cost_usd": 0}]
)
def test_a_budget_above_what_the_kept_steps_used_is_taken(
    build: Any, parent: Session, budgets: dict[str, Any]
) -> None:
    assert forked(build, parent, 2, budgets=budgets).head.budgets.model_dump().items() >= (
        budgets.items()
    )


@pytest.mark.parametrize("max_tokens", [331, 550])
def test_a_token_budget_that_leaves_the_next_prompt_no_room_is_refused(
    build: Any, parent: Session, max_tokens: int
) -> None:
    """A fork whose kept steps fit its `max_tokens`, but not with the next call's prompt
    (the transcript the last kept reply ends), failed at once with BUDGET_TOKENS."""
    head = parent.head.model_copy(
        update={"status": Status.READY, "step": 2, "tokens": 330, "cost_usd": 0.02}
    )
    ahead = NextCall(tokens=parent.steps[1].usage.total)
    tight = head.model_copy(
        update={"budgets": head.budgets.model_copy(update={"max_tokens": max_tokens})}
    )
    assert exhausted_budget(tight, now=build.at(0), next_call=ahead) is not None
    with pytest.raises(InvalidBudget, match="give `max_tokens` above 550"):
        forked(build, parent, 2, budgets={"max_tokens": max_tokens})
    child = forked(build, parent, 2, budgets={"max_tokens": 551})
    assert exhausted_budget(child.head, now=child.head.created_at, next_call=ahead) is None


def test_a_cost_budget_that_leaves_the_next_prompt_no_room_is_refused(
    build: Any, parent: Session
) -> None:
    """As for tokens: the next prompt at the model's price counts against `max_cost_usd`."""
    price = TokenPrice(prompt_usd=1e-4, completion_usd=2e-4)  # 220 tokens: $0.022
    with pytest.raises(InvalidBudget) as raised:
        fork(
            parent,
            new_id="fork-1",
            from_step=2,
            patch=ForkPatch(budgets={"max_cost_usd": 0.03}),
            by="alice",
            now=build.at(1000),
            price=price,
        )
    assert "the next model call's prompt is estimated at $0.022 more" in str(raised.value)
    assert "give `max_cost_usd` above 0.0422" in str(raised.value)
    child = fork(
        parent,
        new_id="fork-1",
        from_step=2,
        patch=ForkPatch(budgets={"max_cost_usd": 0.0423}),
        by="alice",
        now=build.at(1000),
        price=price,
    )
    ahead = NextCall(tokens=220, cost_usd=0.022, usd_per_completion_token=2e-4)
    assert exhausted_budget(child.head, now=child.head.created_at, next_call=ahead) is None


def test_counters_are_recomputed(build: Any, parent: Session) -> None:
    child = forked(build, parent, 2)
    head = child.head
    assert head.tokens == 110 + 220
    assert head.cost_usd == pytest.approx(0.02)
    assert (head.step, head.loop_interventions, head.model_attempts) == (2, 0, 0)
    assert (head.error_code, head.error_message, head.final_answer) == (None, "", None)
    assert (head.version, head.created_at, head.updated_at) == (0, build.at(1000), build.at(1000))
    assert not head.cancel_requested
    assert head.id == "fork-1"
    assert (head.kind, head.model, head.input) == (
        parent.head.kind,
        parent.head.model,
        parent.head.input,
    )


def test_parent_is_unchanged(build: Any, parent: Session) -> None:
    before = parent.model_dump()
    forked(
        build,
        parent,
        1,
        system_prompt="x",
        append_instruction="y",
        tool_outputs={"s1c0": "z"},
        budgets={"max_steps": 9},
    )
    assert parent.model_dump() == before


def test_fork_records_its_lineage(build: Any, parent: Session) -> None:
    child = forked(
        build, parent, 2, append_instruction="try again", tool_outputs={"s1c0": "patched"}
    )
    assert (child.head.parent_id, child.head.fork_step) == (parent.head.id, 2)
    (event,) = child.events
    assert event.kind is EventKind.FORKED
    assert event.at == build.at(1000)
    assert event.data == {
        "parent_id": parent.head.id,
        "from_step": 2,
        "by": "alice",
        "patch": {"append_instruction": "try again", "tool_outputs": {"s1c0": "patched"}},
        # what the kept steps cost the parent: the fork's cost starts there
        "inherited_cost_usd": child.head.cost_usd,
    }
    assert child.head.cost_usd == sum(s.cost_usd for s in parent.steps[:2])


def test_kept_usage_is_what_the_fork_counts(build: Any, parent: Session) -> None:
    child = forked(build, parent, 2, budgets={"max_steps": 10})
    usage = kept_usage(parent.steps[:2])
    assert usage == KeptUsage(
        steps=2,
        tokens=sum(s.usage.total for s in parent.steps[:2]),
        cost_usd=sum(s.cost_usd for s in parent.steps[:2]),
    )
    assert (child.head.step, child.head.tokens, child.head.cost_usd) == (
        usage.steps,
        usage.tokens,
        usage.cost_usd,
    )
    assert kept_usage(()) == KeptUsage(steps=0, tokens=0, cost_usd=0.0)


def test_unfinished_calls_of_the_kept_steps_run_again(build: Any) -> None:
    store = build.store()
    build.drive(store, build.reply(("read_file", {"path": "a.py"})), [("x", False)], at_s=10)
    build.drive(
        store,
        build.reply(("write_file", {"path": "a.py", "text": "y"}), ("read_file", {"path": "b.py"})),
        at_s=20,
        decide_all=False,
    )
    assert store.head.status is Status.WAITING_APPROVAL
    child = forked(build, store.session(), 2)
    assert child.head.status is Status.WAITING_APPROVAL
    assert child.head.awaiting == ("s2c0",)
    states = {c.call_id: c.state for c in child.steps[1].calls}
    assert states == {"s2c0": CallState.AWAITING_APPROVAL, "s2c1": CallState.PENDING}

    patched = forked(build, store.session(), 2, tool_outputs={"s2c0": "skipped by hand"})
    assert patched.head.status is Status.EXECUTING
    assert patched.head.awaiting == ()


def compacted(parent: Session, build: Any) -> Session:
    """The parent's steps 1 and 2, then a compaction of step 1 (at step 3), then one of
    steps 1-2 (at step 4)."""
    summaries = tuple(
        Step(
            step=at,
            thought=f"summary of 1-{through}",
            kind=StepKind.COMPACTION,
            compacted_through=through,
            masked_through=through,
            at=build.at(at),
        )
        for at, through in ((3, 1), (4, 2))
    )
    head = parent.head.model_copy(update={"step": 4})
    kept = {"s1c0", "s2c0"}
    return parent.model_copy(
        update={
            "head": head,
            "steps": (*parent.steps[:2], *summaries),
            "observations": tuple(o for o in parent.observations if o.call_id in kept),
        }
    )


def test_an_output_a_kept_compaction_summarises_is_refused(build: Any, parent: Session) -> None:
    """QA4 #8: the summary stands in the prompt for the steps it covers, so a patched
    output there never reached the model; the refusal names the summary and the way out."""
    session = compacted(parent, build)
    raised = {"max_steps": 10}
    with pytest.raises(InvalidInput) as at_3:
        forked(build, session, 3, tool_outputs={"s1c0": "new", "s2c0": "x"}, budgets=raised)
    assert str(at_3.value) == (
        f"session {parent.head.id}: cannot patch the output of s1c0: the model reads it only "
        "through the summary of steps 1-1 made at step 3, which the fork keeps, so it would "
        "never see the new output. Fork from before step 3 (`from_step` 2 or less), or say "
        "what it should know with `append_instruction`"
    )
    with pytest.raises(InvalidInput) as at_4:
        forked(build, session, 4, tool_outputs={"s2c0": "x", "s1c0": "new"}, budgets=raised)
    said = str(at_4.value)
    assert "cannot patch the output of s1c0, s2c0: " in said
    assert "of steps 1-1 made at step 3 (and in the summary of steps 1-2 made at step 4)" in said
    assert "(`from_step` 2 or less)" in said

    after_the_cut = forked(build, session, 3, tool_outputs={"s2c0": "x"}, budgets=raised)
    assert after_the_cut.observation("s2c0").content == "x"  # type: ignore[union-attr]
    before = forked(build, session, 2, tool_outputs={"s1c0": "new"})
    assert before.observation("s1c0").content == "new"  # type: ignore[union-attr]


@pytest.mark.parametrize("text", ["", "  \n"])
def test_an_empty_instruction_is_refused(build: Any, parent: Session, text: str) -> None:
    """QA4 #15: it was recorded in the patch, and nothing was added."""
    with pytest.raises(InvalidInput, match=r"^`append_instruction` is empty"):
        forked(build, parent, 2, append_instruction=text)


@pytest.mark.parametrize("text", ["", " \t\n"])
def test_an_empty_system_prompt_is_refused(build: Any, parent: Session, text: str) -> None:
    """The fork ran with no system prompt at all (the model told nothing of its role)."""
    with pytest.raises(InvalidInput, match=r"^`system_prompt` is empty"):
        forked(build, parent, 2, system_prompt=text)


def test_an_instruction_past_what_the_api_takes_is_refused(build: Any, parent: Session) -> None:
    """The API refused it (MAX_INSTRUCTION_CHARS); a fork made by the CLI or the Python
    client took any length."""
    with pytest.raises(InvalidInput, match=r"is 20,001 characters long; at most 20,000 are"):
        forked(build, parent, 2, append_instruction="i" * (MAX_INSTRUCTION_CHARS + 1))
    whole = forked(build, parent, 2, append_instruction="i" * MAX_INSTRUCTION_CHARS)
    assert len(whole.head.config["instructions"][-1]["text"]) == MAX_INSTRUCTION_CHARS


def test_a_session_without_steps_is_forked_from_step_zero_and_told_so(build: Any) -> None:
    # before: "has steps 1..0; choose --from-step between 0 and 0", and "not a call of
    # steps 1..0", for a session that failed before its first step (a model error at once)
    empty = Session(head=build.head(Status.FAILED))
    with pytest.raises(ForkOutOfRange) as raised:
        forked(build, empty, 2)
    message = str(raised.value)
    assert "has no steps" in message and "(`from_step` 0)" in message and "not 2" in message
    assert "1..0" not in message and "between 0 and 0" not in message
    with pytest.raises(InvalidInput) as unknown:
        forked(build, empty, 0, tool_outputs={"s1c0": "x"})
    assert "s1c0" in str(unknown.value) and "1..0" not in str(unknown.value)
    assert forked(build, empty, 0).head.step == 0


def test_a_fork_onto_another_model_keeps_nothing_the_original_s_model_was_given(
    build: Any, parent: Session
) -> None:
    from tickwork.fsm.context import STATED_WINDOW, Policy, policy_of

    priced = parent.model_copy(
        update={
            "head": parent.head.model_copy(
                update={
                    "config": {
                        **parent.head.config,
                        "price": {"prompt": 1.0, "completion": 2.0},
                        "context": Policy(window=200_000).to_config(),
                    },
                    "result": {STATED_WINDOW: 50_000},
                }
            )
        }
    )
    same = forked(build, priced, 1, budgets={"max_steps": 10})
    assert same.head.model == parent.head.model and same.head.config["price"]["prompt"] == 1.0
    assert (policy := policy_of(same.head.config)) is not None and policy.window == 50_000

    other = forked(build, priced, 1, budgets={"max_steps": 10}, model="openai:other")
    assert other.head.model == "openai:other" and "price" not in other.head.config
    # the window the original's model stated is not the new one's: the policy's stands
    assert (policy := policy_of(other.head.config)) is not None and policy.window == 200_000
    assert other.events[0].data["patch"]["model"] == "openai:other"
    assert priced.head.model == parent.head.model  # the original is never changed


@pytest.mark.parametrize("k", [0, 1])
def test_a_fork_of_a_fork_from_before_its_instruction_drops_the_instruction(
    build: Any, parent: Session, k: int
) -> None:
    # the instruction came after step 2 of the first fork: a fork from step K < 2 keeps
    # none of that history, so its own step 2 must not get it (nor may its patch hide it)
    first = forked(build, parent, 2, append_instruction="Run the tests before writing.")
    second = forked(build, first, k)
    assert second.head.config.get("instructions", []) == []
    assert "Run the tests before writing." not in str(transcript(second))
    kept = forked(build, first, 2, append_instruction="And read the diff.")
    assert [i["text"] for i in kept.head.config["instructions"]] == [
        "Run the tests before writing.",
        "And read the diff.",
    ]


def test_a_fork_s_loop_interventions_count_afresh(build: Any, parent: Session) -> None:
    # the kept steps' repeats are still read by loop detection, but the interventions the
    # parent used are not the fork's: it gets max_loop_interventions of its own (docs/GUIDE.md)
    looped = parent.model_copy(
        update={"head": parent.head.model_copy(update={"loop_interventions": 2})}
    )
    child = forked(build, looped, 3, budgets={"max_steps": 10})
    assert child.head.loop_interventions == 0
    assert child.steps == parent.steps


def test_a_cost_budget_below_a_cent_is_said_as_one_to_give(build: Any, parent: Session) -> None:
    """A cheap model's kept steps (a few millionths of a dollar) were refused with "give
    `max_cost_usd` above 0.0000", no budget a person can give: the amount is written to
    its significant digits, rounded up, and a budget above it is taken."""
    cheap = parent.model_copy(
        update={"steps": tuple(s.model_copy(update={"cost_usd": 0.000015}) for s in parent.steps)}
    )
    with pytest.raises(InvalidBudget) as raised:
        forked(build, cheap, 2, budgets={"max_cost_usd": 0.00002})
    assert "give `max_cost_usd` above 0.00003" in str(raised.value)
    assert forked(build, cheap, 2, budgets={"max_cost_usd": 0.000031}).head.step == 2


def tokens_of(messages: Any) -> int:
    """Four characters a token, as the runtime's estimate counts a prompt."""
    return sum(len(str(m.get("content") or "")) for m in messages) // 4


def estimated(build: Any, parent: Session, from_step: int, **patch: Any) -> Session:
    # each reply's prompt as the server counted it: the estimate is not scaled (`scale`)
    steps = tuple(
        s.model_copy(update={"prompt_estimate": s.usage.prompt_tokens}) for s in parent.steps
    )
    return fork(
        parent.model_copy(update={"steps": steps}),
        new_id="fork-1",
        from_step=from_step,
        patch=ForkPatch(**patch),
        by="alice",
        now=build.at(1000),
        estimate=tokens_of,
    )


def _sent(child: Session) -> int:
    return tokens_of(transcript(child))


@pytest.mark.parametrize(
    "patch",
    [
        {"append_instruction": "Run the tests first. " * 200},
        {"tool_outputs": {"s2c0": "x" * 4000}},
        {"system_prompt": "You repair code. " * 250},
        {"model": "openai:other", "tool_outputs": {"s2c0": "x" * 4000}},
    ],
    ids=["instruction", "output", "system-prompt", "model"],
)
def test_the_next_prompt_counts_what_the_fork_sends(
    build: Any, parent: Session, patch: dict[str, Any]
) -> None:
    """The next prompt was estimated at what the last kept reply read and wrote (and at 0
    on another model): an appended instruction, a hand-written output or a new system
    prompt passed it, and the fork failed BUDGET_TOKENS at its first THINK. It counts the
    transcript the fork sends, as the THINK does."""
    roomy = estimated(build, parent, 2, budgets={"max_tokens": 100_000}, **patch)
    ahead = _sent(roomy)
    assert ahead > 220 + 500  # past the last reply's usage, what was counted before
    budget = 330 + ahead
    tight = {"max_tokens": budget}
    assert exhausted_budget(
        roomy.head.model_copy(update={"budgets": roomy.head.budgets.model_copy(update=tight)}),
        now=build.at(1000),
        next_call=NextCall(tokens=ahead),
    )
    with pytest.raises(InvalidBudget) as raised:
        estimated(build, parent, 2, budgets=tight, **patch)
    assert f"estimated at {ahead:,} more tokens" in str(raised.value)
    assert f"give `max_tokens` above {budget:,}" in str(raised.value)
    assert estimated(build, parent, 2, budgets={"max_tokens": budget + 1}, **patch)


def test_the_next_prompt_after_a_kept_compaction_is_its_summary_and_the_rest(
    build: Any, parent: Session
) -> None:
    """After a compaction the next prompt was estimated at 0: a fork kept a long summary
    within a budget it could not send."""
    long = compacted(parent, build)
    last = long.steps[-1].model_copy(update={"thought": "what was done: " * 300})
    long = long.model_copy(update={"steps": (*long.steps[:-1], last)})
    roomy = estimated(build, long, 4, budgets={"max_steps": 10, "max_tokens": 100_000})
    ahead = _sent(roomy)
    assert ahead > 1000
    with pytest.raises(InvalidBudget, match=f"give `max_tokens` above {330 + ahead:,}"):
        estimated(build, long, 4, budgets={"max_steps": 10, "max_tokens": 330 + ahead})


def test_a_cost_refusal_below_a_cent_says_the_amounts_in_full(build: Any, parent: Session) -> None:
    """It said "spent $0.0000" and "estimated at $0.0000 more" for a cheap model's steps,
    beside a budget to give said in full."""
    steps = tuple(s.model_copy(update={"cost_usd": 0.000003}) for s in parent.steps)
    cheap = parent.model_copy(update={"steps": steps})
    with pytest.raises(InvalidBudget) as raised:
        fork(
            cheap,
            new_id="fork-1",
            from_step=2,
            patch=ForkPatch(budgets={"max_cost_usd": 0.000005}),
            by="alice",
            now=build.at(1000),
            price=TokenPrice(prompt_usd=1e-8, completion_usd=1e-8),
        )
    said = str(raised.value)
    assert "spent $0.000006, " in said
    assert "estimated at $0.0000022 more" in said
    assert "give `max_cost_usd` above 0.0000083" in said
    assert "$0.0000 " not in said and "$0.0000," not in said
