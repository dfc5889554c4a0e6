"""Loop detection: a pure function of the step-fingerprint history (docs/DESIGN.md section 4)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from tickwork.fsm.values import Value


class LoopKind(StrEnum):
    STAGNATION = "stagnation"  #: the same step several times in a row
    PING_PONG = "ping_pong"  #: two steps alternating


class Loop(Value):
    kind: LoopKind
    period: int
    repeats: int


#: How many recent step fingerprints detection needs at most.
HISTORY = 16


def detect_loop(history: Sequence[str], *, max_consecutive_repeats: int = 3) -> Loop | None:
    """The loop the newest fingerprints form, or None.

    `history` is oldest first and ends with the step just recorded.
    """
    if not history:
        return None
    last = history[-1]
    repeats = 0
    for fingerprint in reversed(history):
        if fingerprint != last:
            break
        repeats += 1
    if repeats >= max_consecutive_repeats:
        return Loop(kind=LoopKind.STAGNATION, period=1, repeats=repeats)
    if len(history) >= 4:
        a, b, c, d = history[-4:]
        if a == c and b == d and a != b:
            return Loop(kind=LoopKind.PING_PONG, period=2, repeats=2)
    return None


def intervention_text(loop: Loop) -> str:
    if loop.kind is LoopKind.STAGNATION:
        what = f"you proposed exactly the same tool calls {loop.repeats} times in a row"
    else:
        what = "you are alternating between the same two sets of tool calls"
    return (
        f"Loop detected: {what}. These calls were not run. "
        "Change your approach: re-read the latest observations, try a different tool or "
        "different arguments, or give your final answer."
    )
