"""A model that plays replies from a JSON script, for tests and the offline demo.

It keeps no state between calls: workers are separate processes and a tick may run again,
so the reply is chosen by the session's position, read from the prompt: the number of
replies a compaction summary stands for, plus the assistant messages after it (none yet:
the first reply). A compaction request (`tickwork.fsm.context.SUMMARISE`) it answers
itself, without using a reply of the script, with a summary that says how many replies it
stands for and which steps after its cut are compactions (they have no assistant message),
so every later prompt, a fork's or a replay's included, tells its position again. A
summary it did not write (edited by hand) is refused. The file is either a list of
replies or `{"replies": [...], "repeat_last": false}`, and a reply is::

    {"content": "text",
     "tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}}],
     "usage": {"prompt_tokens": 10, "completion_tokens": 5, "cached_prompt_tokens": 0},
     "delay_s": 0.5,
     "error": {"transient": true, "message": "...", "retry_after_s": 1.0}}

All keys are optional. `arguments` given as an object are sent as JSON text; given as a
string they are sent exactly as written, so a script can express malformed arguments.
Without `usage` (and for a summary), tokens are estimated at four characters each.
`delay_s` sleeps before answering (or failing), which leaves time to kill a worker
mid-call. `error` raises that error instead of answering. Because the script is indexed by
the session's position, an error entry fails every attempt at that point of the session.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError
from tickwork.fsm import context
from tickwork.fsm.errors import ConfigurationError, PermanentModelError, TransientModelError
from tickwork.fsm.values import BUDGET_MAXIMA, ModelReply, ProposedCall, Usage
from tickwork.worker.models.base import (
    Message,
    ModelSettings,
    ToolSchema,
    estimate_tokens,
    transcript_text,
)
from tickwork.worker.models.pricing import SCRIPTED

log = logging.getLogger("tickwork.models")

#: how deep lists and objects may nest in a script (its tool arguments included)
MAX_NESTING = 64
#: the scripted model's answer to a compaction request (see the module's docstring)
SUMMARY = "[scripted summary] replies 1-{replies}; compactions after the cut: steps {compactions}"


#: the start of a summary in a prompt (a ReAct prompt has it after the task)
_HEADING = re.compile(
    r"(?:\A|\n\n)" + context.template_pattern(context.SUMMARY_HEADING, through=r"(\d+)")
)
_WRITTEN = re.compile(
    context.template_pattern(SUMMARY, replies=r"(\d+)", compactions=r"(\d+(?:, \d+)*)")
    + r"(?:\n|\Z)"
)


class _ScriptPart(BaseModel):
    # Strict* per field where coercion would hide a typo; tuples still take JSON lists
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScriptedCall(_ScriptPart):
    name: StrictStr
    #: an object is sent as JSON text; a string is sent as written
    arguments: dict[str, Any] | StrictStr = Field(default_factory=dict)

    def proposed(self) -> ProposedCall:
        arguments = self.arguments
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        return ProposedCall(name=self.name, arguments=arguments)


class ScriptedError(_ScriptPart):
    transient: StrictBool
    message: StrictStr
    retry_after_s: float | None = Field(default=None, ge=0)


#: a token count of a script's `usage`: not below 0 (it would take tokens and cost off the
#: session's bill), not past what a token budget can be
_Count = Annotated[int, Field(ge=0, le=int(BUDGET_MAXIMA["max_tokens"]))]


class ScriptedUsage(_ScriptPart):
    prompt_tokens: _Count = 0
    completion_tokens: _Count = 0
    cached_prompt_tokens: _Count = 0
    cache_creation_tokens: _Count = 0


class ScriptedReply(_ScriptPart):
    content: StrictStr = ""
    tool_calls: tuple[ScriptedCall, ...] = ()
    usage: ScriptedUsage | None = None
    delay_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    error: ScriptedError | None = None


class ScriptedModel:
    """Answers from the script at `path`, loaded and checked when it is built, and again
    when the file changes (a worker keeps its models: an edited script is played as it is
    now, as a session submitted after the edit was checked against)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen = self._signature()
        self.replies, self.repeat_last = load_script(self.path)

    def _signature(self) -> tuple[int, int] | None:
        try:
            info = self.path.stat()
        except OSError:
            return None  # gone: the loaded script plays on (a fork may still need it)
        return info.st_mtime_ns, info.st_size

    def _reloaded(self) -> None:
        seen = self._signature()
        if seen is None or seen == self._seen:
            return
        self._seen = seen
        try:
            self.replies, self.repeat_last = load_script(self.path)
        except Exception as exc:  # half written, or broken: the last good script plays on
            log.warning(
                "script %s changed and cannot be read (%s); playing it as it was", self.path, exc
            )

    def __repr__(self) -> str:
        return f"ScriptedModel({str(self.path)!r})"

    def generate(
        self, messages: list[Message], tools: list[ToolSchema], settings: ModelSettings
    ) -> ModelReply:
        started = time.perf_counter()
        self._reloaded()
        position = self._position(messages)
        through = context.summary_asked(messages)
        if through is not None:
            summary = position.summary(through=through)
            return ModelReply(
                content=summary,
                usage=_estimated(messages, summary),
                model=SCRIPTED,
                latency_ms=(time.perf_counter() - started) * 1000,
            )
        index = position.replies + len(position.shown)
        if index >= len(self.replies):
            if not self.repeat_last:
                raise PermanentModelError(
                    f"script {self.path} has {len(self.replies)} replies; the session asked "
                    f"for reply {index + 1}{_before(index)}; add replies or set "
                    '"repeat_last": true'
                )
            index = len(self.replies) - 1
        reply = self.replies[index]
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.error is not None:
            text = f"{reply.error.message} (scripted error: {self.path} replies[{index}])"
            if reply.error.transient:
                raise TransientModelError(text, retry_after_s=reply.error.retry_after_s)
            raise PermanentModelError(text)
        calls = tuple(call.proposed() for call in reply.tool_calls)
        written = reply.content + "".join(c.name + str(c.arguments) for c in calls)
        return ModelReply(
            content=reply.content,
            calls=calls,
            usage=(
                Usage(**reply.usage.model_dump())
                if reply.usage is not None
                else _estimated(messages, written)
            ),
            model=SCRIPTED,
            latency_ms=(time.perf_counter() - started) * 1000,
        )

    def _position(self, messages: list[Message]) -> _Position:
        """Where the prompt stands in the session, from its summary (if any) and the
        assistant messages, which all come after the summary."""
        shown = sum(1 for m in messages if m.get("role") == "assistant")
        summaries = [
            found
            for m in messages
            if m.get("role") == "user"
            for found in _HEADING.finditer(str(m.get("content") or ""))
        ]
        if not summaries:
            return _Position.of(through=0, replies=0, compactions=(), shown=shown)
        heading = summaries[-1]
        through = int(heading.group(1))
        written = _WRITTEN.match(heading.string, heading.end())
        if written is None:
            begins = heading.string[heading.end() :][:80]
            raise PermanentModelError(
                f"script {self.path}: the summary of steps 1-{through} in the prompt was not "
                f"written by the scripted model (it begins {begins!r}), so which reply of the "
                "script comes next is unknown; fork the session from a step before that "
                "compaction, or leave the summary as the scripted model wrote it"
            )
        return _Position.of(
            through=through,
            replies=int(written.group(1)),
            compactions=tuple(int(s) for s in written.group(2).split(", ")),
            shown=shown,
        )


