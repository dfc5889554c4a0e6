"""The context a model sees (fsm/context.py): masking, compaction cuts, purity."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tickwork.fsm import context
from tickwork.fsm.context import Plan, Policy, plan
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Head, Observation, Step, StepKind, ToolCall

from .conftest import Build


def estimate(messages: Sequence[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages) // 4


@dataclass
class Run:
    head: Head
    steps: list[Step]
    observations: dict[str, Observation]
    #: (step number the plan made, the plan)
    plans: list[tuple[int, Plan]]


def simulate(
    build: Build,
    sizes: Sequence[int],
    *,
    window: int,
    keep: int = 3,
    summary: int = 0,
    span: int = context.DEFAULT_SPAN,
) -> Run:
    """A session whose model reads one observation of each size in turn, planned as a
    worker would (each summary `summary` characters longer than its heading); it stops
    where no prompt fits."""
    policy = Policy(window=window, keep=keep, span=span).to_config()
    head = build.head(config={"system_prompt": "sys", "user_prompt": "task", "context": policy})
    steps: list[Step] = []
    seen: dict[str, Observation] = {}
    plans: list[tuple[int, Plan]] = []
    todo = list(sizes)
    while todo:
        at = head.model_copy(update={"step": len(steps)})
        made = plan(at, steps, seen, estimate=estimate)
        number = len(steps) + 1
        if made.too_long is not None:
            break
        plans.append((number, made))
        if made.compact_through is not None:
            steps.append(
                Step(
                    step=number,
                    thought=f"summary of 1-{made.compact_through}" + "s" * summary,
                    kind=StepKind.COMPACTION,
                    compacted_through=made.compact_through,
                    masked_through=made.compact_through,
                    at=build.at(number),
                )
            )
            continue
        call = ToolCall(
            call_id=f"s{number}c0",
            step=number,
            index=0,
            name="read",
            arguments={"n": number},
            raw_arguments=json.dumps({"n": number}),
            fingerprint=str(number),
        )
        steps.append(
            Step(
                step=number,
                thought=f"reading {number}",
                calls=(call,),
                masked_through=made.view.masked,
                at=build.at(number),
            )
        )
        seen[call.call_id] = Observation(
            call_id=call.call_id, content="x" * todo.pop(0), at=build.at(number)
        )
    return Run(head, steps, seen, plans)


sizes = st.lists(st.integers(min_value=0, max_value=12_000), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(sizes=sizes, window=st.integers(min_value=3_000, max_value=20_000))
def test_the_prompt_at_step_k_is_a_function_of_the_steps_before_it(
    build: Build, sizes: list[int], window: int
) -> None:
    run = simulate(build, sizes, window=window)
    for number, made in run.plans:
        before = run.steps[: number - 1]
        ids = {c.call_id for s in before for c in s.calls}
        head = run.head.model_copy(update={"step": number - 1})
        again = plan(
            head, before, {k: v for k, v in run.observations.items() if k in ids}, estimate=estimate
        )
        assert again == made


@settings(max_examples=60, deadline=None)
@given(sizes=sizes, window=st.integers(min_value=3_000, max_value=20_000))
def test_prompts_only_grow_at_their_end_until_the_view_moves_and_fit_the_window(
    build: Build, sizes: list[int], window: int
) -> None:
    run = simulate(build, sizes, window=window)
    replies = [(n, p) for n, p in run.plans if p.compact_through is None]
    for (_, first), (_, then) in itertools.pairwise(replies):
        assert then.view.through >= first.view.through
        assert then.view.masked >= first.view.masked, "once masked, masked until compacted"
        if then.view == first.view:
            assert then.messages[: len(first.messages)] == first.messages
    for _, made in replies:
        assert made.tokens <= window


def test_old_observations_become_stubs_naming_the_call_and_recall(build: Build) -> None:
    run = simulate(build, [8_000] * 6, window=10_000, keep=2)
    last = run.plans[-1][1]
    assert last.compact_through is None and last.view.masked >= 1
    tools = [m["content"] for m in last.messages if m["role"] == "tool"]
    assert (
        tools[0] == '[observation of call s1c0 (read) elided: 8000 bytes; recall("s1c0") to see it]'
    )
    assert tools[-2:] == ["x" * 8_000] * 2, "the newest two stay whole"


def test_a_compaction_cuts_before_the_kept_observations_and_replaces_them_by_its_summary(
    build: Build,
) -> None:
    run = simulate(build, [2_000] * 60, window=2_000, keep=2)
    compactions = [s for s in run.steps if s.kind is StepKind.COMPACTION]
    assert compactions
    first = compactions[0]
    asked = dict(run.plans)[first.step]
    assert asked.messages[-1]["content"] == context.SUMMARISE.format(
        through=first.compacted_through
    )
    after = next(p for n, p in run.plans if n > first.step and p.compact_through is None)
    contents = [m["content"] for m in after.messages]
    assert contents[:3] == [
        "sys",
        "task",
        f"Summary of steps 1-{first.compacted_through} (compacted):\n{first.thought}",
    ]
    shown = [m["tool_calls"][0]["id"] for m in after.messages if m.get("tool_calls")]
    assert all(int(i[1:].split("c")[0]) > first.compacted_through for i in shown)
    assert len(shown) >= 2, "the kept observations' steps stay"


def test_forced_compaction_keeps_less_each_time_then_gives_up(build: Build) -> None:
    run = simulate(build, [400] * 5, window=100_000)
    head = run.head.model_copy(update={"step": len(run.steps)})
    forced = plan(head, run.steps, run.observations, estimate=estimate, force=True)
    assert forced.compact_through == 2, "first the steps before the last three observations"
    steps = [
        *run.steps,
        Step(
            step=6,
            thought="s",
            kind=StepKind.COMPACTION,
            compacted_through=2,
            masked_through=2,
            at=build.at(6),
        ),
    ]
    head = head.model_copy(update={"step": 6})
    again = plan(head, steps, run.observations, estimate=estimate, force=True)
    assert again.compact_through == 5, "then every step"
    steps.append(
        Step(
            step=7,
            thought="s",
            kind=StepKind.COMPACTION,
            compacted_through=5,
            masked_through=5,
            at=build.at(7),
        )
    )
    head = head.model_copy(update={"step": 7})
    last = plan(head, steps, run.observations, estimate=estimate, force=True)
    assert last.too_long is not None and "context window" in last.too_long


def test_no_policy_sends_everything(build: Build) -> None:
    run = simulate(build, [100] * 3, window=100_000)
    head = run.head.model_copy(update={"config": {"user_prompt": "task"}, "step": 3})
    made = plan(head, run.steps, run.observations, estimate=estimate)
    assert made.view == context.View() and made.compact_through is None
    assert [m["content"] for m in made.messages if m["role"] == "tool"] == ["x" * 100] * 3


@pytest.mark.parametrize("value", [0, 100, -5, 10**9, 1.5, "128000", True, None])
def test_a_context_window_out_of_bounds_is_refused_by_name(value: object) -> None:
    with pytest.raises(InvalidInput, match="context_window"):
        context.check_window(value)


def test_needed_from_keeps_the_compaction_and_its_kept_steps(build: Build) -> None:
    run = simulate(build, [2_000] * 60, window=2_000, keep=2)
    last = [s for s in run.steps if s.kind is StepKind.COMPACTION][-1]
    assert context.needed_from(run.steps) == min(last.compacted_through + 1, last.step)
    trimmed = [s for s in run.steps if s.step >= context.needed_from(run.steps)]
    head = run.head.model_copy(update={"step": len(run.steps)})
    assert plan(head, trimmed, run.observations, estimate=estimate) == plan(
        head, run.steps, run.observations, estimate=estimate
    )


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=2_000), min_size=1, max_size=80),
    window=st.integers(min_value=4_000, max_value=20_000),
)
def test_observations_that_fit_whole_never_leave_a_prompt_over_the_window(
    build: Build, sizes: list[int], window: int
) -> None:
    run = simulate(build, sizes, window=window)
    replies = [s for s in run.steps if s.kind is StepKind.REPLY]
    assert len(replies) == len(sizes), "every observation was read: none was too long"


def test_past_its_span_of_replies_a_prompt_is_compacted_however_small(build: Build) -> None:
    run = simulate(build, [10] * 80, window=1_000_000)
    compactions = [s for s in run.steps if s.kind is StepKind.COMPACTION]
    assert [s.step for s in compactions] == [context.DEFAULT_SPAN + 2]
    assert compactions[0].compacted_through == context.DEFAULT_SPAN - 2, "the newest 3 stay"
    for number, made in run.plans:
        shown = [m for m in made.messages if m["role"] == "assistant"]
        assert len(shown) <= context.DEFAULT_SPAN + 1, f"step {number}"


def test_an_observation_shorter_than_its_stub_stays_whole_where_masked(build: Build) -> None:
    """Masking a 29-byte output made an 83-character stub: the prompt grew (found by an
    outside run)."""
    run = simulate(build, [29, 12_000, 29, 12_000, 12_000, 12_000], window=10_000, keep=2)
    last = run.plans[-1][1]
    assert last.compact_through is None and last.view.masked == 3
    tools = [m["content"] for m in last.messages if m["role"] == "tool"]
    assert tools[0] == tools[2] == "x" * 29, "shorter than its stub: whole"
    assert tools[1].startswith("[observation of call s2c0 (read) elided: 12000 bytes")


def test_a_graph_nodes_short_tool_output_stays_whole_where_masked() -> None:
    policy = Policy(window=1_024, keep=1)
    messages = [
        {"role": "user", "content": "task"},
        {"role": "tool", "content": "ok"},
        {"role": "tool", "content": "y" * 4_000},
        {"role": "tool", "content": "z" * 4_000},
    ]
    fitted = context.fit(messages, policy, estimate=estimate)
    assert [m["content"] for m in fitted][1:] == [
        "ok",
        "[tool output elided: 4000 bytes]",
        "z" * 4_000,
    ]


def test_the_tools_schemas_count_with_the_transcript_against_the_target(build: Build) -> None:
    """Every call sends the tools' schemas beside the messages (the repair tools' are about
    1,100 tokens): a transcript under the target alone, past it with them, is masked."""
    run = simulate(build, [9_200] * 3, window=10_000, keep=2)
    head = run.head.model_copy(update={"step": len(run.steps)})
    alone = plan(head, run.steps, run.observations, estimate=estimate)
    assert alone.view.masked == 0 and alone.tokens <= 7_500 < alone.tokens + 1_100
    made = plan(head, run.steps, run.observations, estimate=estimate, tools=1_100)
    assert made.view.masked == 1 and made.compact_through is None
    assert made.tokens == estimate(made.messages) + 1_100 <= 7_500


@pytest.mark.parametrize("force", [False, True])
def test_a_plan_hands_back_its_prompts_unscaled_estimate(build: Build, force: bool) -> None:
    """Planned at a scale (the server counts more than the estimate), a plan says what its
    prompt and the schemas come to unscaled, which a reply's step keeps, from the estimate
    it made of that prompt: the THINK does not estimate its prompt again."""
    run = simulate(build, [9_200] * 3, window=10_000, keep=2)
    head = run.head.model_copy(update={"step": len(run.steps)})
    calls: list[int] = []

    def counting(messages: Sequence[dict[str, Any]]) -> int:
        calls.append(id(messages))
        return estimate(messages)

    made = plan(
        head, run.steps, run.observations, estimate=counting, tools=1_100, by=1.5, force=force
    )
    assert made.unscaled == estimate(made.messages) + 1_100
    assert made.tokens == math.ceil(estimate(made.messages) * 1.5) + 1_650
    assert calls.count(id(made.messages)) == 1


def test_a_graph_nodes_tool_output_is_elided_where_the_schemas_pass_the_target() -> None:
    policy = Policy(window=4_000, keep=1)
    messages = [
        {"role": "user", "content": "task"},
        {"role": "tool", "content": "y" * 5_000},
        {"role": "tool", "content": "z" * 5_000},
    ]
    assert context.fit(messages, policy, estimate=estimate) == messages
    fitted = context.fit(messages, policy, estimate=estimate, tools=1_100)
    assert [m["content"] for m in fitted][1:] == ["[tool output elided: 5000 bytes]", "z" * 5_000]


def test_the_newest_three_observations_give_way_before_the_session_fails(build: Build) -> None:
    """Three observations of about 2,066 tokens in a window of 5,000: masking the oldest of
    them fits, where keeping three whole failed CONTEXT (found by an outside run)."""
    run = simulate(build, [8_264] * 4, window=5_000)
    assert [s.masked_through for s in run.steps][:4] == [0, 0, 0, 1]
    fourth = dict(run.plans)[4]
    assert fourth.compact_through is None and fourth.too_long is None
    assert fourth.tokens <= 5_000
    tools = [m["content"] for m in fourth.messages if m["role"] == "tool"]
    assert tools[0].startswith("[observation of call s1c0") and tools[1:] == ["x" * 8_264] * 2


def test_the_newest_observations_are_all_masked_before_the_session_fails(build: Build) -> None:
    run = simulate(build, [8_000] * 2, window=1_500)
    second = dict(run.plans)[2]
    assert second.too_long is None and second.compact_through is None
    assert second.view.masked == 1 and second.tokens <= 1_500
    assert [m["content"][:21] for m in second.messages if m["role"] == "tool"] == [
        "[observation of call "
    ]


def test_a_context_failure_says_what_was_tried(build: Build) -> None:
    huge = build.head(
        config={"user_prompt": "t" * 30_000, "context": Policy(window=5_000).to_config()}
    )
    first = plan(huge, [], {}, estimate=estimate)
    assert first.too_long is not None
    assert first.too_long.startswith(
        "the prompt of step 1 is about 7,500 tokens with nothing earlier to compact or mask, "
        "and the model's context window is 5,000; fork it with a larger window"
    )
    run = simulate(build, [400] * 3, window=5_000)
    head = run.head.model_copy(
        update={"step": 3, "config": {**run.head.config, "user_prompt": "t" * 20_000}}
    )
    failed = plan(head, run.steps, run.observations, estimate=estimate)
    assert failed.too_long is not None
    assert "tokens with every observation masked, and the model's" in failed.too_long
    assert failed.view.masked == 3, "the message speaks of the prompt last tried"


def test_a_compaction_request_past_the_window_masks_the_steps_after_its_cut(
    build: Build,
) -> None:
    # the model refused the prompt of step 5: compacted at once, the request masks more,
    # leaving its summary room in the window
    run = simulate(build, [8_264] * 4, window=5_000)
    head = run.head.model_copy(update={"step": 4})
    fifth = plan(head, run.steps, run.observations, estimate=estimate, force=True)
    assert fifth.compact_through == 1
    assert fifth.view.masked == 3 and fifth.tokens <= 5_000 - context.SUMMARY_ROOM
    assert fifth.messages[-1]["content"] == context.SUMMARISE.format(through=1)


@pytest.mark.parametrize(("number", "compacts"), [(4, False), (5, True)])
def test_each_prompt_a_plan_tries_is_estimated_once(
    build: Build, number: int, compacts: bool
) -> None:
    """The prompts tried while the newest observations give way (a step's, and a
    compaction request's, forced by the model's refusal) are each estimated once, not
    again for the one chosen."""
    run = simulate(build, [8_264] * number, window=5_000)
    tried: list[str] = []

    def counting(messages: Sequence[dict[str, Any]]) -> int:
        tried.append(json.dumps(messages, sort_keys=True))
        return estimate(messages)

    before = run.steps[: number - 1]
    ids = {c.call_id for s in before for c in s.calls}
    head = run.head.model_copy(update={"step": number - 1})
    seen = {k: v for k, v in run.observations.items() if k in ids}
    made = plan(head, before, seen, estimate=counting, force=compacts)
    assert made == plan(head, before, seen, estimate=estimate, force=compacts)
    assert (made.compact_through is not None) is compacts
    assert len(tried) >= 2, "the newest observations gave way"
    assert len(tried) == len(set(tried))


@pytest.mark.parametrize(
    ("message", "stated"),
    [
        (
            "returned 400 Bad Request: This model's maximum context length is 8192 tokens. "
            "However, your messages resulted in 9000 tokens.",
            8_192,
        ),
        ("prompt is too long: 210000 tokens > 200000 maximum", 200_000),
        ("returned 413: request too large", None),
        # the server's text: a number past any window, however long, is no window
        (f"maximum context length is {'9' * 5000} tokens", None),
        ("prompt is too long: 1 tokens > 99999999999 maximum", None),
        # without "maximum" (a proxy's wording of Anthropic's refusal)
        ("prompt is too long: 210000 tokens > 200000", 200_000),
        ("Error: prompt is too long: 210,000 tokens > 200,000, shorten it", 200_000),
        ("prompt is too long: 210000 tokens > 200000.", 200_000),
        # the same bounds: a number past them is no window, never its first digits
        (f"prompt is too long: 1 tokens > {'9' * 5000}", None),
        ("prompt is too long: 1 tokens > 99999999999", None),
        (f"prompt is too long: {'9' * 5000} tokens > 200000", None),
    ],
)
def test_the_window_a_refusal_states_is_read_from_its_message(
    message: str, stated: int | None
) -> None:
    assert context.stated_window(message) == stated


def test_a_stated_window_below_the_configured_one_is_the_policys(build: Build) -> None:
    config = {"context": Policy(window=32_768).to_config()}
    head = build.head(config=config, result={context.STATED_WINDOW: 9_000})
    assert context.policy_for(head) == Policy(window=9_000)
    larger = build.head(config=config, result={context.STATED_WINDOW: 64_000})
    assert context.policy_for(larger) == Policy(window=32_768)


def test_no_compaction_is_made_that_cannot_bring_the_prompt_under_its_target(
    build: Build,
) -> None:
    # the newest three observations alone pass the target (7,500 tokens) but fit the
    # window: a compaction would leave the prompt past the target all the same, so one at
    # every step would double the model calls for nothing; the session goes on, masked
    run = simulate(build, [11_000] * 12, window=10_000)
    assert len(run.steps) == 12
    assert not [s for s in run.steps if s.kind is StepKind.COMPACTION]
    last = run.plans[-1][1]
    assert last.view.masked == 8 and last.tokens <= 10_000


def test_a_compaction_whose_summary_would_leave_the_prompt_past_its_target_is_not_made_again(
    build: Build,
) -> None:
    # the newest three observations (7,350 tokens) fit the target (7,500) alone, but not
    # with a summary of 1,000 tokens beside them: after the first compaction, one more
    # would leave the prompt past the target as that one did, at every other step
    run = simulate(build, [9_800] * 20, window=10_000, summary=4_000)
    compactions = [s for s in run.steps if s.kind is StepKind.COMPACTION]
    assert len(compactions) == 1
    assert len([s for s in run.steps if s.kind is StepKind.REPLY]) == 20


def test_observations_kept_whole_that_pass_the_window_give_way_not_a_compaction_each_step(
    build: Build,
) -> None:
    # the newest three observations alone (10,500 tokens) pass the window: a compaction
    # leaves them whole, so one at every other step was a model call for nothing; the
    # oldest of them are masked instead, and the session goes on
    run = simulate(build, [14_000] * 12, window=10_000)
    assert [s.kind for s in run.steps] == [StepKind.REPLY] * 12
    for _, made in run.plans:
        assert made.tokens <= 10_000
    tools = [m["content"] for m in run.plans[-1][1].messages if m["role"] == "tool"]
    assert tools[-2:] == ["x" * 14_000] * 2, "as many of the newest whole as fit"


def test_a_compaction_is_made_where_the_newest_observations_giving_way_is_not_enough(
    build: Build,
) -> None:
    # every observation passes the window alone, so each is masked at once; the stubs of
    # the steps before pass it too after a while: then a compaction drops them, now and then
    run = simulate(build, [9_000] * 300, window=2_000, span=1_000)
    assert len([s for s in run.steps if s.kind is StepKind.REPLY]) == 300
    compactions = [s for s in run.steps if s.kind is StepKind.COMPACTION]
    assert 1 <= len(compactions) <= 10
    for _, made in run.plans:
        assert made.tokens <= 2_000


def test_the_newest_observation_is_shown_whole_where_a_compaction_makes_room_for_it(
    build: Build,
) -> None:
    # each observation (3,250 tokens) fits the window (4,000) alone but not beside the
    # stubs of 30-odd older steps: they were all masked, the newest too, and no compaction
    # was made while the stubs alone stayed under the target, so for a hundred steps the
    # model saw what each call returned (and any `recall` of it) as a stub
    run = simulate(build, [13_000] * 150, window=4_000, span=1_000)
    assert len([s for s in run.steps if s.kind is StepKind.REPLY]) == 150
    for number, made in run.plans[1:]:
        if made.compact_through is None:
            assert made.messages[-1]["content"] == "x" * 13_000, f"step {number}: a stub"
        assert made.tokens <= 4_000
    compactions = [s for s in run.steps if s.kind is StepKind.COMPACTION]
    assert 1 <= len(compactions) <= 10, "a compaction every 30-odd steps, not every step"


#: the tokens of the tools' schemas sent beside each prompt, in the tests of `scale`
SCHEMAS = 150


def _counted(run: Run, *, by: float, stored: bool) -> list[Step]:
    """The run's steps with each reply's usage a server counting `by` times the estimate
    would report, and (where `stored`) the estimate its prompt was sent with."""
    made = dict(run.plans)
    steps = []
    for s in run.steps:
        if s.kind is StepKind.REPLY:
            sent = made[s.step].tokens + SCHEMAS
            usage = s.usage.model_copy(update={"prompt_tokens": int(sent * by)})
            s = s.model_copy(update={"usage": usage, "prompt_estimate": sent if stored else None})
        steps.append(s)
    return steps


def _scales(run: Run, steps: list[Step]) -> list[float]:
    """`scale` at each THINK of the run, as the worker finds it."""
    return [
        context.scale(run.head, steps[:n], run.observations, estimate=estimate, tools=SCHEMAS)
        for n in range(len(steps) + 1)
    ]


def test_scale_from_the_stored_estimates_is_what_rebuilding_the_prompts_gave(
    build: Build,
) -> None:
    # masked and compacted on the way: every kind of view the rebuild had to find again
    run = simulate(build, [3_000] * 40, window=6_000, span=8)
    assert {s.kind for s in run.steps} == {StepKind.REPLY, StepKind.COMPACTION}
    assert any(s.masked_through for s in run.steps)

    stored = _scales(run, _counted(run, by=1.3, stored=True))

    assert stored == _scales(run, _counted(run, by=1.3, stored=False))
    # 1 before the first reply and after each compaction the server did not count (its
    # usage 0 here), else the server's count over it
    assert {round(x, 2) for x in stored} == {1.0, 1.3}


def test_scale_reads_the_stored_estimate_and_builds_no_prompt(
    build: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = simulate(build, [3_000] * 12, window=6_000)
    steps = _counted(run, by=1.5, stored=True)

    def no_build(*_: object, **__: object) -> list[dict[str, Any]]:
        raise AssertionError("scale built a prompt again")

    def no_estimate(messages: Sequence[dict[str, Any]]) -> int:
        raise AssertionError("scale estimated a prompt again")

    monkeypatch.setattr(context, "build", no_build)
    last = steps[-1]
    assert last.prompt_estimate is not None
    found = context.scale(run.head, steps, run.observations, estimate=no_estimate, tools=SCHEMAS)
    assert found == last.usage.prompt_tokens / last.prompt_estimate == pytest.approx(1.5, 0.01)


def test_the_prompt_after_a_compaction_is_scaled_by_the_servers_count_of_its_request(
    build: Build,
) -> None:
    """No reply follows a compaction yet, and the scale was 1 there: the first prompt after
    it, with the observations the compaction kept whole, was planned at four characters a
    token, and a server counting a third more refused it, a second compaction following.
    The compaction's step keeps its request's estimate, which the server counted too."""
    run = simulate(build, [3_000] * 12, window=6_000, span=6)
    steps = _counted(run, by=1.5, stored=True)
    at = next(i for i, s in enumerate(steps) if s.kind is StepKind.COMPACTION)
    made = dict(run.plans)[steps[at].step]
    sent = made.tokens + SCHEMAS
    usage = steps[at].usage.model_copy(update={"prompt_tokens": int(sent * 1.5)})
    steps[at] = steps[at].model_copy(update={"usage": usage, "prompt_estimate": sent})

    after = _scales(run, steps)[at + 1]

    assert after == pytest.approx(1.5, 0.01)
    # a compaction stored without its request's estimate scales nothing
    old = steps[at].model_copy(update={"prompt_estimate": None})
    assert _scales(run, [*steps[:at], old])[at + 1] == 1.0


def test_a_fork_onto_another_model_scales_its_prompts_afresh(build: Build) -> None:
    """The kept replies' prompts were counted by the parent's model's tokenizer: a fork
    onto another model planned its first call 1.5 times too big (or too small) for it."""
    from tickwork.fsm.forks import ForkPatch, fork
    from tickwork.fsm.values import Session

    run = simulate(build, [3_000] * 6, window=60_000)
    steps = _counted(run, by=1.5, stored=True)
    parent = Session(
        head=run.head.model_copy(update={"step": len(steps)}),
        steps=tuple(steps),
        observations=tuple(run.observations.values()),
    )

    def scale_of(patch: ForkPatch, from_step: int = len(steps)) -> float:
        child = fork(
            parent, new_id="f", from_step=from_step, patch=patch, by="alice", now=build.at(9)
        )
        seen = {o.call_id: o for o in child.observations}
        return context.scale(child.head, child.steps, seen, estimate=estimate, tools=SCHEMAS)

    assert scale_of(ForkPatch()) == pytest.approx(1.5, 0.01)  # the same model: as counted
    onto = scale_of(ForkPatch(model="openai:other"))
    assert onto == 1.0
    # a fork of that fork that keeps its model keeps the reset for the steps it kept
    child = fork(
        parent,
        new_id="f",
        from_step=4,
        patch=ForkPatch(model="openai:other"),
        by="a",
        now=build.at(9),
    )
    assert context.model_since(child.head) == 4
    again = fork(child, new_id="g", from_step=3, patch=ForkPatch(), by="a", now=build.at(10))
    seen = {o.call_id: o for o in again.observations}
    assert context.scale(again.head, again.steps, seen, estimate=estimate, tools=SCHEMAS) == 1.0


def test_a_reply_stored_without_its_estimate_has_its_prompt_built_again(
    build: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a step a tickwork before 0024_prompt_estimate stored: the session's scale stays as it was
    run = simulate(build, [3_000] * 12, window=6_000)
    steps = _counted(run, by=1.5, stored=False)
    built: list[int] = []
    rebuild = context.build

    def counting(*args: Any, **kw: Any) -> list[dict[str, Any]]:
        built.append(1)
        return rebuild(*args, **kw)

    monkeypatch.setattr(context, "build", counting)
    found = context.scale(run.head, steps, run.observations, estimate=estimate, tools=SCHEMAS)

    sent = dict(run.plans)[steps[-1].step].tokens + SCHEMAS
    assert built == [1]
    assert found == steps[-1].usage.prompt_tokens / sent == pytest.approx(1.5, 0.01)
