"""What `tickwork dlq show` says to do about an open dead letter (`tickwork.remedies`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console
from tickwork.fsm.budgets import PROMPT_AHEAD, NextCall, TenantDay, day_spent, exhausted_budget
from tickwork.fsm.values import Budgets, Head, Status

from tickwork.remedies import fork_budgets, remedies
from tickwork.render import dead_letter_header


def letter(code: str, *, step: int = 3, prints: str = "abc", **budgets: Any) -> dict[str, Any]:
    """A dead letter's view with its session: `step` steps, whose fingerprints are `prints`."""
    return {
        "id": 7,
        "code": code,
        "message": "why",
        "error_signature": f"{code}: why",
        "at": "2026-12-07T11:00:00+00:00",
        "resolved_at": None,
        "session": {
            "head": {"step": step, "budgets": {"max_steps": 50, **budgets}},
            "steps": [{"step": i + 1, "fingerprint": p} for i, p in enumerate(prints)],
        },
    }


@pytest.mark.parametrize(
    ("code", "budgets", "fork"),
    [
        ("BUDGET_STEPS", {"max_steps": 3}, "--from-step 3 --max-steps 6"),
        ("BUDGET_TOKENS", {"max_tokens": 1200}, "--from-step 3 --max-tokens 2400"),
        ("BUDGET_COST", {"max_cost_usd": 0.5}, "--from-step 3 --max-cost-usd 1"),
        ("DEADLINE", {"deadline_s": 30.0}, "--from-step 3 --deadline 60"),
        ("CONTEXT", {}, "--from-step 3 --context-window TOKENS"),
        ("MODEL_ERROR", {}, "--from-step 3  (once the model's settings are mended"),
    ],
)
def test_an_open_dead_letter_says_the_fork_that_raises_what_it_ran_out_of(
    code: str, budgets: dict[str, Any], fork: str
) -> None:
    said = remedies(letter(code, **budgets))
    assert said[0].startswith(f"tickwork dlq fork 7 {fork}"), said
    assert said[1:] == [
        'tickwork dlq resolve 7 --reason "TEXT"  (dealt with another way)',
        'tickwork dlq dismiss 7 --reason "TEXT"  (nothing to be done)',
    ]


@pytest.mark.parametrize(("prints", "before"), [("abccc", 2), ("aabab", 1), ("cccc", 0), ("", 0)])
def test_a_loop_is_forked_from_before_its_repeated_steps(prints: str, before: int) -> None:
    said = remedies(letter("LOOP", step=len(prints), prints=prints))
    assert said[0].startswith(f'tickwork dlq fork 7 --from-step {before} --append-instruction "')


def test_a_spent_tenant_day_is_no_budget_of_the_session_to_raise() -> None:
    spent = {**letter("BUDGET_COST", max_cost_usd=5.0), "message": "tenant acme spent its day"}
    assert "--max-cost-usd" not in remedies(spent)[0]


def test_a_closed_dead_letter_has_nothing_left_to_do_and_show_says_next_for_an_open_one() -> None:
    assert remedies({**letter("LOOP"), "resolved_at": "2026-12-07T12:00:00+00:00"}) == []
    console = Console(width=200, record=True)
    console.print(dead_letter_header(letter("BUDGET_STEPS", max_steps=3)))
    shown = console.export_text()
    assert "next         tickwork dlq fork 7 --from-step 3 --max-steps 6" in shown


def test_a_spent_tenant_day_is_forked_after_the_quota_resets_or_is_raised() -> None:
    spent = {**letter("BUDGET_COST", max_cost_usd=5.0), "message": "tenant acme spent its day"}
    spent["session"]["head"]["tenant"] = "acme"
    fork = remedies(spent)[0]
    assert fork.startswith("tickwork dlq fork 7 --from-step 3  (after tenant acme's quota")
    assert "`max_usd_per_day` resets at UTC midnight" in fork
    assert "TICKWORK_TENANTS_FILE" in fork
    assert "once what failed it is mended" not in fork


@pytest.mark.parametrize(
    ("code", "budgets", "fork"),
    [
        ("BUDGET_COST", {"max_cost_usd": 500000.0}, "--max-cost-usd 1000000  ("),
        ("BUDGET_COST", {"max_cost_usd": 0.00000005}, "--max-cost-usd 0.0000001  ("),
        ("BUDGET_COST", {"max_cost_usd": 1.25}, "--max-cost-usd 2.5  ("),
        ("DEADLINE", {"deadline_s": 604800.0}, "--deadline 1209600  ("),
        ("BUDGET_TOKENS", {"max_tokens": 500000}, "--max-tokens 1000000  ("),
    ],
)
def test_a_raised_budget_is_written_as_the_option_takes_it_never_in_exponent_form(
    code: str, budgets: dict[str, Any], fork: str
) -> None:
    said = remedies(letter(code, **budgets))[0]
    assert fork in said, said
    assert "e+" not in said and "e-" not in said


