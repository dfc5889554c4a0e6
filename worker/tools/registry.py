"""Tools: a decorator that turns a function into a tool, a registry, and `run_tool`.

A tool's argument schema comes from its signature (pydantic builds it), its description
from its docstring. A parameter named `ctx` (or annotated `ToolContext`) is not part of
the schema: `run_tool` passes the call's context there.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Annotated, Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from tickwork.fsm.approvals import ApprovalRule, Policy
from tickwork.fsm.errors import (
    ConfigurationError,
    InvalidToolArguments,
    TickworkError,
    ToolError,
    UnknownTool,
)
from tickwork.fsm.transitions import cap_output
from tickwork.fsm.values import Head
from tickwork.fsm.values import idempotency_key as _idempotency_key
from tickwork.worker.sandbox.runner import Sandbox
from tickwork.worker.tools.confinement import lexical
from tickwork.worker.tools.schemas import (
    explain_error,
    parse_docstring,
    signature_line,
    without_titles,
)
from tickwork.worker.tools.threads import run_in_thread

log = logging.getLogger(__name__)

#: how many lists of names `ToolRegistry.schemas` keeps built (the roles' of one kind)
_SCHEMA_LISTS = 64
#: what OpenAI-compatible APIs accept as a function name
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ChildResult:
    """A child session as its parent's tools see it (`ToolContext.children`)."""

    id: str
    #: the parent's `spawn_agents` call that started it, and its place in that call's list
    spawn_call: str
    index: int
    role: str
    #: its status ("completed", "failed", ..., or still running)
    status: str
    #: what its job produced (a repair child: `patch`, `outcome`, `tests`)
    result: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def child_results(children: Iterable[Head]) -> list[ChildResult]:
    """A session's `children` (the store's, in spawn order) as its tools see them, each
    numbered within its spawn."""
    found: list[ChildResult] = []
    place: dict[str, int] = {}
    for child in children:
        call = child.spawn_call or ""
        place[call] = place.get(call, -1) + 1
        found.append(
            ChildResult(
                id=child.id,
                spawn_call=call,
                index=place[call],
                role=child.role,
                status=child.status.value,
                result=dict(child.result),
            )
        )
    return found


@dataclass(frozen=True)
class ToolContext:
    """What a running tool knows about the call it serves."""

    session_id: str
    call_id: str
    step: int
    #: `"{session_id}:{step}:{call_id}"` unless given; tools with side effects pass it on
    idempotency_key: str = ""
    #: the directory the tool may touch; None when the job has none
    workspace: Path | None = None
    #: the session's config, e.g. `test_command`
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: seconds the call may take; `run_tool` sets it to the limit it enforces
    timeout_s: float | None = None
    #: why the call must stop now (the session was cancelled, its deadline passed), or
    #: None; tools that run processes poll it and kill them
    stop: Callable[[], str | None] | None = None
    #: how commands run (the OS sandbox and its limits); None: from the settings
    sandbox: Sandbox | None = None
    #: this host's copy of the session's environment, mounted read-only at /env for its
    #: commands (worker/files/environments.py); None: the session has none
    environment: Path | None = None
    #: the session's children in the order they were spawned, read from the store when
    #: called (for tools that take what a child made: `adopt_patch`); None: outside a tick
    children: Callable[[], Sequence[ChildResult]] | None = None
    #: the session's environment record as its card shows it (`missing`: what the project
    #: declares that setup did not install; `note`: why); empty: the session has none
    setup: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: the paths the session's stored files differ in from its source, read from the store
    #: when called (`run_tests`: a changed C source whose extension was not rebuilt); None:
    #: not known
    changed: Callable[[], Sequence[str]] | None = None

    def check(self) -> None:
        """Raise `ToolError` if the call must stop now (its time is up, the session was
        cancelled): tools that loop call it, so their thread ends soon after a timeout."""
        reason = self.stop() if self.stop is not None else None
        if reason:
            raise ToolError(f"stopped: {reason}")

    def __post_init__(self) -> None:
        if not self.idempotency_key:
            key = _idempotency_key(self.session_id, self.step, self.call_id)
            object.__setattr__(self, "idempotency_key", key)
        if self.workspace is not None and not isinstance(self.workspace, Path):
            object.__setattr__(self, "workspace", Path(self.workspace))


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gave back: the observation's text, and whether it is an error."""

    output: str
    is_error: bool = False
    duration_ms: float = 0.0


