"""What an operator may do about an open dead letter, by its code: the `dlq fork` that raises
what the session ran out of, or goes back to before its loop, and how to close it instead
(`tickwork dlq show` prints them under `next`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tickwork.fsm.budgets import OVER_THE_WHOLE_QUOTA, PROMPT_AHEAD
from tickwork.fsm.wording import plain, two_digits

#: a budget's code: the fork option that raises it and its budget field
_RAISED = {
    "BUDGET_STEPS": ("--max-steps", "max_steps"),
    "BUDGET_TOKENS": ("--max-tokens", "max_tokens"),
    "BUDGET_COST": ("--max-cost-usd", "max_cost_usd"),
    "DEADLINE": ("--deadline", "deadline_s"),
}

#: a budget field's fork option
_OPTION = {name: option for option, name in _RAISED.values()}


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
    raised = fork_budgets(letter)
    if raised:
        option, field = _RAISED[code]
        counts = (
            "counted from the fork" if code == "DEADLINE" else f"steps 1..{step} count against it"
        )
        doubled = raised[field] == (head.get("budgets") or {}).get(field, 0) * 2
        what = (
            "the budget it ran out of"
            if doubled
            else f"what steps 1..{step} used and the next model call's prompt needs"
        )
        along = {name: value for name, value in raised.items() if name != field}
        more = "".join(f" {_OPTION[name]} {plain(value)}" for name, value in along.items())
        also = (
            f"; {', '.join(_OPTION[name] for name in along)} twice what steps 1..{step} used"
            ", more than half of the budget, so that the fork may run as long again"
            if along
            else ""
        )
        said.append(
            f"{fork} {step} {option} {plain(raised[field])}{more}  (twice {what}; {counts}{also})"
        )
    elif code == "BUDGET_COST" and OVER_THE_WHOLE_QUOTA in letter["message"]:
        # the next call's prompt alone is over the day quota: no next day has room for it
        tenant = head.get("tenant") or "its tenant"
        said.append(
            f"{fork} {step}  (once tenant {tenant}'s quota `max_usd_per_day` is raised in "
            "TICKWORK_TENANTS_FILE above the next call's prompt, or with --model SPEC for a "
            "cheaper model: waiting for the reset is no help)"
        )
    elif code == "BUDGET_COST" and "tenant" in letter["message"]:
        # the tenant's day quota, no budget of the session: the fork waits for its next day
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


def fork_budgets(letter: Mapping[str, Any]) -> dict[str, float]:
    """The budget a fork of the dead letter `letter` (its view, with its session) from its
    last step is given so that it does not stop as its session did: twice the one that ran
    out, or twice what the kept steps used and the next model call's prompt needs where
    that is more (a fork is refused a budget they leave no room in:
    `tickwork.fsm.forks.fork`), by its field (`dlq show`'s next step and the page's fork
    form propose it); {} for another cause, or a tenant's day quota spent, which is no
    budget of the session, or a letter closed."""
    code = letter["code"]
    if (
        letter.get("resolved_at")
        or code not in _RAISED
        or (code == "BUDGET_COST" and "tenant" in letter["message"])
    ):
        return {}
    field = _RAISED[code][1]
    head = (letter.get("session") or {}).get("head") or {}
    budget = (head.get("budgets") or {}).get(field)
    if isinstance(budget, bool) or not isinstance(budget, int | float) or budget <= 0:
        return {}
    needed = _needed(field, head, letter)
    if needed <= budget:
        raised: dict[str, float] = {field: budget * 2}
    else:
        raised = {field: needed * 2 if field == "max_tokens" else _dollars_up(needed * 2)}
    return raised | _along(field, head)


#: the budgets the kept steps count against, each with what the session used of it
_USED = (("max_steps", "step"), ("max_tokens", "tokens"), ("max_cost_usd", "cost_usd"))


def _along(field: str, head: Mapping[str, Any]) -> dict[str, float]:
    """The session's other budgets (than `field`, the one it ran out of) that a fork given
    room to run as long again would run out of next: each one of which the session used
    more than half, raised to twice that use (a fork of a session out of steps with 90% of
    its tokens spent stopped at once on its tokens)."""
    budgets = head.get("budgets") or {}
    raised: dict[str, float] = {}
    for name, used_at in _USED:
        limit, used = budgets.get(name), _number(head.get(used_at))
        if name == field or isinstance(limit, bool) or not isinstance(limit, int | float):
            continue
        if limit > 0 and used * 2 > limit:
            raised[name] = _dollars_up(used * 2) if name == "max_cost_usd" else int(used) * 2
    return raised


def _dollars_up(amount: float) -> float:
    return float(two_digits(amount, up=True))


#: the next call's prompt as the runtime estimated it in stopping the session, in the
#: letter's message (`tickwork.fsm.budgets.exhausted_budget`): tokens, or dollars
_AHEAD = re.compile(r"\$?(\d[\d,]*(?:\.\d+)?)".join(map(re.escape, PROMPT_AHEAD.split("{shown}"))))


def _needed(field: str, head: Mapping[str, Any], letter: Mapping[str, Any]) -> float:
    """The least `field` (max_tokens or max_cost_usd) a fork from the session's last step
    is taken with: what its steps used and the next prompt the runtime stopped before, as
    the letter's message says it (for tokens at least what the last reply read and wrote,
    which that prompt holds), and a token or a dollar cent's hundredth over; 0 for another
    budget."""
    found = _AHEAD.search(str(letter.get("message") or ""))
    ahead = float(found.group(1).replace(",", "")) if found else 0.0
    if field == "max_tokens":
        steps = (letter.get("session") or {}).get("steps") or ()
        last = steps[-1] if steps else {}
        if last.get("kind", "reply") == "reply":
            ahead = max(ahead, float(last.get("tokens") or 0))
        return int(_number(head.get("tokens")) + ahead) + 1
    if field == "max_cost_usd":
        # the message says dollars to 4 decimals: the prompt may cost up to half a step more
        return _number(head.get("cost_usd")) + (ahead + 0.00005 if found else 0.0)
    return 0.0


def _number(value: Any) -> float:
    return 0.0 if isinstance(value, bool) or not isinstance(value, int | float) else value


def _before_loop(steps: Sequence[Mapping[str, Any]]) -> int:
    """The last step before the trailing run in which each step's fingerprint is the one two
    steps later's, the repetition a loop is (stagnation: A A A; ping-pong: A B A B); 0 when
    every step is in it."""
    prints = [s.get("fingerprint") for s in steps]
    at = max(len(prints) - 2, 0)
    while at > 0 and prints[at - 1] == prints[at + 1]:
        at -= 1
    return at
