"""Tools the model can call: the registry, running a call, and the repair toolkit."""

from .registry import Tool, ToolContext, ToolRegistry, ToolResult, run_tool, tool
from .repair import default_registry, repair_tools

__all__ = [
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "default_registry",
    "repair_tools",
    "run_tool",
    "tool",
]