@dataclass(frozen=True, eq=False)
class Tool:
    """A function the model may call, with its argument schema and flags."""

    name: str
    description: str
    fn: Callable[..., Any]
    #: pydantic model of the arguments; its fields are aliased to the parameter names
    args_model: type[BaseModel]
    #: JSON schema of the arguments, as sent to the model
    schema: dict[str, Any]
    requires_approval: bool = False
    #: decides from the arguments whether a person must approve; raising counts as yes
    approval_policy: Policy | None = None
    #: safe to run again with the same idempotency key after a crash
    idempotent: bool = False
    timeout_s: float = 60.0
    #: the parameter that receives the ToolContext, if the function takes one
    context_param: str | None = None
    #: parameter name -> field name in `args_model`
    param_fields: Mapping[str, str] = field(default_factory=dict)
    #: the parameters that name a path in the workspace: a person's edit of a call is
    #: refused at once if one of them leaves it (the tool checks them again when it runs)
    paths: tuple[str, ...] = ()
    #: checks more of an edit's arguments by their text alone (the paths a patch names):
    #: raises a `ToolError` saying what is wrong, refused at once as a path of `paths` is
    check: Callable[[Mapping[str, Any]], None] | None = None

    def check_paths(self, arguments: Mapping[str, Any]) -> None:
        """`PathOutsideWorkspace` if an argument of `paths` leaves the workspace by its text
        alone (absolute, `~`, climbing out with `..`, a NUL): no workspace is needed; then
        the tool's own `check`, where an error that is not tickwork's (a KeyError from a
        bug in it) becomes a ToolError naming the tool and the error."""
        for name in self.paths:
            if isinstance(arguments.get(name), str):
                lexical(arguments[name])
        if self.check is None:
            return
        try:
            self.check(arguments)
        except TickworkError:
            raise
        except Exception as exc:
            # refused like any bad edit, never a 500: the approver can try other arguments,
            # and the tool's author finds the traceback in the log
            log.warning("the check of tool %s raised", self.name, exc_info=True)
            raise ToolError(
                f"the check of tool {self.name} raised {type(exc).__name__}: {exc}; correct "
                "the arguments, or, if they are right, the check itself has a bug (a check "
                "refuses arguments with ToolError naming what is wrong)"
            ) from exc

    @property
    def rule(self) -> ApprovalRule:
        accepts = self.accepts if self.approval_policy is not None else None
        return ApprovalRule(
            always=self.requires_approval, policy=self.approval_policy, accepts=accepts
        )

    def accepts(self, arguments: Mapping[str, Any]) -> bool:
        """Whether `validate` takes `arguments`: those it refuses never run."""
        try:
            self.validate(arguments)
        except InvalidToolArguments:
            return False
        return True

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json.loads(json.dumps(self.schema)),
            },
        }

    def signature(self) -> str:
        """The arguments in one line, e.g. `read_file(path: string, start_line: integer = 1)`."""
        return signature_line(self.name, self.schema)

    def validate(
        self, arguments: Any, *, again: str = "call it again with corrected arguments"
    ) -> dict[str, Any]:
        """The arguments as the function's keyword arguments, or `InvalidToolArguments`
        ending with `again`: what whoever gave them (the model, a person's edit) does next."""
        if not isinstance(arguments, Mapping):
            raise InvalidToolArguments(
                f"the arguments of {self.name} must be a JSON object, got "
                f"{type(arguments).__name__}; expected {self.signature()}"
            )
        try:
            model = self.args_model.model_validate(dict(arguments))
        except ValidationError as exc:
            problems = "; ".join(explain_error(error) for error in exc.errors(include_url=False))
            raise InvalidToolArguments(
                f"invalid arguments for {self.name}: {problems}. Expected {self.signature()}; "
                f"{again}"
            ) from None
        return {param: getattr(model, name) for param, name in self.param_fields.items()}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _parameter_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The parameters' annotations, evaluated; the return annotation is not needed."""
    annotations = {k: v for k, v in inspect.get_annotations(fn).items() if k != "return"}
    holder = SimpleNamespace(__annotations__=annotations)
    return get_type_hints(holder, globalns=getattr(fn, "__globals__", {}), include_extras=True)


