"""What the command line takes: shared option types and the parsers of their values.

Parsers raise `InvalidInput` naming the option and what to write instead, so every bad
value ends as one `error:` line with exit code 2. Parsers the HTTP API shares (`since`) are
in `parsing.py`, which does not import Typer.
"""

from __future__ import annotations

import dataclasses
import functools
import getpass
import inspect
import io
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from tickwork import parsing
from tickwork.fsm.admission import check_concurrency, check_max_per_key, check_priority
from tickwork.fsm.context import MAX_WINDOW, MIN_WINDOW, check_window
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.forks import (
    MAX_INSTRUCTION_CHARS,
    MAX_SYSTEM_PROMPT_CHARS,
    check_instruction,
    check_system_prompt,
)
from tickwork.fsm.people import check_name
from tickwork.fsm.tenants import DEFAULT_TENANT, check_tenant
from tickwork.fsm.values import MAX_PRICE, MIN_PRICE_RATES, PRICE_RATES, ErrorCode
from tickwork.parsing import MAX_SESSION_ID, quoted

if TYPE_CHECKING:
    from tickwork.worker.models import Providers

    from .context import Context

#: the most rows a listing's --limit asks for: past what the databases' integers hold, SQLite
#: raised OverflowError and Postgres refused the query
MAX_LIMIT = 2**31 - 1
#: how `check_concurrency`'s refusals name the key and its limit on the command line
ADMISSION_FLAGS = {"key_is": "--concurrency-key", "limit_is": "--max-per-key"}

Json = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
Approver = Annotated[
    str | None,
    typer.Option(
        "--as",
        metavar="NAME",
        help="Who decides, recorded with the decision.",
        show_default="$USER",
    ),
]
Forker = Annotated[
    str | None,
    typer.Option(
        "--as",
        metavar="NAME",
        help="Who forks, recorded as the fork's author (`show`: submitted by).",
        show_default="$USER",
    ),
]


