"""Budget checks made before every model call (docs/DESIGN.md section 6).

A budget stops the session before a call that would take it past its limit: the caller
estimates what the next call will read (`NextCall`), and the call is sent with a completion
cap (`completion_cap`) that keeps what it writes within what is left, since a call's cost
is only known after it is paid for.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from tickwork.fsm.values import ErrorCode, Head, Value, utc_date
from tickwork.fsm.wording import dollars, plain

#: how a day-quota stop says the next call's prompt alone is over the whole quota: no day
#: of it has room, so no fork after the reset goes on (`tickwork.remedies` reads it)
OVER_THE_WHOLE_QUOTA = "that prompt alone costs more than the whole quota"
#: how a stop before a call (`exhausted_budget`) and a fork's refusal say what the call's
#: prompt was estimated at, in tokens or as `$` and dollars (`tickwork.remedies` reads the
#: amount back out of a dead letter's message)
PROMPT_AHEAD = "the next model call's prompt is estimated at {shown} more"


class Exhausted(Value):
    code: ErrorCode
    message: str


class NextCall(Value):
    """What the next model call is expected to read, estimated by the caller, and what each
    token it writes costs: its completion cap follows from them and the budgets left."""

    #: the prompt's tokens
    tokens: int = 0
    #: the prompt's cost
    cost_usd: float = 0.0
    #: what each completion token costs (0: unpriced, the cost budget does not cap it)
    usd_per_completion_token: float = 0.0
    #: the most completion tokens the model may write (its own limit, or the settings'
    #: max_tokens); None: no limit of its own
    max_completion_tokens: int | None = None


class TenantDay(Value):
    """What the session's tenant spent of its `max_usd_per_day` on the day the session
    counts to (the UTC day it was created: docs/OPERATIONS.md, "Tenants and quotas"),
    read before a model call: the call may spend no more than what is left."""

    tenant: str
    #: the tenant's max_usd_per_day
    quota_usd: float
    #: what the tenant's sessions created that day spent, this one's included
    spent_usd: float
    #: the UTC midnight the day starts at
    day: datetime

    @property
    def resets_at(self) -> datetime:
        """When the day ends and the tenant's next one starts (new sessions, and forks,
        count to it); in the past once the day has ended (`next_reset`)."""
        return self.day + timedelta(days=1)

    def next_reset(self, now: datetime) -> datetime:
        """The first UTC midnight after `now` and after the day: never a time past."""
        today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return max(self.resets_at, today + timedelta(days=1))


class Cap(Value):
    """The completion cap of the next model call: the most tokens it may write."""

    #: below 1: the budget named by `code` is spent before the call
    tokens: int
    #: the budget that set it, or None when the model's own limit did
    code: ErrorCode | None = None
    #: the tenant's day quota set it (code BUDGET_COST), not the session's max_cost_usd
    by_tenant: bool = False


def completion_cap(head: Head, next_call: NextCall, day: TenantDay | None = None) -> Cap:
    """The most completion tokens the next call may write so that, with its prompt, it stays
    within the tokens and the cost left, and within the model's own limit.

    A server that honours the cap can then take the session past `max_cost_usd` only by
    what the prompt's estimate fell short of; the call's cost is at most its prompt plus
    the cap at the completion price (docs/DESIGN.md section 14). With `day`, what is left
    of the tenant's day quota caps it too."""
    return min(_caps(head, next_call, day), key=lambda cap: cap.tokens)


