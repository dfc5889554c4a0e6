"""A model provider for the tests, found through TICKWORK_IMPORTS: `canned:WORD` answers WORD.

It is what a third-party provider is: one module holding a `Provider`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tickwork.fsm.errors import InvalidModelSpec
from tickwork.fsm.values import ModelReply, Usage
from tickwork.worker.models import Message, ModelSettings, Price, Provider, ToolSchema


@dataclass
class CannedModel:
    """Answers every transcript with its word, as a final answer, for 1000 + 100 tokens."""

    word: str
    timeout_s: float | None = None

    def generate(
        self, messages: list[Message], tools: list[ToolSchema], settings: ModelSettings
    ) -> ModelReply:
        return ModelReply(content=self.word, usage=Usage(prompt_tokens=1000, completion_tokens=100))


def check(rest: str) -> None:
    if not rest.isalnum():
        raise InvalidModelSpec(f"canned:{rest[:40]!r} must be one word of letters and digits")


def make(rest: str, *, timeout_s: float | None) -> CannedModel:
    return CannedModel(rest, timeout_s)


CANNED = Provider(
    prefix="canned",
    help="canned:WORD (answers WORD)",
    make=make,
    check=check,
    price=lambda rest: Price(10.0, 100.0),
    label=lambda rest: "canned",
)