def _whole(example: str) -> Callable[[str], int]:
    """A parser of a whole number that says what to give: typer's own said "Input should be
    a valid integer, unable to parse string as an integer" of `--max-tokens 1e9`."""

    def parse(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            # click says which option before it: "Invalid value for '--max-tokens': ..."
            raise InvalidInput(
                f"{text!r} is not a whole number: give one, e.g. {example}"
            ) from None

    return parse


def _deadline(example: str) -> Callable[[str], float]:
    """A parser of a deadline (`parsing.seconds`: 2h, as the page takes it); typer's own said
    "Input should be a valid number" of `--deadline 2h`. A number out of range is the
    budget's to refuse, naming it."""

    def parse(text: str) -> float:
        return parsing.seconds(text, example=example)

    return parse


MaxSteps = Annotated[
    int | None,
    typer.Option(
        metavar="N",
        parser=_whole("--max-steps 50"),
        help="Budget: model calls.",
        rich_help_panel="Budgets",
    ),
]
MaxTokens = Annotated[
    int | None,
    typer.Option(
        metavar="TOKENS",
        parser=_whole("--max-tokens 2000000"),
        help="Budget: prompt + completion tokens.",
        rich_help_panel="Budgets",
    ),
]
MaxCostUsd = Annotated[
    float | None,
    typer.Option(
        help="Budget: USD spent on the model (0: no cost budget).", rich_help_panel="Budgets"
    ),
]
Deadline = Annotated[
    float | None,
    typer.Option(
        metavar="SECONDS",
        parser=_deadline("--deadline 2h"),
        help="Budget: seconds from creation, or 30m, 2h, 1d.",
        rich_help_panel="Budgets",
    ),
]
Price = Annotated[
    str | None,
    typer.Option(
        metavar="PROMPT,COMPLETION[,CACHED[,CACHE_WRITE]]",
        help="The model's price in USD per million prompt, completion and (optionally) "
        "cached prompt tokens and prompt tokens written to the cache (Anthropic's cache "
        "writes); without CACHED or CACHE_WRITE, those tokens keep the model's discount, or "
        "cost PROMPT for a model without one. Where the operator prices the model "
        "($TICKWORK_PRICES or the built-in list) it may only raise that price.",
        rich_help_panel="Budgets",
    ),
]


def window_tokens(text: str) -> int:
    """`--context-window TOKENS`: a whole number (its bounds are checked where a window is
    taken, for the API too)."""
    try:
        return int(text)
    except ValueError:
        # click says which option before it: "Invalid value for '--context-window': ..."
        raise InvalidInput(
            f"{text!r} is not a whole number of tokens: give one from {MIN_WINDOW:,} to "
            f"{MAX_WINDOW:,}, e.g. --context-window 128000"
        ) from None


ContextWindow = Annotated[
    int | None,
    typer.Option(
        metavar="TOKENS",
        parser=window_tokens,
        help="The model's context window; old observations are masked, then the "
        "transcript compacted, to keep each prompt under it.",
        show_default="$TICKWORK_PRICES's, else the model table's",
        rich_help_panel="Budgets",
    ),
]

Priority = Annotated[
    int,
    typer.Option(
        metavar="N",
        help="Admission order within the tenant, -1000 to 1000: higher is let in first "
        "when the tenant is at its in-flight limit.",
        rich_help_panel="Admission",
    ),
]
ConcurrencyKey = Annotated[
    str | None,
    typer.Option(
        metavar="KEY",
        help="At most --max-per-key sessions with this key run at once (e.g. one repair "
        "per repository: the repository's URL); the others wait as `queued`.",
        rich_help_panel="Admission",
    ),
]
MaxPerKey = Annotated[
    int | None,
    typer.Option(
        metavar="N",
        help="How many sessions of --concurrency-key may be in flight at once.",
        show_default="1",
        rich_help_panel="Admission",
    ),
]


FromStep = Annotated[int, typer.Option(help="Keep steps 1..K of the original (0: start over).")]
SystemPrompt = Annotated[
    str | None,
    typer.Option(
        help=f"Replace the system prompt (not empty; at most {MAX_SYSTEM_PROMPT_CHARS:,} "
        "characters).",
        rich_help_panel="Patch",
    ),
]
AppendInstruction = Annotated[
    str | None,
    typer.Option(
        help=f"Add an instruction after step K (at most {MAX_INSTRUCTION_CHARS:,} characters).",
        rich_help_panel="Patch",
    ),
]
ToolOutput = Annotated[
    list[str] | None,
    typer.Option(
        metavar="CALL_ID=TEXT",
        help="Use TEXT as that call's output (repeatable).",
        rich_help_panel="Patch",
    ),
]
ToolOutputFile = Annotated[
    list[str] | None,
    typer.Option(
        metavar="CALL_ID=PATH",
        help="Use the UTF-8 text of the file PATH as that call's output (repeatable; for an "
        "output longer than a command line takes).",
        rich_help_panel="Patch",
    ),
]
StatePatch = Annotated[
    str | None,
    typer.Option(
        "--state",
        metavar="JSON",
        help="A graph session: set these state fields in the fork (a JSON object).",
        rich_help_panel="Patch",
    ),
]
ForkModel = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="SPEC",
        help="The model the fork runs on from its next call: openai:MODEL, anthropic:MODEL, "
        "react:openai:MODEL or scripted:PATH (its window and price, as at submit).",
        show_default="the original's",
        rich_help_panel="Patch",
    ),
]
ForkPrice = Annotated[
    str | None,
    typer.Option(
        "--price",
        metavar="PROMPT,COMPLETION[,CACHED[,CACHE_WRITE]]",
        help="The price of the fork's model (--model's, else the original's) in USD per "
        "million tokens, as at submit (--price of `tickwork submit`); another model's runs "
        "without the original's.",
        show_default="the original's for its model",
        rich_help_panel="Budgets",
    ),
]
ForkContextWindow = Annotated[
    int | None,
    typer.Option(
        "--context-window",
        metavar="TOKENS",
        parser=window_tokens,
        help="The model's context window for the fork (a CONTEXT dead letter: a larger one).",
        show_default="the original's",
        rich_help_panel="Patch",
    ),
]
#: a fork's budgets: its kept steps count against them (`tickwork.fsm.forks`)
ForkMaxSteps = Annotated[
    int | None,
    typer.Option(
        metavar="N",
        parser=_whole("--max-steps 50"),
        help="Budget: model calls, the K kept steps included (so above K).",
        rich_help_panel="Budgets",
    ),
]
ForkMaxTokens = Annotated[
    int | None,
    typer.Option(
        metavar="TOKENS",
        parser=_whole("--max-tokens 2000000"),
        help="Budget: prompt + completion tokens, the kept steps' included.",
        rich_help_panel="Budgets",
    ),
]
ForkMaxCostUsd = Annotated[
    float | None,
    typer.Option(
        help="Budget: USD spent on the model, the kept steps' included (0: no cost budget).",
        rich_help_panel="Budgets",
    ),
]
ForkDeadline = Annotated[
    float | None,
    typer.Option(
        metavar="SECONDS",
        parser=_deadline("--deadline 2h"),
        help="Budget: seconds from the fork, or 30m, 2h, 1d.",
        rich_help_panel="Budgets",
    ),
]
ForkPriority = Annotated[
    int | None,
    typer.Option(
        "--priority",
        metavar="N",
        help="Admission order within the tenant, -1000 to 1000.",
        show_default="the original's",
        rich_help_panel="Admission",
    ),
]
ForkConcurrencyKey = Annotated[
    str | None,
    typer.Option(
        "--concurrency-key",
        metavar="KEY",
        help="The fork's concurrency key (with --max-per-key: how many of it run at once; "
        "alone: one).",
        show_default="the original's",
        rich_help_panel="Admission",
    ),
]
ForkMaxPerKey = Annotated[
    int | None,
    typer.Option(
        "--max-per-key",
        metavar="N",
        help="How many sessions of the fork's concurrency key may be in flight at once.",
        show_default="the original's for its key, else 1",
        rich_help_panel="Admission",
    ),
]
Again = Annotated[
    bool,
    typer.Option(
        "--again",
        help="Fork a session whose dead letter was already forked, resolved or dismissed.",
    ),
]