def make_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    approval_policy: Policy | None = None,
    idempotent: bool = False,
    timeout_s: float = 60.0,
    paths: Sequence[str] = (),
    check: Callable[[Mapping[str, Any]], None] | None = None,
) -> Tool:
    """Build a `Tool` from `fn`; `tool` is the decorator form of this."""
    tool_name = name or fn.__name__
    if not _NAME.match(tool_name):
        raise ConfigurationError(
            f"tool name {tool_name!r} must be 1-64 letters, digits, '_' or '-'"
        )
    if isinstance(timeout_s, bool) or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ConfigurationError(f"tool {tool_name}: timeout_s must be positive, got {timeout_s}")
    try:
        hints = _parameter_hints(fn)
    except Exception as exc:
        raise ConfigurationError(f"tool {tool_name}: cannot read its annotations: {exc}") from exc
    summary, param_docs = parse_docstring(fn.__doc__)
    definitions: dict[str, Any] = {}
    param_fields: dict[str, str] = {}
    context_param = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise ConfigurationError(
                f"tool {tool_name}: parameter {param.name} must be a plain or keyword-only "
                "parameter (no *args, **kwargs or positional-only)"
            )
        annotation = hints.get(param.name, Any)
        if param.name == "ctx" or annotation is ToolContext:
            context_param = param.name
            continue
        doc = param_docs.get(param.name)
        # aliased so that names like `schema` or `model_x` cannot clash with BaseModel
        info = Field(alias=param.name, description=doc) if doc else Field(alias=param.name)
        default = ... if param.default is param.empty else param.default
        param_fields[param.name] = f"arg_{param.name}"
        definitions[f"arg_{param.name}"] = (Annotated[annotation, info], default)
    try:
        model = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **definitions,
        )
        schema = without_titles(model.model_json_schema())
    except Exception as exc:
        raise ConfigurationError(f"tool {tool_name}: cannot build its schema: {exc}") from exc
    return Tool(
        name=tool_name,
        description=description if description is not None else summary,
        fn=fn,
        args_model=model,
        schema=schema,
        requires_approval=requires_approval,
        approval_policy=approval_policy,
        idempotent=idempotent,
        timeout_s=float(timeout_s),
        context_param=context_param,
        param_fields=MappingProxyType(param_fields),
        paths=_known(tool_name, paths, param_fields),
        check=check,
    )


