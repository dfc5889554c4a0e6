"""The chat transcript a model sees, built from the stored steps (`tickwork.fsm.context` decides
which of them are shown whole, masked or summarised)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tickwork.fsm.context import Message, build, stored_view
from tickwork.fsm.values import Head, Observation, Step

__all__ = ["Message", "messages"]


def messages(
    head: Head, steps: Sequence[Step], observations: Mapping[str, Observation]
) -> list[Message]:
    """OpenAI-style messages under the view the stored steps were last made with (no new
    masking or compaction: `tickwork.fsm.context.plan` decides those for the next THINK)."""
    return build(head, steps, observations, stored_view(steps))