def new_session_id(value: str | None) -> str | None:
    """`--id` of a new session (`submit`, `fork`), checked here so that the command says
    what it says with --server (the API's 422 in the remote CLI's words)."""
    return None if value is None else parsing.new_session_id(value, what="--id")


NewId = Annotated[
    str | None,
    typer.Option(
        "--id", help="The fork's id.", show_default="a random one", callback=new_session_id
    ),
]


@dataclasses.dataclass(frozen=True)
class Fork:
    """The options `fork` and `dlq fork` share: the step kept, the patch, the budgets raised,
    who forks, the new id and the output. Written once: `fork_options` puts them on both."""

    from_step: int
    system_prompt: str | None = None
    append_instruction: str | None = None
    tool_output: list[str] | None = None
    tool_output_file: list[str] | None = None
    state: str | None = None
    model: str | None = None
    price: str | None = None
    max_steps: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    deadline: float | None = None
    context_window: int | None = None
    priority: int | None = None
    concurrency_key: str | None = None
    max_per_key: int | None = None
    by: str | None = None
    new_id: str | None = None
    again: bool = False
    json_output: bool = False

    def client_args(self) -> dict[str, Any]:
        """What `Tickwork.fork` takes of them (all but the session), each value parsed."""
        check_instruction(self.append_instruction)  # before a server is asked, too
        check_system_prompt(self.system_prompt)
        if self.context_window is not None:
            check_window(self.context_window, what="--context-window")
        if self.priority is not None:
            check_priority(self.priority, what="--priority")
        if self.concurrency_key is not None:
            check_concurrency(self.concurrency_key, self.max_per_key, **ADMISSION_FLAGS)
        elif self.max_per_key is not None:  # for the original's key (the server knows it)
            check_max_per_key(self.max_per_key, what="--max-per-key")
        return {
            "from_step": self.from_step,
            "by": approver(self.by, doing="forking"),
            "system_prompt": self.system_prompt,
            "append_instruction": self.append_instruction,
            "tool_outputs": self.tool_outputs(),
            "budgets": budgets(
                max_steps=self.max_steps,
                max_tokens=self.max_tokens,
                max_cost_usd=self.max_cost_usd,
                deadline=self.deadline,
            ),
            "new_id": self.new_id,
            "again": self.again,
            "state": None if self.state is None else json_object(self.state, option="--state"),
            "model": self.model,
            "price": price(self.price),
            "context_window": self.context_window,
            "priority": self.priority,
            "concurrency_key": self.concurrency_key,
            "max_per_key": self.max_per_key,
        }

    def tool_outputs(self) -> dict[str, str]:
        """The outputs of --tool-output and of --tool-output-file (read here), by call."""
        given = pairs(self.tool_output, option="--tool-output")
        files = pairs(self.tool_output_file, option="--tool-output-file")
        for call_id, path in files.items():
            if call_id in given:
                raise InvalidInput(
                    f"--tool-output and --tool-output-file both give {call_id}; give each call once"
                )
            given[call_id] = text_file(path, option=f"--tool-output-file {call_id}")
        return given