def test_a_prompt_over_the_whole_day_quota_is_not_forked_after_the_reset() -> None:
    """`dlq show` proposed forking after the quota resets for a session whose next prompt
    alone cost more than the tenant's whole day: that fork stops the same way."""

    day = datetime(2026, 12, 7, tzinfo=UTC)
    quota = TenantDay(tenant="acme", quota_usd=0.001, spent_usd=0.0, day=day)
    message = day_spent(quota, 0.58, now=day)
    over = {**letter("BUDGET_COST", max_cost_usd=0), "message": message}
    over["session"]["head"]["tenant"] = "acme"
    fork = remedies(over)[0]
    assert fork.startswith("tickwork dlq fork 7 --from-step 3  (once tenant acme's quota"), fork
    assert "--model SPEC for a cheaper model: waiting for the reset is no help" in fork, fork
    assert "resets at UTC midnight" not in fork


@pytest.mark.parametrize(
    ("code", "spent", "ahead", "budget", "proposed"),
    [
        (
            "BUDGET_TOKENS",
            {"tokens": 1200, "max_tokens": 3000},
            NextCall(tokens=5892),
            "--max-tokens 14186  (twice what steps 1..3 used and the next model call's "
            "prompt needs; ",
            14186,
        ),
        (
            "BUDGET_COST",
            {"cost_usd": 0.012, "max_cost_usd": 0.02},
            NextCall(cost_usd=0.0589),
            "--max-cost-usd 0.15  (twice what",
            0.15,
        ),
        (
            "BUDGET_TOKENS",
            {"tokens": 2400, "max_tokens": 3000},
            NextCall(tokens=1246),
            # twice the budget, 6,000, is taken, but leaves the fork's answers little room
            "--max-tokens 7294  (twice what steps 1..3 used and the next model call's ",
            7294,
        ),
    ],
)
def test_a_proposed_budget_leaves_the_next_prompt_room(
    code: str, spent: dict[str, Any], ahead: NextCall, budget: str, proposed: float
) -> None:
    """Twice the budget was proposed where the last output made the next prompt larger than
    that: `dlq fork` with it was refused ("give --max-tokens above 7,092"). What the kept
    steps used and the prompt the session stopped before is proposed, doubled; the prompt
    read back out of the stop's message as the runtime writes it."""
    field = "max_tokens" if code == "BUDGET_TOKENS" else "max_cost_usd"
    view = letter(code, **{field: spent[field]})
    view["message"] = _stopped_before(ahead, **spent)
    view["session"]["head"].update({k: v for k, v in spent.items() if k != field})
    assert budget in remedies(view)[0]
    assert fork_budgets(view) == {field: proposed}


def _stopped_before(ahead: NextCall, **used: Any) -> str:
    """What the runtime's dead letter says of a session that `used` (tokens, cost_usd and
    their budgets) stopped before a call whose prompt is `ahead`."""
    at = datetime(2026, 12, 7, tzinfo=UTC)
    budgets = Budgets(**{k: v for k, v in used.items() if k.startswith("max_")})
    head = Head(
        id="s-1",
        kind="repair",
        status=Status.READY,
        created_at=at,
        updated_at=at,
        model="test-model",
        budgets=budgets,
        **{k: v for k, v in used.items() if not k.startswith("max_")},
    )
    stop = exhausted_budget(head, now=at, next_call=ahead)
    assert stop is not None and PROMPT_AHEAD.split("{shown}")[0] in stop.message, stop
    return stop.message


def test_a_budget_nearly_spent_beside_the_one_run_out_is_raised_with_it() -> None:
    """A session out of steps with 90% of its tokens spent: the proposed fork doubled its
    steps only, and stopped on its tokens one step later. Each other budget the session
    used more than half of is raised to twice its use, so the fork may run as long again;
    one used less than half is left as it was."""
    view = letter("BUDGET_STEPS", step=20, max_steps=20, max_tokens=10_000, max_cost_usd=1.0)
    view["session"]["head"].update({"tokens": 9_000, "cost_usd": 0.12})
    assert fork_budgets(view) == {"max_steps": 40, "max_tokens": 18_000}
    [fork, *_] = remedies(view)
    assert fork.startswith("tickwork dlq fork 7 --from-step 20 --max-steps 40 --max-tokens 18000 ")
    assert "--max-tokens twice what steps 1..20 used, more than half of the budget" in fork

    deadline = letter("DEADLINE", step=30, deadline_s=60.0, max_cost_usd=0.5)
    deadline["session"]["head"].update({"cost_usd": 0.4012})
    # 30 steps of 50: a fork of 30 more would run out of steps too
    assert fork_budgets(deadline) == {"deadline_s": 120.0, "max_steps": 60, "max_cost_usd": 0.81}
    assert remedies(deadline)[0].startswith(
        "tickwork dlq fork 7 --from-step 30 --deadline 120 --max-steps 60 --max-cost-usd 0.81 "
    )
