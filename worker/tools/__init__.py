"""Tools the model can call: the registry and running a call (the repair toolkit is
`tickwork.worker.jobs.repair.toolkit`)."""

from tickwork.worker.tools.registry import (
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    run_tool,
    tool,
)

__all__ = ["Tool", "ToolContext", "ToolRegistry", "ToolResult", "run_tool", "tool"]
