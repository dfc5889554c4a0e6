"""The `spawn_agents` tool (docs/DESIGN.md section 16): a job kind that lists it in its
tools lets its sessions start child sessions and wait for them.

The tool is not run as a function: the agent's EXECUTE tick recognises its name and
starts the children in the parent's own save (`tickwork.worker.tick.trees`), then records
their outcomes when the join wakes the parent. The function below gives the tool its
schema and description, and refuses to run outside a tick.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from tickwork.fsm.errors import ToolError
from tickwork.fsm.trees import MAX_CHILDREN, SPAWN_AGENTS
from tickwork.worker.tools.registry import Tool, tool

__all__ = ["SPAWN_TOOL", "Child"]


class Child(BaseModel):
    """One child agent to start."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(description="The child's role (one the job declares, e.g. explorer).")
    input: dict[str, Any] = Field(
        default_factory=dict, description='Its input as a job is submitted, e.g. {"goal": "..."}.'
    )
    model: str | None = Field(default=None, description="Its model; default: its role's or yours.")
    share: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="The share of your remaining cost and tokens it may spend; default: equal.",
    )


def spawn_agents(
    children: list[Child] = Field(min_length=1, max_length=MAX_CHILDREN),  # noqa: B008
    join: Literal["all", "first"] = "all",
) -> str:
    """Start child agents that work in parallel, and wait for them. You are woken when all
    of them have ended (join "all") or the first has (join "first": the others are
    stopped); the result lists each child's status, answer and result. A failed child is
    reported, not a failure of yours. Each child may spend at most its share of what you
    have left.

    Args:
        children: The agents to start, each with a role and an input.
        join: "all" to wait for every child, "first" for the first to end.
    """
    raise ToolError(f"{SPAWN_AGENTS} is run by the agent's tick, not as a function")


#: the tool a job kind adds to its registry to let its sessions spawn children
SPAWN_TOOL: Tool = tool(name=SPAWN_AGENTS, idempotent=True)(spawn_agents)