def _caps(head: Head, next_call: NextCall, day: TenantDay | None = None) -> list[Cap]:
    """The cap each budget, the tenant's day quota, and the model set on the next call."""
    b = head.budgets
    caps = [Cap(tokens=b.max_tokens - head.tokens - next_call.tokens, code=ErrorCode.BUDGET_TOKENS)]
    if b.limits_cost:
        left = b.max_cost_usd - (head.cost_usd + next_call.cost_usd)
        if left < 0 or head.cost_usd >= b.max_cost_usd:
            caps.append(Cap(tokens=0, code=ErrorCode.BUDGET_COST))
        elif next_call.usd_per_completion_token > 0:
            # a tiny price must not make a number too large to send
            tokens = min(left / next_call.usd_per_completion_token, float(2**31 - 1))
            caps.append(Cap(tokens=math.floor(tokens), code=ErrorCode.BUDGET_COST))
    if day is not None:
        left = day.quota_usd - (day.spent_usd + next_call.cost_usd)
        if left < 0 or day.spent_usd >= day.quota_usd:
            caps.append(Cap(tokens=0, code=ErrorCode.BUDGET_COST, by_tenant=True))
        elif next_call.usd_per_completion_token > 0:
            tokens = min(left / next_call.usd_per_completion_token, float(2**31 - 1))
            caps.append(Cap(tokens=math.floor(tokens), code=ErrorCode.BUDGET_COST, by_tenant=True))
    if next_call.max_completion_tokens is not None:
        caps.append(Cap(tokens=next_call.max_completion_tokens))
    return caps


def cut_at(
    cap: Cap,
    next_call: NextCall,
    *,
    lowered: bool = False,
    day: TenantDay | None = None,
    now: datetime | None = None,
) -> Exhausted | None:
    """What a reply cut off at `cap` ends the session with, if a budget set the cap (a cut
    at the model's own limit is the model's business, and so is one at a cap the model
    `lowered` below `cap` to the room the server said its window left); `day`: the
    tenant's day quota the cap was computed with, `now` when the reply came (the reset
    the message names is the next one after it)."""
    if cap.code is None or lowered:
        return None
    if cap.by_tenant and day is not None:
        return Exhausted(
            code=cap.code,
            message=f"the model's answer was cut at {cap.tokens:,} completion tokens, all "
            f"that was left after its prompt of about {next_call.tokens:,} tokens of tenant "
            f"{day.tenant}'s quota `max_usd_per_day` of ${plain(day.quota_usd)} for the sessions "
            f"created on {day.day.date().isoformat()} (UTC): " + _day_advice(day, now),
        )
    left = "tokens" if cap.code is ErrorCode.BUDGET_TOKENS else "cost"
    return Exhausted(
        code=cap.code,
        message=f"the model's answer was cut at {cap.tokens:,} completion tokens, all the "
        f"{left} budget left after its prompt of about {next_call.tokens:,} tokens",
    )


def exhausted_budget(
    head: Head,
    *,
    now: datetime,
    next_call: NextCall | None = None,
    day: TenantDay | None = None,
) -> Exhausted | None:
    """The first budget the session has used up, or that leaves the next call (its prompt
    as `next_call` estimates it) no completion token, or None; with `day`, its tenant's
    `max_usd_per_day` is such a budget too (BUDGET_COST, the message naming the quota)."""
    b = head.budgets
    ahead = next_call or NextCall()
    if head.step >= b.max_steps:
        return Exhausted(
            code=ErrorCode.BUDGET_STEPS,
            message=f"{head.step} step{'' if head.step == 1 else 's'} made, "
            f"`max_steps` is {b.max_steps}",
        )
    caps = _caps(head, ahead, day)
    spent = {cap.code for cap in caps if cap.tokens < 1 and not cap.by_tenant}
    if head.tokens >= b.max_tokens or ErrorCode.BUDGET_TOKENS in spent:
        return Exhausted(
            code=ErrorCode.BUDGET_TOKENS,
            message=f"{head.tokens:,} tokens used{_more(ahead.tokens, f'{ahead.tokens:,}')}, "
            f"`max_tokens` is {b.max_tokens:,}",
        )
    if b.limits_cost and (head.cost_usd >= b.max_cost_usd or ErrorCode.BUDGET_COST in spent):
        return Exhausted(
            code=ErrorCode.BUDGET_COST,
            message=f"${dollars(head.cost_usd)} spent"
            f"{_more(ahead.cost_usd, f'${dollars(ahead.cost_usd)}')}"
            f", `max_cost_usd` is ${plain(b.max_cost_usd)}",
        )
    if day is not None and any(cap.by_tenant and cap.tokens < 1 for cap in caps):
        return Exhausted(
            code=ErrorCode.BUDGET_COST, message=day_spent(day, ahead.cost_usd, now=now)
        )
    late = deadline_passed(head, now=now)
    return None if late is None else Exhausted(code=ErrorCode.DEADLINE, message=late)


