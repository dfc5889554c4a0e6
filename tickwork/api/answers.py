"""What the API answers besides the store's own values: models for the OpenAPI schema and
for the remote client, which reads the answers with them."""

from __future__ import annotations

from pydantic import Field

from tickwork.fsm.outcomes import Outcome
from tickwork.fsm.values import Head


class Listed(Head):
    """A session's head in a list, with what a finished repair achieved."""

    outcome: Outcome | None = Field(
        default=None,
        description="A completed repair's outcome; null for other kinds, unfinished sessions "
        "and sessions stored before outcomes were recorded.",
    )
