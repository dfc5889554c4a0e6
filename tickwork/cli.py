"""The `tickwork` command: Typer for the arguments, Rich for the output.

Commands live in modules beside this one, each with a `register(app)`; a new command
group (the `demo`, say) is one more module listed in `COMMANDS`. Every error ends here,
in `main`, as one `error: ...` line on stderr: exit code 2 for a wrong command line (usage,
a malformed or unknown value, a file it names that cannot be read or written), 1 for what
does not exist or may not happen now (README.md, "Errors and exit codes";
tests/e2e/test_cli_exit_codes.py holds every command to it).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import typer
from pydantic import ValidationError

from tickwork.fsm.errors import (
    API_LISTING,
    ConfigurationError,
    DeadLetterClosed,
    InvalidInput,
    SessionArchived,
    SessionNotFound,
    TickworkError,
)

try:  # Typer 0.2x vendors its own Click
    from typer._click import exceptions as clicks
    from typer._click.core import Context, Parameter
except ImportError:  # pragma: no cover
    from click import Context, Parameter  # type: ignore[assignment]
    from click import exceptions as clicks  # type: ignore[no-redef]

#: modules whose `register(app)` adds their commands, in the order of `tickwork --help`
COMMANDS = (
    "tickwork.cli_demo",
    "tickwork.cli_sessions",
    "tickwork.cli_decisions",
    "tickwork.cli_dlq",
    "tickwork.cli_eval",
    "tickwork.cli_ops",
    "tickwork.cli_runbook",
    "tickwork.cli_docs",
    "tickwork.cli_gc",
    "tickwork.cli_env",
    "tickwork.cli_artifacts",
    "tickwork.cli_webhooks",
    "tickwork.cli_serve",
)

USAGE, REFUSED, INTERRUPTED = 2, 1, 130


def make_cli() -> typer.Typer:
    app = typer.Typer(
        name="tickwork",
        cls=PlainGroup,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
        help="Durable LLM agent sessions on Celery: submit, watch, approve, fork, and "
        "analyse dead letters. Configured by TICKWORK_* variables (`tickwork config`).",
    )
    app.callback()(_root)
    for name in COMMANDS:
        importlib.import_module(name).register(app)
    from .cli_remote import refuse_unserved

    refuse_unserved(app)
    for info in app.registered_commands:
        _one_line_summary(info)
    _whole_paragraphs(app)
    _plain_placeholders(app)
    return app


def _show_version(wanted: bool) -> None:
    if wanted:
        from tickwork.worker.config.release import version

        typer.echo(f"tickwork {version()}")
        raise typer.Exit()


def _root(
    ctx: typer.Context,
    server: str | None = typer.Option(
        None,
        "--server",
        metavar="URL",
        envvar="TICKWORK_SERVER",
        help="Send the command to this tickwork server's HTTP API (`tickwork serve`) with "
        "the token in TICKWORK_TOKEN, instead of using the database here. The commands the "
        "API serves take it; the others refuse.",
        show_default=False,
    ),
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_show_version,
        help="Print tickwork's version and exit.",
    ),
) -> None:
    """Durable LLM agent sessions on Celery."""
    ctx.obj = server


def _one_line_summary(info: typer.models.CommandInfo) -> None:
    """The command list shows a command's first paragraph; Rich markup keeps the docstring's
    line breaks there ("the relay runs⏎inside it."), so it gets the paragraph as one line."""
    doc = info.help or (info.callback.__doc__ if info.callback else None)
    if info.short_help is None and doc:
        info.short_help = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


def _whole_paragraphs(app: typer.Typer) -> None:
    """Rich markup keeps the line breaks of a docstring's later paragraphs too, so `--help`
    broke them where the source wraps ("with --once (every⏎pass"): each becomes one line."""
    for info in app.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if doc:
            paragraphs = inspect.cleandoc(doc).split("\n\n")
            info.help = "\n\n".join(
                p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs
            )
    for group in app.registered_groups:
        if group.typer_instance is not None:
            _whole_paragraphs(group.typer_instance)


def _plain_placeholders(app: typer.Typer) -> None:
    """Every command of `app` and of its groups shows plain placeholders (`PlainCommand`)."""
    for info in app.registered_commands:
        if _unset(info.cls, typer.core.TyperCommand):
            info.cls = PlainCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            if _unset(group.typer_instance.info.cls, typer.core.TyperGroup):
                group.typer_instance.info.cls = PlainGroup
            _plain_placeholders(group.typer_instance)


def _unset(cls: object, default: type) -> bool:
    """Whether a command's class is Typer's own (`Default(None)` or the class itself)."""
    return not isinstance(cls, type) or cls is default


class _Plain:
    """Typer 0.2x's help shows each value's Python type as its placeholder, a flag's too:
    `--json <bool>`, `--help <bool>` (a flag takes no value), `--status <list[queued|...]>`
    and `[TOPIC] <list[str]>` (one value each time, not a list). Here a flag shows none,
    and a repeatable option or argument the placeholder of one value (`<queued|...>`)."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        params: list[Parameter] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            shown = getattr(param, "display_type_rich", None)
            if getattr(param, "is_flag", False):
                param.metavar = ""  # Typer shows an option's metavar as its placeholder
            elif shown is not None and not getattr(shown, "plain", False):
                # not through the metavar: an argument's metavar is its name
                param.display_type_rich = _one_value(shown)  # type: ignore[attr-defined]
        return params


