"""The chat transcript a model sees, built from the stored steps."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .values import Head, Observation, Step

Message = dict[str, Any]


def messages(
    head: Head, steps: Sequence[Step], observations: Mapping[str, Observation]
) -> list[Message]:
    """OpenAI-style messages: system, the task, then each step and its observations.

    Each call goes back under the provider's own id when it gave one (servers may check
    them: Mistral's take 9 letters and digits), else under ours (`ToolCall.wire_id`).
    """
    config = head.config
    out: list[Message] = []
    if config.get("system_prompt"):
        out.append({"role": "system", "content": config["system_prompt"]})
    task = config.get("user_prompt") or json.dumps(head.input, ensure_ascii=False)
    out.append({"role": "user", "content": task})
    instructions: dict[int, list[str]] = {}
    for item in config.get("instructions", []):
        instructions.setdefault(int(item["after_step"]), []).append(str(item["text"]))
    out.extend({"role": "user", "content": t} for t in instructions.get(0, []))
    for step in steps:
        assistant: Message = {"role": "assistant", "content": step.thought}
        if step.calls:
            assistant["tool_calls"] = [
                {
                    "id": c.wire_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.raw_arguments},
                }
                for c in step.calls
            ]
        out.append(assistant)
        for call in step.calls:
            seen = observations.get(call.call_id)
            if seen is not None:
                content = f"ERROR: {seen.content}" if seen.is_error else seen.content
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.wire_id,
                        "name": call.name,
                        "content": content,
                    }
                )
        limit = head.budgets.max_calls_per_step
        if len(step.calls) >= limit:
            out.append(
                {
                    "role": "user",
                    "content": (
                        f"At most {limit} tool calls of a reply run; any calls after the {limit}th "
                        "were dropped. Make fewer calls per reply."
                    ),
                }
            )
        out.extend({"role": "user", "content": t} for t in instructions.get(step.step, []))
    return out
