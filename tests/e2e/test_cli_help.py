"""Every command's --help: each option's text whole (Rich markup eats `[...]`), its default
shown, and no sentence left broken."""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from unittest import mock

import pytest
import typer

from tickwork.cli import main, make_cli

try:
    from typer._click import Command
except ImportError:  # pragma: no cover
    from click import Command  # type: ignore[assignment]


def _commands(
    command: Command, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Command]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(make_cli())))


def _help(path: tuple[str, ...]) -> str:
    out = io.StringIO()
    with (
        mock.patch.dict(os.environ, {"COLUMNS": "250"}),
        contextlib.redirect_stdout(out),
        pytest.raises(SystemExit) as exited,
    ):
        main([*path, "--help"])
    assert exited.value.code == 0
    # the text as read: box drawing and line wraps gone
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", out.getvalue()).split())


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(p) or "tickwork" for p, _ in COMMANDS]
)
def test_help_shows_each_option_whole_with_its_default(
    path: tuple[str, ...], command: Command
) -> None:
    shown = _help(path)
    assert not re.search(r"\w \.(\s|$)", shown), shown  # "Ticks run at once ." lost its end
    for param in command.params:
        text = getattr(param, "help", None)
        if text:
            assert _flat(text) in shown, (param.name, text)
        default = getattr(param, "show_default", None)
        if isinstance(default, str):
            assert f"[default: ({default})]" in shown, (param.name, default)
        if param.required or param.default in (None, False, (), "") or param.name == "help":
            continue
        value = getattr(param.default, "value", param.default)
        if getattr(param, "secondary_opts", None):  # --x/--no-x shows the flag in force
            value = (param.opts if value else param.secondary_opts)[0].lstrip("-")
        assert f"[default: {value}]" in shown, (param.name, param.default)
    if command.help:
        assert _flat(command.help.split("\n\n")[0]) in shown


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(p) or "tickwork" for p, _ in COMMANDS]
)
def test_help_shows_no_placeholder_for_a_flag_nor_a_list_for_a_repeated_value(
    path: tuple[str, ...], command: Command
) -> None:
    """Typer 0.2x showed `--json <bool>`, `--help <bool>` (a flag takes no value),
    `--status <list[queued|...]>` and `[TOPIC]... <list[str]>` (one value each time), and
    `[[TOPIC]...]...` for a metavar written for older Typers; and a default of `(default
    (--server: the token's))`."""
    shown = _help(path)
    assert "<bool>" not in shown and "<list[" not in shown, shown
    assert "]...]" not in shown and "...}" not in shown, shown
    assert "((" not in shown and "))" not in shown, shown
    for param in command.params:
        if getattr(param, "is_flag", False):
            opts = "  ".join([*param.opts, *param.secondary_opts])
            flag = " ".join(opts.split())  # the row, as _help flattens it
            assert f"{flag} {_flat(param.help or '')}" in shown, (flag, shown)


def test_the_options_that_used_to_lose_their_defaults_show_them() -> None:
    worker = _help(("worker",))
    threads = "250 for --pool threads on a server broker, else CPUs"
    assert f"Ticks run at once. [default: ({threads})]" in worker
    assert "[default: (threads for the embedded broker, else prefork)]" in worker
    assert "unique per worker by default. [default: (tickwork-PID@HOST)]" in worker
    assert "[default: ($TICKWORK_MODEL)]" in _help(("submit",))


def test_the_command_list_gives_each_command_its_summary_on_one_line() -> None:
    out = io.StringIO()
    with (
        mock.patch.dict(os.environ, {"COLUMNS": "250"}),
        contextlib.redirect_stdout(out),
        pytest.raises(SystemExit),
    ):
        main(["--help"])
    lines = {line.split()[1]: line for line in out.getvalue().splitlines() if line[2:3].isalpha()}
    assert "the relay runs inside it." in lines["worker"], lines["worker"]
    assert "and revive sessions whose worker died." in lines["relay"], lines["relay"]
    assert "TICKWORK_API_TOKENS_FILE." in lines["serve"], lines["serve"]


@pytest.mark.parametrize(
    ("path", "command"),
    [(p, c) for p, c in COMMANDS if c.help and "\n\n" in c.help],
    ids=[" ".join(p) for p, c in COMMANDS if c.help and "\n\n" in c.help],
)
def test_a_later_paragraph_of_a_command_s_help_is_not_broken_where_its_source_wraps(
    path: tuple[str, ...], command: Command
) -> None:
    out = io.StringIO()
    with (
        mock.patch.dict(os.environ, {"COLUMNS": "250"}),
        contextlib.redirect_stdout(out),
        pytest.raises(SystemExit),
    ):
        main([*path, "--help"])
    lines = [line.strip() for line in out.getvalue().splitlines()]
    for paragraph in command.help.split("\n\n")[1:]:
        assert _flat(paragraph) in lines, (paragraph, lines)