def _one_value(shown: Callable[[Context], str | None]) -> Callable[[Context], str | None]:
    """A parameter's placeholder, `<X>` for Typer's `<list[X]>`."""

    def display(ctx: Context) -> str | None:
        text = shown(ctx)
        found = re.fullmatch(r"<list\[(.*)\]>", text or "")
        return f"<{found.group(1)}>" if found else text

    display.plain = True  # type: ignore[attr-defined]
    return display


class PlainCommand(_Plain, typer.core.TyperCommand):
    """A command whose `--help` shows plain placeholders (`_Plain`)."""


class PlainGroup(_Plain, typer.core.TyperGroup):
    """A command group whose `--help` shows plain placeholders (`_Plain`)."""


def main(argv: Sequence[str] | None = None) -> None:
    """The console script; exits with the command's code."""
    command = typer.main.get_command(make_cli())
    try:
        code = command.main(
            args=list(argv) if argv is not None else None,
            prog_name="tickwork",
            standalone_mode=False,
        )
    except clicks.NoArgsIsHelpError as exc:
        # Typer's Rich help has already been printed while the error was built
        if exc.format_message().strip():
            typer.echo(exc.format_message())
        code = 0
    except clicks.UsageError as exc:
        # click raises a missing option value without its command: found from the words
        where = exc.ctx.command_path if exc.ctx else _command_path(command, argv)
        # pydantic's prefix on a value's own message says nothing to a user
        said = exc.format_message().replace("Value error, ", "")
        if "--server" in said and where != "tickwork":
            said += "; --server goes before the command: tickwork --server URL COMMAND ..."
        code = fail(f"{said} (see `{where} --help`)", USAGE)
    except clicks.ClickException as exc:
        code = fail(exc.format_message(), exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        code = fail("interrupted", INTERRUPTED)
    except BrokenPipeError:
        # the reader went away (`tickwork ls | head`): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except Exception as exc:
        message, code = explain(exc)
        if message is None:
            raise
        fail(message, code)
    sys.exit(code if isinstance(code, int) else 0)


def _command_path(command: Any, argv: Sequence[str] | None) -> str:
    """`tickwork dlq ls` for `tickwork --server URL dlq ls --code`: the deepest command the
    words name, each a subcommand of the one before."""
    path = ["tickwork"]
    for word in sys.argv[1:] if argv is None else argv:
        sub = getattr(command, "commands", {}).get(word)
        if sub is not None:
            command = sub
            path.append(word)
        elif not getattr(command, "commands", None):
            break
    return " ".join(path)


def fail(message: str, code: int) -> int:
    """Write one `error:` line on stderr, without the control characters `show` drops
    (it may quote what others wrote); return the exit code."""
    from .render import CONTROLS

    sys.stdout.flush()
    sys.stderr.write(f"error: {' '.join(str(message).split()).translate(CONTROLS)}\n")
    sys.stderr.flush()
    return code


def _where_looked() -> str:
    """Where a local command looked for sessions, on the embedded default: a command run
    from another folder reads another (empty) state folder. (A --server command's "no
    session" is the server's RemoteError, never a SessionNotFound.)"""
    try:
        from tickwork.store.urls import sqlite_file

        from .context import load_settings

        settings = load_settings()
        path = sqlite_file(settings.db_url)
    except Exception:
        return ""
    if path is None:
        return ""
    if settings.database_url:
        return f" (looked in {path}, TICKWORK_DATABASE_URL)"
    return (
        f" (looked in {path}: run commands from the folder you submitted from, or set "
        "TICKWORK_STATE_DIR)"
    )


#: where a --server command looked for a session it did not find, as `_where_looked` says
#: where a local one did
WHERE_ASKED = (
    " (asked the server --server or TICKWORK_SERVER names, among the sessions TICKWORK_TOKEN "
    "sees: is that the server, and a token of the tenant, you submitted with? An archived "
    "session is named by its whole id)"
)
#: the API's routes a server's refusal names for API callers ("...; API: GET /api/v1/...)")
_API_ROUTES = re.compile(r"; API: [^)]*\)")


def archived_said(session_id: str) -> str:
    """What a command that works on live sessions only says of an archived one: what is
    read of it still, and how."""
    return (
        f"session {session_id} is archived (retention moved it out of the live tables): it "
        f"can no longer be changed or waited for; `tickwork show {session_id}` reads it back "
        f"with its forks, `tickwork patch {session_id}` prints its patch, `tickwork fork "
        f"{session_id} --from-step K` forks it, and `tickwork ls --archived` lists the "
        "archived sessions"
    )


def explain(exc: Exception) -> tuple[str | None, int]:
    """The one-line message and exit code for an error a user can act on; None for a bug."""
    from .flags import by_settings, in_flags

    if isinstance(exc, InvalidInput):  # the input came from the command line: its flags
        return in_flags(exc.message), USAGE
    if isinstance(exc, ConfigurationError):  # the settings' words are the settings' own
        return exc.message, USAGE
    remote = sys.modules.get("tickwork.remote.errors")  # loaded only if a server was named
    if remote is not None and isinstance(exc, remote.RemoteError):
        # the server's settings speak their own words, as a ConfigurationError here does
        said = exc.message if by_settings(exc) else in_flags(exc.message)
        # the API's way to list is for API callers; here, this command line's
        if exc.code == "session_not_found":
            said = said.replace(f" ({API_LISTING})", "")
            said = _API_ROUTES.sub(")", said)  # an archived session's: what is served of it
            if exc.details.get("archived") is not True:
                said += WHERE_ASKED
        elif exc.code == "dead_letter_not_found":
            from tickwork.store.dead_letters import DeadLetterNotFound

            said = said.replace(DeadLetterNotFound.api_listing, DeadLetterNotFound.listing)
        return said, USAGE if exc.status in (400, 413, 422) else REFUSED
    if isinstance(exc, SessionArchived) and exc.session_id is not None:
        # in this command line's words, not the Python client's
        return archived_said(exc.session_id), REFUSED
    if isinstance(exc, SessionNotFound) and exc.session_id is not None:
        # the API's way to list sessions is for API callers; here, where this CLI looked
        return SessionNotFound.said(exc.session_id, exc.hint) + _where_looked(), REFUSED
    if isinstance(exc, DeadLetterClosed):  # its way out is a flag: `again` is --again
        return in_flags(exc.message), REFUSED
    if isinstance(exc, TickworkError):
        return exc.message, REFUSED
    if isinstance(exc, ValidationError):
        from .cli_remote import refusal

        first = exc.errors()[0]
        # a value the API's body refuses (checked before a --server request) names the option
        said = refusal(exc.title, first)
        where = ".".join(str(p) for p in first["loc"]) or exc.title
        return said or f"invalid {where}: {first['msg']}", USAGE
    if isinstance(exc, TimeoutError):
        return str(exc), REFUSED
    if isinstance(exc, OSError):
        return (f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)), REFUSED
    return None, REFUSED
