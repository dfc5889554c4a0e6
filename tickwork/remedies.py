"""What an operator may do about an open dead letter, by its code: the `dlq fork` that raises
what the session ran out of, or goes back to before its loop, and how to close it instead
(`tickwork dlq show` prints them under `next`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .parsing import plain

#: a budget's code: the fork option that raises it and its budget field
_RAISED = {
    "BUDGET_STEPS": ("--max-steps", "max_steps"),
    "BUDGET_TOKENS": ("--max-tokens", "max_tokens"),
    "BUDGET_COST": ("--max-cost-usd", "max_cost_usd"),
    "DEADLINE": ("--deadline", "deadline_s"),
}


def remedies(letter: Mapping[str, Any]) -> list[str]:
    """The commands that deal with the open dead letter `letter` (its view, with its
    session), one a line; none for one forked, resolved or dismissed already."""
    if letter.get("resolved_at"):
        return []
    session = letter.get("session") or {}
    head = session.get("head") or {}
    step = int(head.get("step") or 0)
    fork = f"tickwork dlq fork {letter['id']} --from-step"
    code = letter["code"]
    said: list[str] = []
    # a tenant's day quota spent (the message names the tenant) is no budget of the session
    if code in _RAISED and not (code == "BUDGET_COST" and "tenant" in letter["message"]):
        option, field = _RAISED[code]
        budget = (head.get("budgets") or {}).get(field)
        if isinstance(budget, int | float) and budget > 0:
            counts = (
                "counted from the fork"
                if code == "DEADLINE"
                else f"steps 1..{step} count against it"
            )
            said.append(
                f"{fork} {step} {option} {plain(budget * 2)}  (twice the budget it ran out "
                f"of; {counts})"
            )
    elif code == "BUDGET_COST":  # the tenant's day quota: the fork waits for its next day
        tenant = head.get("tenant") or "its tenant"
        said.append(
            f"{fork} {step}  (after tenant {tenant}'s quota `max_usd_per_day` resets at UTC "
            "midnight: a fork counts to the day it is made; or raise the quota in "
            "TICKWORK_TENANTS_FILE)"
        )
    elif code == "LOOP":
        before = _before_loop(session.get("steps") or ())
        said.append(
            f'{fork} {before} --append-instruction "TEXT"  (from before the repeated '
            "steps, telling the model what to do instead)"
        )
    elif code == "CONTEXT":
        said.append(f"{fork} {step} --context-window TOKENS  (a larger window)")
    elif code == "MODEL_ERROR":
        said.append(
            f"{fork} {step}  (once the model's settings are mended; --model SPEC for another)"
        )
    else:
        said.append(f"{fork} {step}  (once what failed it is mended)")
    said.append(f'tickwork dlq resolve {letter["id"]} --reason "TEXT"  (dealt with another way)')
    said.append(f'tickwork dlq dismiss {letter["id"]} --reason "TEXT"  (nothing to be done)')
    return said


def _before_loop(steps: Sequence[Mapping[str, Any]]) -> int:
    """The last step before the trailing run in which each step's fingerprint is the one two
    steps later's, the repetition a loop is (stagnation: A A A; ping-pong: A B A B); 0 when
    every step is in it."""
    prints = [s.get("fingerprint") for s in steps]
    at = max(len(prints) - 2, 0)
    while at > 0 and prints[at - 1] == prints[at + 1]:
        at -= 1
    return at
