"""What the command line takes: shared option types and the parsers of their values.

Parsers raise `InvalidInput` naming the option and what to write instead, so every bad
value ends as one `error:` line with exit code 2. Parsers the HTTP API shares (`since`) are
in `parsing.py`, which does not import Typer.
"""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tickwork.fsm.errors import InvalidInput

if TYPE_CHECKING:
    from tickwork.worker.models import Providers

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
MaxSteps = Annotated[
    int | None, typer.Option(help="Budget: model calls.", rich_help_panel="Budgets")
]
MaxTokens = Annotated[
    int | None, typer.Option(help="Budget: prompt + completion tokens.", rich_help_panel="Budgets")
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
        help="Budget: seconds from creation (or from the fork).", rich_help_panel="Budgets"
    ),
]


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
    source = text
    if text.startswith("@"):
        try:
            source = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInput(f"{option}: cannot read {text[1:]}: {exc.strerror or exc}") from None
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


def pairs(items: list[str] | None, *, option: str) -> dict[str, str]:
    """`KEY=TEXT` items as a mapping; the text may hold `=` and be empty."""
    found: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"{option} takes CALL_ID=TEXT, got {item!r}")
        found[key.strip()] = value
    return found


def approver(name: str | None, *, doing: str = "deciding") -> str:
    """The `--as` name, else the login name."""
    if name is not None:
        if not name.strip():
            raise InvalidInput(f"--as needs a name: who is {doing}")
        if len(name.strip()) > 200:
            raise InvalidInput("--as takes a name of at most 200 characters")
        return name.strip()
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        raise InvalidInput(f"who is {doing}? $USER is not set: pass --as NAME") from None


def price(text: str | None) -> tuple[float, float] | None:
    """`--price PROMPT,COMPLETION` in USD per million tokens."""
    if text is None:
        return None
    parts = text.split(",")
    try:
        prompt, completion = (float(p) for p in parts)
    except ValueError:
        raise InvalidInput(
            f"--price takes PROMPT,COMPLETION in USD per million tokens, e.g. --price 0.5,1.5; "
            f"got {text!r}"
        ) from None
    return prompt, completion


def model_spec(spec: str | None, providers: Providers) -> str | None:
    """`spec` as this host means it, by its provider: `scripted:PATH` with PATH made absolute
    (workers may run elsewhere) and the script checked now."""
    return None if spec is None else providers.resolve(spec)
