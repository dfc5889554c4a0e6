"""The `spawn_agents` and `wait_children` tools (docs/DESIGN.md section 16): a job kind
that lists them in its tools lets its sessions start child sessions and wait for them.

The tools are not run as functions: the agent's EXECUTE tick recognises their names and
starts the children in the parent's own save (`tickwork.worker.tick.trees`), then records
their outcomes when the join wakes the parent (with join `each`, one child's at a time,
the next ones' through `wait_children`). The functions below give the tools their schemas
and descriptions, and refuse to run outside a tick.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from tickwork.fsm.deliveries import WAIT_CHILDREN
from tickwork.fsm.errors import ToolError
from tickwork.fsm.trees import MAX_CHILDREN, SPAWN_AGENTS
from tickwork.worker.tools.registry import Tool, tool

__all__ = ["SPAWN_TOOL", "WAIT_TOOL", "Child"]


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
    join: Literal["all", "first", "each"] = "all",
) -> str:
    """Start child agents that work in parallel, and wait for them. You are woken when all
    of them have ended (join "all"), or the first has (join "first": the others are
    stopped), or with join "each" as soon as the first has ended: the result is that
    child's, the others keep running, and each wait_children call returns the next ones'
    results (each child's exactly once). A result gives each child's status, answer and
    result; a failed child is reported, not a failure of yours. Children still running
    when you finish are stopped. Each child may spend at most its share of what you have
    left.

    Args:
        children: The agents to start, each with a role and an input.
        join: "all" to wait for every child, "first" for the first to end, "each" for
            each child's result in turn (the first now, the next with wait_children).
    """
    raise ToolError(f"{SPAWN_AGENTS} is run by the agent's tick, not as a function")


def wait_children(spawn_call: str | None = None) -> str:
    """Wait for the next child of a spawn_agents call with join "each" to end, and get the
    result of every child that ended since the last one you got (usually one). Returns at
    once if some ended already. Each child's result comes exactly once; when every child's
    has come, calling it again is an error.

    Args:
        spawn_call: The id of the spawn_agents call whose children to wait for; default:
            your latest one with results still to come.
    """
    raise ToolError(f"{WAIT_CHILDREN} is run by the agent's tick, not as a function")


#: the tool a job kind adds to its registry to let its sessions spawn children
SPAWN_TOOL: Tool = tool(name=SPAWN_AGENTS, idempotent=True)(spawn_agents)
#: the tool that goes with it: the next results of a spawn with join "each"
WAIT_TOOL: Tool = tool(name=WAIT_CHILDREN, idempotent=True)(wait_children)
