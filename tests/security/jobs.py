"""A job kind for the bad-input and security tests: tools that misbehave on purpose."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tickwork.worker.jobs import JobKind
from tickwork.worker.tools.registry import ToolContext, ToolRegistry, tool

#: set at teardown so that an abandoned `hang` thread ends
RELEASE = threading.Event()
#: what `leak` returns: a key in the shape of the default secret pattern
LEAKED_KEY = "sk-proj-SECRETabcdef0123456789"


def _record(ctx: ToolContext, value: str) -> None:
    sink = ctx.config.get("sink")
    if sink:
        with open(Path(sink) / "effect.log", "a") as f:
            f.write(f"{ctx.idempotency_key} {value}\n")


@tool(idempotent=True)
def echo(text: str) -> str:
    """Return the text."""
    return text


@tool
def effect(value: str, ctx: ToolContext) -> str:
    """A side effect that must never run for a call the session refused."""
    _record(ctx, value)
    return f"did {value}"


@tool(requires_approval=True)
def danger(value: str, ctx: ToolContext) -> str:
    """A destructive effect: a person approves it first."""
    _record(ctx, f"danger {value}")
    return f"destroyed {value}"


@tool(timeout_s=0.5)
def hang(ctx: ToolContext) -> str:
    """Never answers in time."""
    RELEASE.wait(60)
    return "too late"


@tool(idempotent=True)
def spew(megabytes: int) -> str:
    """Returns megabytes of text."""
    return "x" * (megabytes * 1_000_000)


@tool(idempotent=True)
def shout(megabytes: int) -> str:
    """Prints megabytes to stdout and returns a little."""
    print("y" * (megabytes * 1_000_000))
    return "printed"


@tool(idempotent=True)
def boom(message: str) -> str:
    """Raises."""
    raise ValueError(message)


@tool(idempotent=True)
def leave() -> str:
    """Raises SystemExit, as a careless `sys.exit()` in a tool would."""
    raise SystemExit(3)


@tool(idempotent=True)
def binary() -> str:
    """Returns text with NUL characters, as `cat` of a binary file does."""
    return "ELF\x00\x01\x02 header\x00"


@tool(idempotent=True)
def not_utf8() -> str:
    """Returns bytes that are not UTF-8 as Python decodes them (`surrogateescape`)."""
    return b"name: caf\xe9 \xff".decode("utf-8", errors="surrogateescape")


@tool(idempotent=True)
def leak() -> str:
    """Returns a line with an API key in it, as `env` or `cat .env` would."""
    return f"OPENAI_API_KEY={LEAKED_KEY}\nPATH=/usr/bin"


@tool(idempotent=True)
def fail_leak() -> str:
    """Raises with an API key in the message."""
    raise RuntimeError(f"auth failed for key {LEAKED_KEY}")


TOOLS = (echo, effect, danger, hang, spew, shout, boom, leave, binary, not_utf8, leak, fail_leak)


def _tools() -> ToolRegistry:
    return ToolRegistry(TOOLS)


def _prepare(data: Mapping[str, Any], **_: Any) -> dict[str, Any]:
    return {"user_prompt": "misbehave", "sink": data.get("sink")}


KIND = JobKind(name="security", system_prompt="You test tickwork.", tools=_tools, prepare=_prepare)
SPEC = "tests.security.jobs:KIND"