@dataclass(frozen=True)
class _Position:
    """Where a prompt stands: the steps up to `through` are summarised and hold `replies`
    replies; the steps after it are compactions (`compactions`) or replies, each shown as
    an assistant message (`shown`: their steps)."""

    through: int
    replies: int
    compactions: tuple[int, ...]
    shown: tuple[int, ...]

    @classmethod
    def of(
        cls, *, through: int, replies: int, compactions: tuple[int, ...], shown: int
    ) -> _Position:
        # the steps after the cut, in order, skipping the compactions
        steps: list[int] = []
        step = through
        while len(steps) < shown:
            step += 1
            if step not in compactions:
                steps.append(step)
        return cls(through, replies, compactions, tuple(steps))

    def summary(self, *, through: int) -> str:
        """The summary of the steps up to `through`, written as the next step."""
        this = max(self.through, *self.compactions, *self.shown) + 1
        return SUMMARY.format(
            replies=self.replies + sum(1 for s in self.shown if s <= through),
            compactions=", ".join(str(s) for s in (*self.compactions, this) if s > through),
        )


def _before(index: int) -> str:
    """What a reply past a script's end says of the replies before it: a fork's kept steps
    count, so a script a fork switches to (`fork --model scripted:NEW`) is played from
    the reply after them, not from its first (a fork from step 3 asked for reply 4)."""
    if index == 0:
        return ""
    calls = "model call" if index == 1 else "model calls"
    return (
        f" ({index} {calls} came before it; in a fork they include its kept steps: a script "
        f"a fork switches to is played from reply {index + 1} too, its first {index} standing "
        "for them)"
    )