def day_spent(day: TenantDay, ahead_usd: float = 0.0, *, now: datetime | None = None) -> str:
    """Why a session stops on its tenant's day quota at `now`: what was spent, the quota,
    when the tenant's next day starts and what to do; a next call whose prompt alone
    (`ahead_usd`) is over the whole quota fits in no day, so waiting for one is no help."""
    room = ahead_usd > 0 and day.spent_usd < day.quota_usd
    said = (
        f"tenant {day.tenant}'s quota `max_usd_per_day` of ${plain(day.quota_usd)} "
        f"{'has no room for the next model call' if room else 'is spent'}: its sessions "
        f"created on {day.day.date().isoformat()} (UTC) spent ${dollars(day.spent_usd)}"
        f"{_more(ahead_usd, f'${dollars(ahead_usd)}')}; "
    )
    if ahead_usd >= day.quota_usd:
        return said + (
            f"{OVER_THE_WHOLE_QUOTA}, so no day of it has room for this session's next "
            "call: ask the operator to raise the quota, or fork this "
            "session onto a cheaper model"
        )
    return said + _day_advice(day, now)


def _day_advice(day: TenantDay, now: datetime | None) -> str:
    if now is not None and now >= day.resets_at:
        # a session runs (or waits for a person) past its day's midnight: that reset is
        # past, and a fork made now counts to today
        return (
            "this session's spending counts to that day, which has ended: fork this session "
            "to go on, a fork counts to the day it is made (the quota next resets at "
            f"{utc_date(day.next_reset(now))}), or ask the operator to raise the quota"
        )
    return (
        "this session's spending counts to that day; the quota resets at "
        f"{utc_date(day.resets_at)}, fork this session after it to go on (or ask the "
        "operator to raise the quota)"
    )


def deadline_passed(head: Head, *, now: datetime) -> str | None:
    """Why the session's deadline has passed (the wait of a queued session included), or
    None."""
    elapsed = (now - head.created_at).total_seconds()
    if elapsed >= head.budgets.deadline_s:
        return f"{elapsed:.0f}s since creation, `deadline_s` is {plain(head.budgets.deadline_s)}"
    return None


def _more(amount: float, shown: str) -> str:
    if amount <= 0:
        return ""
    return f" and {PROMPT_AHEAD.format(shown=shown)}, leaving no room for its answer"


def stop_reason(head: Head, *, now: datetime) -> str | None:
    """Why a tool running for this session must stop now, or None.

    A cancel, the deadline and the cost budget stop a running call (the session ends at its
    next tick anyway); the step and token budgets cannot change while a tool runs.
    """
    b = head.budgets
    if head.cancel_requested:
        return "the session was cancelled"
    elapsed = (now - head.created_at).total_seconds()
    if elapsed >= b.deadline_s:
        return (
            f"the session's deadline passed ({elapsed:.0f}s, `deadline_s` is {plain(b.deadline_s)})"
        )
    if b.limits_cost and head.cost_usd >= b.max_cost_usd:
        return f"the session's cost budget is spent (`max_cost_usd` is ${plain(b.max_cost_usd)})"
    return None


def model_retry_delay(
    attempt: int, *, factor: float = 1.0, max_delay: float = 60.0, jitter: float = 0.0
) -> float:
    """Exponential backoff for the n-th (1-based) transient model failure.

    Half the delay is fixed, half scaled by `jitter` in [0, 1], which the caller draws,
    so this stays deterministic.
    """
    base = min(max_delay, factor * 2.0 ** (attempt - 1))
    return base / 2 + base / 2 * jitter
