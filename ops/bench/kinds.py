"""The benchmark's job kind: tools that return at once, and scripts for the scripted model.

Workers import it by the kind name `ops.bench.kinds:BENCH`, so it must be importable from
the repository root (the workers' PYTHONPATH).
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tickwork.worker.jobs import JobKind
from tickwork.worker.tools.registry import ToolRegistry, tool

KIND = "ops.bench.kinds:BENCH"

#: budgets large enough that no benchmark session ends on one
BUDGETS = {
    "max_steps": 100_000,
    "max_tokens": 10**12,
    "max_cost_usd": 0,  # no cost budget: the fake model server has no price
    "deadline_s": 10**7,
    "max_model_retries": 5,
}


@tool(idempotent=True)
def noop(i: int) -> str:
    """Return at once."""
    return "ok"


@tool(idempotent=True)
def pad200(i: int) -> str:
    """Return 200 characters."""
    return f"{i:08d}" + "y" * 192


@tool(requires_approval=True)
def gated(i: int) -> str:
    """Return at once, once a person approved."""
    return "done"


def _tools() -> ToolRegistry:
    return ToolRegistry([noop, pad200, gated])


def _prepare(data: Mapping[str, Any], **_: Any) -> dict[str, Any]:
    return {"user_prompt": str(data.get("task", "run the benchmark script"))}


BENCH = JobKind(
    name="bench", system_prompt="You are a benchmark agent.", tools=_tools, prepare=_prepare
)


def prose(chars: int, seed: int) -> str:
    """`chars` characters of word-like text, about as compressible as English prose."""
    rng = random.Random(seed)
    words: list[str] = []
    size = 0
    while size < chars:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


def replies(steps: int, *, tool_name: str = "noop", text_chars: int = 0) -> list[dict[str, Any]]:
    """`steps` replies with one call each (arguments differ, so no loop is seen), then a final
    answer: a session of `2 * steps + 1` ticks, and one more per compaction (the context
    policy compacts about every 50 steps)."""
    out: list[dict[str, Any]] = [
        {
            "content": prose(text_chars, seed=i) if text_chars else f"step {i}",
            "tool_calls": [{"name": tool_name, "arguments": {"i": i}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        for i in range(steps)
    ]
    out.append({"content": "done", "usage": {"prompt_tokens": 10, "completion_tokens": 1}})
    return out


def write_script(folder: Path, name: str, items: list[dict[str, Any]]) -> str:
    """The scripted-model spec of a script file written in `folder`."""
    path = folder / f"{name}.json"
    path.write_text(json.dumps(items))
    return f"scripted:{path}"