def _estimated(messages: list[Message], written: str) -> Usage:
    """Tokens at four characters each, for a reply the script gives no `usage` for."""
    return Usage(
        prompt_tokens=estimate_tokens(transcript_text(messages)),
        completion_tokens=estimate_tokens(written),
    )


def script_of(spec: str) -> tuple[str, str] | None:
    """(prefix, path) if `spec` names a script file (`react:` wraps another spec), else None:
    the API and a spawn's child check where such a path points before a host reads it."""
    inner = spec
    while inner.startswith("react:"):
        inner = inner.removeprefix("react:")
    if not inner.startswith("scripted:"):
        return None
    return spec[: len(spec) - len(inner)] + "scripted:", inner.removeprefix("scripted:")


def load_script(path: Path) -> tuple[tuple[ScriptedReply, ...], bool]:
    """(replies, repeat_last) from a script file; ConfigurationError names what is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read script {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"script {path} is not UTF-8 text: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"script {path} is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except RecursionError:
        raise ConfigurationError(_too_deep(path)) from None
    if _nesting(data) > MAX_NESTING:
        raise ConfigurationError(_too_deep(path))
    repeat_last = False
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"replies", "repeat_last"})
        if unknown:
            raise ConfigurationError(
                f'script {path} has unknown keys {unknown}; it takes "replies" and "repeat_last"'
            )
        repeat_last = data.get("repeat_last", False)
        if not isinstance(repeat_last, bool):
            raise ConfigurationError(f'script {path}: "repeat_last" must be true or false')
        data = data.get("replies")
    if not isinstance(data, list) or not data:
        raise ConfigurationError(
            f"script {path} must be a non-empty list of replies or "
            '{"replies": [...], "repeat_last": false}'
        )
    return tuple(_reply(path, i, item) for i, item in enumerate(data)), repeat_last


def _too_deep(path: Path) -> str:
    return (
        f"the scripted model file {path} nests deeper than {MAX_NESTING} levels; "
        "a script is a list of replies a few levels deep"
    )


def _nesting(data: Any) -> int:
    """How deep lists and objects nest in `data`, counted without recursion."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, depth)
            if depth <= MAX_NESTING:  # one level past the limit is enough to refuse
                todo.extend((v, depth + 1) for v in value)
    return deepest


def _reply(path: Path, index: int, item: Any) -> ScriptedReply:
    if not isinstance(item, dict):
        raise ConfigurationError(
            f"script {path} replies[{index}] must be an object, got {type(item).__name__}"
        )
    try:
        return ScriptedReply.model_validate(item)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'reply'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ConfigurationError(
            f"script {path} replies[{index}] is not valid: {problems}"
        ) from exc
