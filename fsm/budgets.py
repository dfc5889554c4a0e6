"""Budget checks made before every model call (DESIGN section 6)."""

from __future__ import annotations

from datetime import datetime

from .values import ErrorCode, Head, Value


class Exhausted(Value):
    code: ErrorCode
    message: str


def exhausted_budget(head: Head, *, now: datetime) -> Exhausted | None:
    """The first budget the session has used up, or None."""
    b = head.budgets
    if head.step >= b.max_steps:
        return Exhausted(
            code=ErrorCode.BUDGET_STEPS,
            message=f"{head.step} steps made, max_steps is {b.max_steps}",
        )
    if head.tokens >= b.max_tokens:
        return Exhausted(
            code=ErrorCode.BUDGET_TOKENS,
            message=f"{head.tokens} tokens used, max_tokens is {b.max_tokens}",
        )
    if head.cost_usd >= b.max_cost_usd:
        return Exhausted(
            code=ErrorCode.BUDGET_COST,
            message=f"${head.cost_usd:.4f} spent, max_cost_usd is ${b.max_cost_usd}",
        )
    elapsed = (now - head.created_at).total_seconds()
    if elapsed >= b.deadline_s:
        return Exhausted(
            code=ErrorCode.DEADLINE,
            message=f"{elapsed:.0f}s since creation, deadline_s is {b.deadline_s:g}",
        )
    return None


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
    if head.cost_usd >= b.max_cost_usd:
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