def _known(tool_name: str, paths: Sequence[str], params: Mapping[str, str]) -> tuple[str, ...]:
    unknown = sorted(set(paths) - set(params))
    if unknown:
        raise ConfigurationError(f"tool {tool_name}: paths names no parameter {unknown}")
    return tuple(paths)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    approval_policy: Policy | None = None,
    idempotent: bool = False,
    timeout_s: float = 60.0,
    paths: Sequence[str] = (),
    check: Callable[[Mapping[str, Any]], None] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    approval_policy: Policy | None = None,
    idempotent: bool = False,
    timeout_s: float = 60.0,
    paths: Sequence[str] = (),
    check: Callable[[Mapping[str, Any]], None] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` of a function: `@tool` or `@tool(requires_approval=True, ...)`."""

    def build(f: Callable[..., Any]) -> Tool:
        return make_tool(
            f,
            name=name,
            description=description,
            requires_approval=requires_approval,
            approval_policy=approval_policy,
            idempotent=idempotent,
            timeout_s=timeout_s,
            paths=paths,
            check=check,
        )

    return build if fn is None else build(fn)


class ToolRegistry:
    """The tools one job offers the model, by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        #: `schemas` built, by the names asked (None: all): a THINK asks each tick
        self._schemas: dict[tuple[str, ...] | None, tuple[dict[str, Any], ...]] = {}
        for each in tools:
            self.register(each)

    def register(self, tool: Tool) -> Tool:
        if not isinstance(tool, Tool):
            raise ConfigurationError(
                f"register takes a Tool (decorate the function with @tool), got {tool!r}"
            )
        known = self._tools.get(tool.name)
        if known is not None and known is not tool:
            raise ConfigurationError(f"a different tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._schemas = {}
        return tool

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except (KeyError, TypeError):
            raise UnknownTool(
                f"there is no tool named {name!r}; the tools are: "
                f"{', '.join(self.names()) or 'none'}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def select(self, names: Iterable[str]) -> ToolRegistry:
        """A registry of only these tools (e.g. the ones a session's config lists)."""
        return ToolRegistry(self.get(name) for name in names)

    def schemas(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """OpenAI-style function schemas of all tools, or of `names` in that order.

        Built once per list of names: the list is the caller's, the schemas in it are
        shared by every call, so read them, never change them."""
        key = None if names is None else tuple(names)
        built = self._schemas.get(key)
        if built is None:
            chosen = self._tools.values() if key is None else [self.get(n) for n in key]
            built = tuple(each.openai_schema() for each in chosen)
            if len(self._schemas) >= _SCHEMA_LISTS:
                self._schemas = {}  # replaced, not cleared: another thread may be reading it
            self._schemas = {**self._schemas, key: built}
        return list(built)

    def rules(self) -> dict[str, ApprovalRule]:
        return {name: each.rule for name, each in self._tools.items()}


def render_output(value: Any) -> str:
    """A tool's return value as observation text: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        return json.dumps(value, ensure_ascii=False, default=_jsonable)
    except (TypeError, ValueError):
        return repr(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return str(value)


def run_tool(
    tool: Tool, arguments: Any, ctx: ToolContext, *, max_output_chars: int = 20_000
) -> ToolResult:
    """Validate and run one call; whatever happens, the result is an observation.

    Invalid arguments run nothing. The tool runs in a worker thread with the smaller of its
    own and the context's timeout; a Python thread cannot be killed, so a tool that hangs
    past it is abandoned and the model is told it timed out. The context's `stop` then says
    so: tools that loop poll it (`ctx.check()`), and tools that start processes kill them. An
    exception becomes the observation `"{ExcType}: {message}"`: a tool never fails the session.
    """
    started = time.perf_counter()

    def result(text: str, is_error: bool) -> ToolResult:
        elapsed = (time.perf_counter() - started) * 1000
        return ToolResult(cap_output(text, max_output_chars), is_error, elapsed)

    try:
        kwargs = tool.validate(arguments)
    except InvalidToolArguments as exc:
        return result(exc.message, True)
    limit = tool.timeout_s if ctx.timeout_s is None else min(tool.timeout_s, ctx.timeout_s)
    deadline = time.monotonic() + limit
    given = ctx.stop

    def stop() -> str | None:
        # a thread cannot be killed: a tool polling this ends on its own once abandoned
        if time.monotonic() >= deadline:
            return f"{tool.name} timed out after {limit:g}s"
        return given() if given is not None else None

    if tool.context_param is not None:
        kwargs[tool.context_param] = dataclasses.replace(ctx, timeout_s=limit, stop=stop)
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = tool.fn(**kwargs)
        except BaseException as exc:  # the thread must not die with an unreported error
            outcome["error"] = exc

    # in the caller's context: a command the tool starts is guarded by the tick's lease
    context = contextvars.copy_context()
    done = run_in_thread(
        functools.partial(context.run, target), name=f"tool-{tool.name}-{ctx.call_id}"
    )
    if not done.wait(max(limit, 0.0)):
        log.warning("tool %s (%s) timed out after %gs", tool.name, ctx.idempotency_key, limit)
        return result(
            f"{tool.name} timed out after {limit:g}s and was abandoned (told to stop). Try a "
            "smaller request or a different approach.",
            True,
        )
    if "error" in outcome:
        error = outcome["error"]
        # a ToolError is the tool's answer (a path outside the workspace, a bad pattern):
        # its message says it all; anything else is a bug worth its traceback
        expected = isinstance(error, ToolError)
        kind, message = type(error).__name__, str(error)
        log.info(
            "tool %s (%s) raised %s: %s",
            tool.name,
            ctx.idempotency_key,
            kind,
            _first_line(message) if expected else message,
            exc_info=None if expected else error,
        )
        return result(f"{kind}: {message}" if message else kind, True)
    return result(render_output(outcome.get("value")), False)


#: the longest first line of a tool's error the log keeps
LOGGED_ERROR_CHARS = 300


def _first_line(message: str) -> str:
    """A tool's error as the log keeps it: its first line, cut at LOGGED_ERROR_CHARS (what
    follows, a killed command's output say, is the model's to read, not the log's)."""
    line = message.split("\n", 1)[0]
    if len(line) > LOGGED_ERROR_CHARS:
        return f"{line[:LOGGED_ERROR_CHARS]}... ({len(line) - LOGGED_ERROR_CHARS} more characters)"
    return line
