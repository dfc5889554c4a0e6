"""What a model is: the `Model` protocol and the settings of one call."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from tickwork.fsm.values import ModelReply

#: an OpenAI chat message: system, user, assistant (maybe with `tool_calls`) or tool
Message = dict[str, Any]
#: an OpenAI tool schema: `{"type": "function", "function": {"name", "description", "parameters"}}`
ToolSchema = dict[str, Any]


class ModelSettings(BaseModel):
    """How to call the model for one THINK; what is left unset is the server's choice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    #: most tokens the completion may have
    max_tokens: int | None = Field(default=None, gt=0)
    #: seconds to wait on the server (to connect, and between bytes of the answer)
    timeout_s: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    #: more request fields sent as they are, e.g. `stop`, `seed`, `top_p`
    extra: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class Model(Protocol):
    """Anything that answers a chat transcript, natively or not with tool calls."""

    def generate(
        self, messages: list[Message], tools: list[ToolSchema], settings: ModelSettings
    ) -> ModelReply:
        """One reply to `messages`.

        Raises `TransientModelError` when the same call may succeed later (timeout,
        connection, 429, 5xx, a cut-off answer) and `PermanentModelError` when it will not.
        """
        ...


def estimate_tokens(text: str) -> int:
    """A rough token count for servers and scripts that report no usage: four characters each."""
    return len(text) // 4


def transcript_text(messages: list[Message]) -> str:
    """The text of a transcript, contents and tool-call arguments, for estimating its tokens."""
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            parts.append(str(function.get("name") or ""))
            parts.append(str(function.get("arguments") or ""))
    return "\n".join(parts)


def estimate_prompt(messages: Sequence[Message]) -> int:
    """A prompt's tokens as the context policy counts them (`tickwork.fsm.context`)."""
    return estimate_tokens(transcript_text(list(messages)))


def estimate_schemas(tools: Sequence[Mapping[str, Any]]) -> int:
    """The tokens of the tools' schemas a call sends beside its messages, estimated as a
    prompt is: they count in the model's context window as the messages do."""
    return estimate_tokens(json.dumps(list(tools)))
