"""Counts in messages and logs: "1 session", never "1 sessions"."""

from __future__ import annotations

from decimal import Decimal

from tickwork.fsm.wording import counted, dollars, two_digits, usd


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "session") == "1 session"
    assert [counted(n, "tick") for n in (0, 2, 1000)] == ["0 ticks", "2 ticks", "1000 ticks"]
    assert counted(1, "batch", "batches") == "1 batch"
    assert counted(3, "batch", "batches") == "3 batches"
    assert counted(2, "dead letter") == "2 dead letters"


def test_dollars_read_as_people_write_them() -> None:
    """Budgets' and quotas' messages said `$10.0`, `$2.5000` and `$0.0000` (a cost below a
    hundredth of a cent): whole dollars read bare, else with cents, and an amount below a
    cent to its significant digits, never as nothing."""
    assert [dollars(v) for v in (10, 10.0, 10.5, 2.5, 1234.5)] == [
        "10",
        "10",
        "10.50",
        "2.50",
        "1234.50",
    ]
    assert [dollars(v) for v in (0.0132, 0.015, 0.01976, 1.23456)] == [
        "0.0132",
        "0.015",
        "0.0198",
        "1.2346",
    ]
    assert [dollars(v) for v in (0, 0.00001234, 0.000001)] == ["0", "0.000012", "0.000001"]
    # an amount a budget must pass is rounded up: giving it passes
    assert dollars(0.00001234, up=True) == "0.000013"
    assert dollars(1.23451, up=True) == "1.2346"


def test_a_budget_to_pass_rounds_up_to_two_digits_as_a_spend_below_a_cent_shows() -> None:
    """`dlq show` proposed a raised budget rounded by a copy of what `dollars` does below a
    cent; both round with `two_digits`, so they agree."""
    assert two_digits(12.01, up=True) == Decimal(13)
    assert two_digits(0.1419, up=True) == Decimal("0.15")
    assert two_digits(0.00001234) == Decimal("0.000012")
    assert dollars(0.00001234, up=True) == str(two_digits(0.00001234, up=True)) == "0.000013"
    assert two_digits(0) == 0


def test_a_cost_below_a_hundredth_of_a_cent_is_listed_as_less_than_one() -> None:
    """`tickwork ls`, `show` and the page listed a step of a cheap model that cost
    $0.00003 as `$0.0000`, as a session that spent nothing: a cost spent reads
    `<$0.0001`, nothing spent `$0.0000`."""
    assert [usd(v) for v in (0, 0.0, 0.00003, 0.0000001, 0.00009999)] == [
        "$0.0000",
        "$0.0000",
        "<$0.0001",
        "<$0.0001",
        "<$0.0001",
    ]
    assert [usd(v) for v in (0.0001, 0.0132, 1.23456, 12)] == [
        "$0.0001",
        "$0.0132",
        "$1.2346",
        "$12.0000",
    ]