#: the command-line options of `Fork`, in the order `--help` lists them
FORK_OPTIONS: dict[str, Any] = {
    "from_step": FromStep,
    "system_prompt": SystemPrompt,
    "append_instruction": AppendInstruction,
    "tool_output": ToolOutput,
    "tool_output_file": ToolOutputFile,
    "state": StatePatch,
    "model": ForkModel,
    "price": ForkPrice,
    "max_steps": ForkMaxSteps,
    "max_tokens": ForkMaxTokens,
    "max_cost_usd": ForkMaxCostUsd,
    "deadline": ForkDeadline,
    "context_window": ForkContextWindow,
    "priority": ForkPriority,
    "concurrency_key": ForkConcurrencyKey,
    "max_per_key": ForkMaxPerKey,
    "by": Forker,
    "new_id": NewId,
    "again": Again,
    "json_output": Json,
}


def fork_options(command: Callable[..., None]) -> Callable[..., None]:
    """`command` as Typer sees it with the fork options in place of its parameter `fork`
    (annotated `Fork`), which it is then given as one `Fork` value."""
    own = inspect.signature(command, eval_str=True)
    names = list(own.parameters)
    if "fork" not in names:
        raise TypeError(f"{command.__name__} takes no parameter `fork` for the fork options")
    at = names.index("fork")
    defaults = {
        f.name: inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        for f in dataclasses.fields(Fork)
    }
    shown = [
        inspect.Parameter(
            name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=kind,
            default=defaults[name],
        )
        for name, kind in FORK_OPTIONS.items()
    ]
    params = list(own.parameters.values())
    signature = own.replace(parameters=[*params[:at], *shown, *params[at + 1 :]])

    @functools.wraps(command)
    def run(**given: Any) -> None:
        fork = Fork(**{name: given.pop(name) for name in FORK_OPTIONS})
        command(**given, fork=fork)

    run.__signature__ = signature  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    return run


def budgets(
    *,
    max_steps: int | None = None,
    max_tokens: int | None = None,
    max_cost_usd: float | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """The budget options given, by budget name; the client validates the values."""
    given = {
        "max_steps": max_steps,
        "max_tokens": max_tokens,
        "max_cost_usd": max_cost_usd,
        "deadline_s": deadline,
    }
    return {name: value for name, value in given.items() if value is not None}


def json_object(text: str, *, option: str) -> dict[str, Any]:
    """A JSON object given inline or as `@PATH`."""
    source = text_file(text[1:], option=option) if text.startswith("@") else text
    try:
        value = json.loads(source)
    except ValueError as exc:
        raise InvalidInput(
            f"{option} is not valid JSON ({exc}); write an object such as "
            f'{option} \'{{"key": "value"}}\''
        ) from None
    if not isinstance(value, dict):
        raise InvalidInput(
            f"{option} must be a JSON object, got {type(value).__name__}: {source.strip()[:80]}"
        )
    return value


#: the largest file an option reads (`text_file`): far more than a server takes of any one
#: text (a tool's output, TICKWORK_MAX_OUTPUT_CHARS, is 20,000 characters unless raised)
MAX_TEXT_FILE_BYTES = 10_000_000


def text_file(path: str, *, option: str) -> str:
    """The UTF-8 text of the file at `path` (`~` expanded), for an option that takes one;
    a file over MAX_TEXT_FILE_BYTES is refused from its size, before it is read."""
    if not path.strip():
        raise InvalidInput(f"{option} needs a file's path")
    limit = MAX_TEXT_FILE_BYTES
    try:
        with Path(path).expanduser().open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            # a pipe has no size: what is read is bounded all the same
            data = b"" if size > limit else file.read(limit + 1)
    except OSError as exc:
        raise InvalidInput(f"{option}: cannot read {path}: {exc.strerror or exc}") from None
    if size > limit or len(data) > limit:
        shown = f"{size:,} bytes" if size > limit else f"over {limit:,} bytes"
        raise InvalidInput(
            f"{option}: {path} is {shown}; a file given to an option is read up to "
            f"{limit:,} bytes: give a shorter one"
        )
    try:
        # as read_text reads it: "\r\n" and "\r" end lines as "\n" does
        return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{option}: {path} is not UTF-8 text ({exc.reason} at byte {exc.start}); save "
            "it as UTF-8 and give it again"
        ) from None


