"""Budget checks made before every model call (DESIGN section 6).

A budget stops the session before a call that would take it past its limit: the caller
estimates what the next call will use (`NextCall`), since a call's cost is only known after
it is paid for.
"""

from __future__ import annotations

from datetime import datetime

from .values import ErrorCode, Head, Value


class Exhausted(Value):
    code: ErrorCode
    message: str


class NextCall(Value):
    """What the next model call is expected to use, estimated by the caller."""

    tokens: int = 0
    cost_usd: float = 0.0


def exhausted_budget(
    head: Head, *, now: datetime, next_call: NextCall | None = None
) -> Exhausted | None:
    """The first budget the session has used up, or would pass with `next_call`, or None."""
    b = head.budgets
    ahead = next_call or NextCall()
    if head.step >= b.max_steps:
        return Exhausted(
            code=ErrorCode.BUDGET_STEPS,
            message=f"{head.step} step{'' if head.step == 1 else 's'} made, "
            f"max_steps is {b.max_steps}",
        )
    if head.tokens >= b.max_tokens or head.tokens + ahead.tokens > b.max_tokens:
        return Exhausted(
            code=ErrorCode.BUDGET_TOKENS,
            message=f"{head.tokens} tokens used{_more(ahead.tokens, f'{ahead.tokens}')}, "
            f"max_tokens is {b.max_tokens}",
        )
    if b.limits_cost and (
        head.cost_usd >= b.max_cost_usd or head.cost_usd + ahead.cost_usd > b.max_cost_usd
    ):
        return Exhausted(
            code=ErrorCode.BUDGET_COST,
            message=f"${head.cost_usd:.4f} spent{_more(ahead.cost_usd, f'${ahead.cost_usd:.4f}')}"
            f", max_cost_usd is ${b.max_cost_usd}",
        )
    elapsed = (now - head.created_at).total_seconds()
    if elapsed >= b.deadline_s:
        return Exhausted(
            code=ErrorCode.DEADLINE,
            message=f"{elapsed:.0f}s since creation, deadline_s is {b.deadline_s:g}",
        )
    return None


def _more(amount: float, shown: str) -> str:
    return f" and the next model call is estimated at {shown} more" if amount > 0 else ""


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
        return f"the session's deadline passed ({elapsed:.0f}s, deadline_s is {b.deadline_s:g})"
    if b.limits_cost and head.cost_usd >= b.max_cost_usd:
        return f"the session's cost budget is spent (max_cost_usd is ${b.max_cost_usd})"
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
