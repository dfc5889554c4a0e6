"""Budget values and checks (docs/DESIGN.md section 6)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from tickwork.fsm.budgets import (
    Cap,
    NextCall,
    TenantDay,
    completion_cap,
    cut_at,
    exhausted_budget,
    model_retry_delay,
    stop_reason,
)
from tickwork.fsm.values import Budgets, ErrorCode, Status

from tickwork.flags import in_flags

TOKENS, COST = ErrorCode.BUDGET_TOKENS, ErrorCode.BUDGET_COST

FIELDS = list(Budgets.model_fields)
BAD = [
    pytest.param(-1, id="negative"),
    pytest.param(0, id="zero"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="minus_inf"),
]


def test_every_budget_is_checked() -> None:
    assert set(FIELDS) == {
        "max_steps",
        "max_tokens",
        "max_cost_usd",
        "deadline_s",
        "max_consecutive_repeats",
        "max_loop_interventions",
        "max_model_retries",
        "max_calls_per_step",
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param(field, bad.values[0], id=f"{field}-{bad.id}")
        for field in FIELDS
        for bad in BAD
        # 0 turns the cost budget off: see the test below
        if not (field == "max_cost_usd" and bad.values[0] == 0)
    ],
)
def test_budgets_reject_values_that_are_not_positive_and_finite(field: str, value: float) -> None:
    # the code raises pydantic's ValidationError (a ValueError), not InvalidBudget
    with pytest.raises(ValidationError) as raised:
        Budgets(**{field: value})
    assert [e["loc"] for e in raised.value.errors()] == [(field,)]
    assert field in str(raised.value)


@pytest.mark.parametrize("field", FIELDS)
def test_budgets_accept_small_positive_values(field: str) -> None:
    assert getattr(Budgets(**{field: 1}), field) == 1


def test_a_cost_budget_of_zero_is_off_and_never_exhausted(build: Any) -> None:
    budgets = Budgets(max_cost_usd=0)
    assert not budgets.limits_cost
    head = build.head(budgets=budgets.model_dump(), cost_usd=1e6)
    assert exhausted_budget(head, now=build.at(0), next_call=NextCall(cost_usd=1e6)) is None


def test_budgets_reject_booleans() -> None:
    with pytest.raises(ValidationError, match="max_steps"):
        Budgets(max_steps=True)


def test_budgets_are_frozen() -> None:
    with pytest.raises(ValidationError):
        Budgets().max_steps = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "at_s", "code"),
    [
        pytest.param({}, 0, None, id="fresh"),
        pytest.param({"step": 3}, 0, ErrorCode.BUDGET_STEPS, id="steps"),
        pytest.param({"tokens": 100}, 0, ErrorCode.BUDGET_TOKENS, id="tokens"),
        pytest.param({"cost_usd": 1.0}, 0, ErrorCode.BUDGET_COST, id="cost"),
        pytest.param({}, 3600, ErrorCode.DEADLINE, id="deadline"),
        pytest.param({}, 3599, None, id="before_deadline"),
        pytest.param(
            {"tokens": 100, "cost_usd": 5.0},
            9999,
            ErrorCode.BUDGET_TOKENS,
            id="first_exhausted_wins",
        ),
    ],
)
def test_exhausted_budget(
    build: Any, fields: dict[str, Any], at_s: float, code: ErrorCode | None
) -> None:
    head = build.head(
        budgets={"max_steps": 3, "max_tokens": 100, "max_cost_usd": 1.0, "deadline_s": 3600},
        **fields,
    )
    spent = exhausted_budget(head, now=build.at(at_s))
    assert (spent.code if spent else None) is code


LIMITS = {"max_steps": 30, "max_tokens": 1000, "max_cost_usd": 2.0, "deadline_s": 3600}
#: $0.01 per completion token
PER_TOKEN = 0.01


@pytest.mark.parametrize(
    ("spent", "ahead", "code"),
    [
        pytest.param({}, NextCall(tokens=999, cost_usd=1.99), None, id="room_for_one_token"),
        pytest.param({}, NextCall(tokens=1000), ErrorCode.BUDGET_TOKENS, id="prompt_fills_tokens"),
        pytest.param({"cost_usd": 1.8}, NextCall(cost_usd=0.4), ErrorCode.BUDGET_COST, id="cost"),
        pytest.param({"cost_usd": 1.8}, NextCall(cost_usd=0.2), None, id="cost_fits_unpriced"),
        pytest.param(
            {"cost_usd": 1.8},
            NextCall(cost_usd=0.195, usd_per_completion_token=PER_TOKEN),
            ErrorCode.BUDGET_COST,
            id="no_room_for_a_priced_token",
        ),
        pytest.param({"tokens": 900}, NextCall(tokens=100), ErrorCode.BUDGET_TOKENS, id="tokens"),
        pytest.param({"tokens": 900}, NextCall(tokens=99), None, id="tokens_fit"),
        pytest.param({}, NextCall(tokens=5000), ErrorCode.BUDGET_TOKENS, id="first_call_too_big"),
        pytest.param(
            {"tokens": 999, "cost_usd": 1.99},
            NextCall(tokens=2, cost_usd=0.02),
            ErrorCode.BUDGET_TOKENS,
            id="tokens_checked_first",
        ),
        pytest.param({"cost_usd": 2.0}, NextCall(), ErrorCode.BUDGET_COST, id="spent_no_estimate"),
        pytest.param(
            {"tokens": 1000, "cost_usd": 9.0},
            NextCall(),
            ErrorCode.BUDGET_TOKENS,
            id="tokens_first_even_when_cost_is_further_past",
        ),
    ],
)
def test_the_next_calls_prompt_must_leave_room_for_an_answer(
    build: Any, spent: dict[str, Any], ahead: NextCall, code: ErrorCode | None
) -> None:
    head = build.head(budgets=LIMITS, **spent)
    found = exhausted_budget(head, now=build.at(0), next_call=ahead)
    assert (found.code if found else None) is code
    assert (found is None) == (completion_cap(head, ahead).tokens >= 1)
    if found is not None and found.code is ErrorCode.BUDGET_COST and ahead.cost_usd:
        assert "the next model call's prompt is estimated at" in found.message


@pytest.mark.parametrize(
    ("spent", "ahead", "cap"),
    [
        # 1000 - 200 - 300 tokens left
        pytest.param(
            {"tokens": 200}, NextCall(tokens=300), Cap(tokens=500, code=TOKENS), id="tokens"
        ),
        # ($2.00 - $1.00 - $0.50) / $0.01
        pytest.param(
            {"cost_usd": 1.0},
            NextCall(tokens=10, cost_usd=0.5, usd_per_completion_token=PER_TOKEN),
            Cap(tokens=50, code=COST),
            id="cost",
        ),
        pytest.param(
            {},
            NextCall(tokens=10, cost_usd=1.0, usd_per_completion_token=0.003),
            Cap(tokens=333, code=COST),
            id="cost_rounds_down",
        ),
        pytest.param(
            {}, NextCall(tokens=10, max_completion_tokens=64), Cap(tokens=64), id="model_max"
        ),
        pytest.param(
            {"tokens": 990},
            NextCall(tokens=5, max_completion_tokens=64),
            Cap(tokens=5, code=TOKENS),
            id="tokens_below_model_max",
        ),
        pytest.param(
            {"cost_usd": 2.5}, NextCall(tokens=1), Cap(tokens=0, code=COST), id="cost_overspent"
        ),
        pytest.param(
            {"tokens": 1200}, NextCall(tokens=1), Cap(tokens=-201, code=TOKENS), id="tokens_over"
        ),
        pytest.param(
            {},
            NextCall(tokens=1, usd_per_completion_token=1e-30),
            Cap(tokens=999, code=TOKENS),
            id="tiny_price_tokens_win",
        ),
    ],
)
def test_completion_cap(build: Any, spent: dict[str, Any], ahead: NextCall, cap: Cap) -> None:
    head = build.head(budgets=LIMITS, **spent)
    assert completion_cap(head, ahead) == cap


def test_completion_cap_without_a_cost_budget_is_the_tokens_left(build: Any) -> None:
    head = build.head(budgets={**LIMITS, "max_cost_usd": 0}, cost_usd=50.0)
    ahead = NextCall(tokens=100, cost_usd=9.0, usd_per_completion_token=PER_TOKEN)
    assert completion_cap(head, ahead) == Cap(tokens=900, code=TOKENS)


@given(
    spent=st.floats(min_value=0, max_value=10, allow_nan=False),
    prompt=st.floats(min_value=0, max_value=10, allow_nan=False),
    per_token=st.floats(min_value=1e-9, max_value=1, allow_nan=False),
)
def test_a_capped_call_stays_within_the_cost_budget(
    build: Any, spent: float, prompt: float, per_token: float
) -> None:
    """Whatever the server bills for the prompt it was told and at most the cap it was
    sent, the session is within max_cost_usd; a call happens only while there is room."""
    head = build.head(budgets={**LIMITS, "max_tokens": 10**12}, cost_usd=spent)
    ahead = NextCall(cost_usd=prompt, usd_per_completion_token=per_token)
    cap = completion_cap(head, ahead)
    allowed = exhausted_budget(head, now=build.at(0), next_call=ahead) is None
    assert allowed == (spent < 2.0 and cap.tokens >= 1)
    if allowed:
        assert spent + prompt + cap.tokens * per_token <= 2.0 * (1 + 1e-9)


def _day(spent: float, quota: float = 2.0) -> TenantDay:
    return TenantDay(
        tenant="team-a", quota_usd=quota, spent_usd=spent, day=datetime(2026, 3, 1, tzinfo=UTC)
    )


@given(
    spent=st.floats(min_value=0, max_value=10, allow_nan=False),
    prompt=st.floats(min_value=0, max_value=10, allow_nan=False),
    per_token=st.floats(min_value=1e-9, max_value=1, allow_nan=False),
)
def test_a_capped_call_stays_within_the_tenant_s_day_without_a_cost_budget(
    build: Any, spent: float, prompt: float, per_token: float
) -> None:
    """A session without a cost budget (0: none) is held by its tenant's max_usd_per_day:
    a call happens only while the day has room, and its cap keeps it within."""
    head = build.head(budgets={**LIMITS, "max_tokens": 10**12, "max_cost_usd": 0})
    ahead = NextCall(cost_usd=prompt, usd_per_completion_token=per_token)
    day = _day(spent)
    cap = completion_cap(head, ahead, day)
    spent_out = exhausted_budget(head, now=build.at(0), next_call=ahead, day=day)
    assert (spent_out is None) == (spent < 2.0 and cap.tokens >= 1)
    if spent_out is None:
        assert spent + prompt + cap.tokens * per_token <= 2.0 * (1 + 1e-9)
    else:
        assert spent_out.code is COST and "`max_usd_per_day` of $2" in spent_out.message


def test_the_day_s_stop_names_the_tenant_the_quota_and_when_it_resets(build: Any) -> None:
    head = build.head(budgets={**LIMITS, "max_cost_usd": 1e9})
    spent = exhausted_budget(head, now=build.at(0), day=_day(2.5))
    assert spent is not None and spent.code is COST
    assert spent.message.startswith("tenant team-a's quota `max_usd_per_day` of $2 is spent:")
    assert "created on 2026-03-01 (UTC) spent $2.50" in spent.message
    assert "resets at 2026-03-02T00:00:00Z, fork this session after it" in spent.message
    # the session's own budget, spent first, is named as before
    own = build.head(budgets={**LIMITS, "max_cost_usd": 1.0}, cost_usd=1.0)
    first = exhausted_budget(own, now=build.at(0), day=_day(2.5))
    assert first is not None and "`max_cost_usd` is $1" in first.message
    cut = cut_at(Cap(tokens=7, code=COST, by_tenant=True), NextCall(tokens=50), day=_day(1.9))
    assert cut is not None and cut.code is COST and "`max_usd_per_day` of $2" in cut.message


def test_the_day_s_quota_is_named_in_backticks_and_kept_so_on_the_command_line(
    build: Any,
) -> None:
    """The tenant's quota read "quota max_usd_per_day of $2", the bare key, where every
    session budget's reason names it in backticks. It is named so too; as it is an
    operator's setting in the tenants file, which no flag gives, the command line keeps
    the key as it is."""
    head = build.head(budgets={**LIMITS, "max_cost_usd": 1e9})
    spent = exhausted_budget(head, now=build.at(0), day=_day(2.5))
    cut = cut_at(Cap(tokens=7, code=COST, by_tenant=True), NextCall(tokens=50), day=_day(1.9))
    assert spent is not None and cut is not None
    assert "tenant team-a's quota `max_usd_per_day` of $2 is spent: " in spent.message
    assert "tokens of tenant team-a's quota `max_usd_per_day` of $2 for the " in cut.message
    for message in (spent.message, cut.message):
        assert in_flags(message) == message


def test_a_day_that_has_ended_names_the_next_reset_not_a_past_one(build: Any) -> None:
    """A session counts to the UTC day it was created: one created at 23:30 that runs past
    midnight (or waited days for an approval) stops on that day's quota after the day has
    ended. It said "the quota resets at" that midnight, a time in the past, and to fork
    after it; a fork made now counts to today, so it may go on at once."""
    head = build.head(budgets={**LIMITS, "max_cost_usd": 1e9})
    day = _day(2.5)  # 2026-03-01
    for now in (datetime(2026, 3, 2, 0, 40, tzinfo=UTC), datetime(2026, 3, 5, 9, tzinfo=UTC)):
        spent = exhausted_budget(head, now=now, day=day)
        assert spent is not None and spent.code is COST
        assert "created on 2026-03-01 (UTC) spent $2.50" in spent.message
        nxt = (now + timedelta(days=1)).date().isoformat()
        assert spent.message.endswith(
            "this session's spending counts to that day, which has ended: fork this session "
            "to go on, a fork counts to the day it is made (the quota next resets at "
            f"{nxt}T00:00:00Z), or ask the operator to raise the quota"
        ), spent.message
        assert "resets at 2026-03-02T00:00:00" not in spent.message
        cut = cut_at(
            Cap(tokens=7, code=COST, by_tenant=True), NextCall(tokens=50), day=day, now=now
        )
        assert cut is not None and "which has ended" in cut.message
        assert f"next resets at {nxt}T00:00:00Z" in cut.message
    # on the day itself, as before: the reset is the day's end
    before = exhausted_budget(head, now=datetime(2026, 3, 1, 23, 50, tzinfo=UTC), day=day)
    assert before is not None
    assert "resets at 2026-03-02T00:00:00Z, fork this session after it" in before.message


@pytest.mark.parametrize(
    ("fields", "at_s", "words"),
    [
        pytest.param({}, 0, None, id="fresh"),
        pytest.param({"cancel_requested": True}, 0, "cancelled", id="cancel"),
        pytest.param({}, 3600, "deadline passed", id="deadline"),
        pytest.param({"cost_usd": 1.0}, 0, "cost budget", id="cost"),
        # a running call of the last step may finish: steps and tokens do not stop it
        pytest.param({"step": 3, "tokens": 100}, 0, None, id="steps_and_tokens_go_on"),
        pytest.param({"step": 3}, 3600, "deadline passed", id="deadline_after_last_step"),
    ],
)
def test_stop_reason_of_a_running_tool(
    build: Any, fields: dict[str, Any], at_s: float, words: str | None
) -> None:
    head = build.head(
        budgets={"max_steps": 3, "max_tokens": 100, "max_cost_usd": 1.0, "deadline_s": 3600},
        **fields,
    )
    reason = stop_reason(head, now=build.at(at_s))
    assert (reason is None) if words is None else (words in (reason or "")), reason


def test_a_running_tool_is_stopped_naming_the_budget_as_the_other_reasons_do(build: Any) -> None:
    """A tool stopped by the deadline or the cost budget read "deadline_s is 60" and
    "max_cost_usd is $1.0", where every other reason of a budget names it in backticks,
    which the command line prints as the flag that gives it."""
    budgets = {"max_cost_usd": 1.0, "deadline_s": 60}
    late = stop_reason(build.head(budgets=budgets), now=build.at(61))
    assert late == "the session's deadline passed (61s, `deadline_s` is 60)"
    assert in_flags(late) == "the session's deadline passed (61s, --deadline is 60)"
    spent = stop_reason(build.head(budgets=budgets, cost_usd=1.0), now=build.at(0))
    assert spent == "the session's cost budget is spent (`max_cost_usd` is $1)"
    assert in_flags(spent) == "the session's cost budget is spent (--max-cost-usd is $1)"


@pytest.mark.parametrize(
    ("attempt", "jitter", "delay"),
    [
        (1, 0.0, 0.5),
        (1, 1.0, 1.0),
        (2, 0.0, 1.0),
        (3, 0.5, 3.0),
        (10, 0.0, 30.0),
        (10, 1.0, 60.0),
    ],
)
def test_model_retry_delay(attempt: int, jitter: float, delay: float) -> None:
    assert model_retry_delay(attempt, jitter=jitter) == delay


def test_the_steps_message_counts_in_words(build: Any) -> None:
    one = exhausted_budget(build.head(budgets={"max_steps": 1}, step=1), now=build.at(0))
    two = exhausted_budget(build.head(budgets={"max_steps": 2}, step=2), now=build.at(0))
    assert one is not None and one.message == "1 step made, `max_steps` is 1"
    assert two is not None and two.message == "2 steps made, `max_steps` is 2"


def test_the_token_messages_count_as_show_does(build: Any) -> None:
    """A dead letter said "28642 tokens used" where `show` says 28,642: the budgets' messages
    write their counts with the same separators; their signature stays the one it was, so
    letters before and after group together."""
    from tickwork.store.error_signatures import error_signature

    head = build.head(budgets={"max_tokens": 28_000}, tokens=28_642)
    used = exhausted_budget(head, now=build.at(0), next_call=NextCall(tokens=1_500))
    assert used is not None and used.message == (
        "28,642 tokens used and the next model call's prompt is estimated at 1,500 more, "
        "leaving no room for its answer, `max_tokens` is 28,000"
    )
    cut = cut_at(Cap(tokens=1_024, code=TOKENS), NextCall(tokens=27_000))
    assert cut is not None and cut.message == (
        "the model's answer was cut at 1,024 completion tokens, all the tokens budget left "
        "after its prompt of about 27,000 tokens"
    )
    day = cut_at(
        Cap(tokens=1_024, code=COST, by_tenant=True), NextCall(tokens=27_000), day=_day(1.9)
    )
    assert day is not None and "cut at 1,024 completion tokens" in day.message
    assert "prompt of about 27,000 tokens of tenant" in day.message
    was = "28642 tokens used, `max_tokens` is 28000"
    assert error_signature("BUDGET_TOKENS", was) == error_signature(
        "BUDGET_TOKENS", "28,642 tokens used, `max_tokens` is 28,000"
    )


@pytest.mark.parametrize(
    ("cap", "code"),
    [
        pytest.param(Cap(tokens=40, code=COST), COST, id="cost"),
        pytest.param(Cap(tokens=40, code=TOKENS), TOKENS, id="tokens"),
        pytest.param(Cap(tokens=4096), None, id="the_models_own_limit"),
    ],
)
@pytest.mark.parametrize("calls", [0, 1])
def test_an_answer_cut_at_a_budgets_cap_fails_the_session_with_its_step(
    build: Any, cap: Cap, code: ErrorCode | None, calls: int
) -> None:
    """Not a final answer (its text stops mid-way), and its calls are not run (their
    arguments may stop mid-way); its tokens and cost count."""
    head = build.head(budgets=LIMITS)
    reply = build.reply(*[("read_file", {"path": "a"})] * calls).model_copy(
        update={"truncated": True}
    )

    change = build.think(head, reply, cut=cut_at(cap, NextCall(tokens=500)), cost_usd=0.5)

    assert change.step is not None and change.head.cost_usd == 0.5
    if code is None:
        assert change.head.status is (Status.EXECUTING if calls else Status.COMPLETED)
        return
    assert change.head.status is Status.FAILED and change.head.error_code is code
    assert "cut at 40 completion tokens" in (change.head.error_message or "")
    assert [o.is_error for o in change.observations] == [True] * calls
    assert change.dead_letter


def test_an_answer_cut_at_a_cap_the_window_lowered_is_not_the_budgets(build: Any) -> None:
    """A server refused the budget's cap for its window and the model asked again with the
    room it stated: a cut there is the window's, taken as it is, as at the model's limit."""
    head = build.head(budgets=LIMITS)
    reply = build.reply(("read_file", {"path": "a"})).model_copy(
        update={"truncated": True, "cap_lowered": True}
    )
    cap = Cap(tokens=40, code=TOKENS)

    assert cut_at(cap, NextCall(tokens=500), lowered=True) is None
    change = build.think(head, reply, cut=cut_at(cap, NextCall(tokens=500), lowered=True))
    assert change.head.status is Status.EXECUTING


def test_an_answer_not_cut_is_not_failed_by_the_cap(build: Any) -> None:
    head = build.head(budgets=LIMITS)
    change = build.think(head, build.reply(), cut=cut_at(Cap(tokens=40, code=COST), NextCall()))
    assert change.head.status is Status.COMPLETED


def test_every_budget_has_a_bound_and_the_bounds_hold_input_only() -> None:
    from tickwork.fsm.values import BUDGET_MAXIMA, over_bound

    assert set(BUDGET_MAXIMA) == set(Budgets.model_fields)
    assert over_bound({"max_tokens": 2**70}) == (
        "`max_tokens` must be at most 9,007,199,254,740,991, got 1180591620717411303424"
    )
    assert over_bound({"deadline_s": 3600, "max_steps": 5}) is None
    # a session stored before the bounds (a "no deadline" of 1e10 s) still loads
    assert Budgets.model_validate({"deadline_s": 1e10, "max_tokens": 2**60}).deadline_s == 1e10


def test_a_tiny_day_quota_is_said_in_full_not_in_exponent_form() -> None:
    from datetime import UTC, datetime

    from tickwork.fsm.budgets import TenantDay, day_spent

    day = datetime(2026, 12, 7, tzinfo=UTC)
    said = day_spent(TenantDay(tenant="acme", day=day, spent_usd=0.0, quota_usd=0.000001))
    assert "`max_usd_per_day` of $0.000001 is spent" in said, said


def test_a_prompt_over_the_whole_day_quota_is_not_told_to_wait_for_the_next_day(
    build: Any,
) -> None:
    """A tenant's day of $0.001 had spent $0.000046 when a call's prompt was estimated at
    $0.58: the message said the quota "is spent" (it was not) and to fork after it resets,
    a fork that would stop the same way on every day to come."""
    head = build.head(budgets={**LIMITS, "max_cost_usd": 0})
    day = _day(0.000046, quota=0.001)
    over = exhausted_budget(head, now=build.at(0), next_call=NextCall(cost_usd=0.58), day=day)
    assert over is not None and over.code is COST
    assert over.message.startswith(
        "tenant team-a's quota `max_usd_per_day` of $0.001 has no room for the next model "
        "call: its sessions created on 2026-03-01 (UTC) spent $0.000046 and the next model "
        "call's prompt is estimated at $0.58 more"
    ), over.message
    assert over.message.endswith(
        "that prompt alone costs more than the whole quota, so no day of it has room for this "
        "session's next call: ask the operator to raise the quota, or fork this session onto "
        "a cheaper model"
    ), over.message
    # a prompt that fits in a day of its own: fork after the reset, as before
    later = exhausted_budget(head, now=build.at(0), next_call=NextCall(cost_usd=1.5), day=_day(1))
    assert later is not None and "no room for the next model call" in later.message
    assert "the quota resets at 2026-03-02T00:00:00Z, fork this session after it" in later.message


def test_a_configured_budget_or_quota_reads_as_it_was_given_and_a_spend_rounded(
    build: Any,
) -> None:
    """A `max_cost_usd` of 0.00001234 read "$0.000012", rounded as an amount spent is, so a
    stop could say "$0.000012 spent, `max_cost_usd` is $0.000012"; what a person configured
    reads as they wrote it, what was spent or is estimated is rounded."""
    budgets = {**LIMITS, "max_cost_usd": 0.00001234}
    head = build.head(budgets=budgets, cost_usd=0.0000123456)
    spent = exhausted_budget(head, now=build.at(0), next_call=NextCall(cost_usd=0.000000123))
    assert spent is not None and spent.message == (
        "$0.000012 spent and the next model call's prompt is estimated at $0.00000012 more, "
        "leaving no room for its answer, `max_cost_usd` is $0.00001234"
    )
    stopped = stop_reason(build.head(budgets=budgets, cost_usd=0.0000123456), now=build.at(0))
    assert stopped == "the session's cost budget is spent (`max_cost_usd` is $0.00001234)"
    day = _day(0.0000123456, quota=0.00001234)
    quota = exhausted_budget(
        build.head(budgets={**LIMITS, "max_cost_usd": 0}), now=build.at(0), day=day
    )
    assert quota is not None and quota.message.startswith(
        "tenant team-a's quota `max_usd_per_day` of $0.00001234 is spent: its sessions "
        "created on 2026-03-01 (UTC) spent $0.000012;"
    ), quota.message
    cut = cut_at(Cap(tokens=7, code=COST, by_tenant=True), NextCall(tokens=50), day=day)
    assert cut is not None and "`max_usd_per_day` of $0.00001234 for the " in cut.message