def output_file(path: Path, *, option: str) -> Path:
    """A file the command is to write (`path`, `~` expanded), refused before anything runs
    if its folder does not exist or it is a folder itself."""
    path = path.expanduser()
    folder = path.absolute().parent
    if not folder.is_dir():
        raise InvalidInput(f"{option} {path}: the folder {folder} does not exist")
    if path.is_dir():
        raise InvalidInput(f"{option} {path} is a folder; give a file's path")
    return path


def pairs(items: list[str] | None, *, option: str) -> dict[str, str]:
    """`KEY=TEXT` items as a mapping; the text may hold `=` and be empty. A key given twice
    is refused: which of the two was meant, only the person knows."""
    found: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"{option} takes CALL_ID=TEXT, got {item!r}")
        if key.strip() in found:
            raise InvalidInput(
                f"{option} gives {key.strip()} twice ({quoted(found[key.strip()])} and "
                f"{quoted(value)}); give each call once"
            )
        found[key.strip()] = value
    return found


def fingerprint(text: str | None) -> str | None:
    """A call's fingerprint as `tickwork show` prints it (the API's body takes no other)."""
    if text is None:
        return None
    return parsing.fingerprint(text, what="--fingerprint", shown="`tickwork show` prints them")


def session_id(value: str) -> str:
    """A session id as given: an empty one, or one longer than any id, is a mistake, not
    an id nobody made."""
    return _an_id(value, "the session id", "a session id", "list sessions with `tickwork ls`")


def error_code(value: str | None) -> ErrorCode | None:
    """An --error-code or --code value, in any case, as the code it names: the codes are
    upper case wherever they are shown (`--help`, this refusal), not as typer lowercases
    a case-blind choice."""
    if value is None:
        return None
    try:
        return ErrorCode(value.strip().upper())
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is no error code; give one of {', '.join(ErrorCode)} (any case)"
        ) from None


def error_code_option(help: str, *names: str) -> Any:
    """The option of an error code (`error_code`), its codes listed in upper case."""
    return typer.Option(
        *names,
        help=f"{help} ({'|'.join(ErrorCode)}; any case).",
        metavar="CODE",
        callback=error_code,
    )


def dead_letter_key(value: str) -> str:
    """A dead letter's id or its session's id as given, checked as `session_id` (no dead
    letter's id is longer than a session's): the same words with --server as here."""
    return _an_id(
        value,
        "the dead letter's id",
        "a dead letter's id or session id",
        "list dead letters with `tickwork dlq ls`",
    )


def _an_id(value: str, the: str, one: str, listing: str) -> str:
    if not value.strip():
        raise InvalidInput(f"{the} is empty: give one; {listing}")
    if len(value) > MAX_SESSION_ID:
        raise InvalidInput(
            f"{quoted(value)} is {len(value):,} characters long, not {one} (at most "
            f"{MAX_SESSION_ID}); {listing}"
        )
    return value


def approver(name: str | None, *, doing: str = "deciding") -> str:
    """The `--as` name, else the login name."""
    if name is not None:
        if not name.strip():
            raise InvalidInput(f"--as needs a name: who is {doing}")
        return check_name(name, what="--as")
    try:
        login = getpass.getuser()
    except (OSError, KeyError):
        raise InvalidInput(f"who is {doing}? $USER is not set: pass --as NAME") from None
    try:
        return check_name(login, what="the login name ($LOGNAME or $USER)")
    except InvalidInput as exc:  # the user typed no name: say where it came from, and --as
        raise InvalidInput(f"{exc.message}; pass --as NAME") from None


def price(text: str | None) -> tuple[float, ...] | None:
    """`--price PROMPT,COMPLETION[,CACHED[,CACHE_WRITE]]` in USD per million tokens (CACHED:
    prompt tokens read from the provider's prompt cache; CACHE_WRITE: those written to it)."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    rates = []
    for field, part in zip(PRICE_RATES, parts, strict=False):
        name = field.upper()
        try:
            rate = float(part)
        except ValueError:
            _bad_price(text, f"{name} {part!r} is not a number")
        if not math.isfinite(rate):
            _bad_price(text, f"{name} {part!r} is not a finite number")
        if rate < 0:
            _bad_price(text, f"{name} {part!r} is below 0")
        if rate > MAX_PRICE:
            _bad_price(text, f"{name} {part!r} is above {MAX_PRICE:,.0f}")
        rates.append(rate)
    if not MIN_PRICE_RATES <= len(parts) <= len(PRICE_RATES):
        _bad_price(text, f"it has {'one number' if len(parts) == 1 else f'{len(parts)} numbers'}")
    return tuple(rates)


def _bad_price(text: str, why: str) -> NoReturn:
    raise InvalidInput(
        f"--price takes PROMPT,COMPLETION[,CACHED[,CACHE_WRITE]] in USD per million tokens, "
        f"e.g. --price 0.5,1.5 or --price 3,15,0.3,3.75 (CACHED: prompt tokens read from the "
        f"provider's cache, CACHE_WRITE: those written to it; left out, they keep the model's "
        f"discount, or cost PROMPT); {why}: got {text!r}"
    )


def model_spec(spec: str | None, providers: Providers) -> str | None:
    """`spec` as this host means it, by its provider: `scripted:PATH` with PATH made absolute
    (workers may run elsewhere) and the script checked now."""
    return None if spec is None else providers.resolve(spec)


#: every tenant, for the listings of the local mode
ALL_TENANTS = "*"
Tenant = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        metavar="NAME",
        help="The tenant (with --server: an admin token's filter or target; other tokens "
        "have their own tenant). Listings take '*' for every tenant.",
        show_default="the tenant 'default'; with --server, the token's",
    ),
]


def local_tenant(given: str | None, *, many: bool = False) -> str | None:
    """The tenant a local command works in: `default` unless given; None (every tenant) for
    '*' where `many` (a listing) allows it."""
    if given is None:
        return DEFAULT_TENANT
    if given == ALL_TENANTS and many:
        return None
    return check_tenant(given, what="--tenant")


def other_tenants(what: str, elsewhere: int, *, at_least: bool = False) -> str | None:
    """The note of a listing that, unasked, holds the default tenant's only, while other
    tenants' match too: an operator of several tenants would read "none" as none at all."""
    if not elsewhere:
        return None
    many = f"at least {elsewhere}" if at_least else str(elsewhere)
    return (
        f"the default tenant's {what}; {many} more of other tenants match: "
        "--tenant '*' lists them too"
    )


def note_other_tenants(what: str, everyone: Sequence[Any], limit: int) -> None:
    """Say on stderr how many of `everyone` (a listing's rows of every tenant, each with its
    `tenant`, at most `limit` of them: a hint, not a census) are other tenants' than the
    default one, for a listing that, unasked, shows the default tenant's only."""
    from tickwork import render

    elsewhere = sum(1 for row in everyone if row.tenant != DEFAULT_TENANT)
    said = other_tenants(what, elsewhere, at_least=len(everyone) >= limit)
    if said:
        render.note(said)


def remote_tenant(given: str | None, *, many: bool = False) -> str | None:
    """What a --server command sends as its tenant: nothing unless given (the token's)."""
    if given is None or (given == ALL_TENANTS and many):
        return None
    return check_tenant(given, what="--tenant")


def check_kind(ctx: Context, kind: str) -> None:
    """For a listing filtered by `kind` that found nothing: InvalidInput if no job kind has
    that name, neither one this process has (built in, or in TICKWORK_IMPORTS) nor the
    kind of a session stored (live or archived: a kind other hosts run, or ran once). A
    typo then says so, as a wrong --status does, instead of "no sessions match"."""
    from tickwork.worker.jobs import unknown_kind

    why = unknown_kind(ctx.settings.imports, kind, ctx.store, tenant=None)
    if why is not None:
        raise InvalidInput(why)
