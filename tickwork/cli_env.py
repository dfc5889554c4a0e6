"""`tickwork env ls|show|rm`: repair jobs' environments (docs/DESIGN.md section 13), built once
per key."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from tickwork.fsm.errors import EnvironmentNotFound, InvalidInput

from . import options, render, views
from .context import Context

Key = Annotated[str, typer.Argument(metavar="KEY", help="The environment's key (or a prefix).")]


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        no_args_is_help=True,
        help="Repair jobs' environments (/env): list, show with the build log, remove.",
    )
    group.command("ls")(list_environments)
    group.command()(show)
    group.command()(rm)
    app.add_typer(group, name="env")


def _view(env: Any, *, log: bool = False) -> dict[str, Any]:
    shown = {
        "key": env.key,
        #: the project it was built for ("" for one built before it was recorded)
        "project": _project(env),
        "status": env.status.value,
        "size": env.size,
        "attempts": env.attempts,
        "sessions": env.sessions,
        "live_sessions": env.live_sessions,
        "owner": env.owner,
        "created_at": views.date(env.created_at),
        "finished_at": views.date(env.finished_at),
        "used_at": views.date(env.used_at),
        "detail": env.detail,
    }
    if log:
        shown["log"] = env.log
    return shown


def _project(env: Any) -> str:
    """The project the environment was built for, as its record names it; "" if unknown."""
    found = env.detail.get("project")
    return found if isinstance(found, str) else ""


def _find(ctx: Context, key: str) -> Any:
    if len(key) < 4 or not all(c in "0123456789abcdef" for c in key):
        raise InvalidInput(f"{key!r} is not an environment key (hex, at least 4 characters)")
    found = [e for e in ctx.store.environments.find() if e.key.startswith(key)]
    if not found:
        raise EnvironmentNotFound(f"no environment has the key {key!r}; see `tickwork env ls`")
    if len(found) > 1:
        raise InvalidInput(f"{key!r} names {len(found)} environments; give more of the key")
    return found[0]


def list_environments(json_output: options.Json = False) -> None:
    """List environments: key, the project each was built for, status, size, last used,
    sessions using them (live)."""
    with Context() as ctx:
        found = ctx.store.environments.find()
    if json_output:
        views.emit([_view(e) for e in found])
        return
    table = Table(show_edge=False, pad_edge=False)
    for name in ("KEY", "PROJECT", "STATUS", "SIZE", "LAST USED", "SESSIONS (LIVE)", "SETUP"):
        table.add_column(name)
    for e in found:
        setup = e.detail.get("setup")
        table.add_row(
            e.key[:12],
            Text(_project(e) or "-"),
            Text(e.status.value, "red" if e.status.value == "failed" else ""),
            f"{e.size:,}",
            render.when(e.used_at.isoformat()),
            f"{e.sessions} ({e.live_sessions})",
            setup if isinstance(setup, str) else f"{len(setup or [])} command(s)",
        )
    render.show(table if found else Text("no environments"))


def show(key: Key, json_output: options.Json = False) -> None:
    """Show one environment: what was asked and found, and its build log."""
    with Context() as ctx:
        env = _find(ctx, key)
    if json_output:
        views.emit(_view(env, log=True))
        return
    grid = Table.grid(padding=(0, 2))
    view = _view(env)
    for name, value in view.items():
        if name != "detail":
            grid.add_row(name, Text(str(value)))
    for name, value in env.detail.items():
        if name not in view:  # the record's key, status and project are shown above
            grid.add_row(name, Text(str(value)))
    render.show(grid, Text("build log:", style="bold"), Text(env.log or "(empty)"))


def rm(
    key: Key,
    force: Annotated[
        bool, typer.Option("--force", help="Remove it even if a live session uses it.")
    ] = False,
    json_output: options.Json = False,
) -> None:
    """Remove an environment (refused while a live session uses it, unless --force); a
    session that needs it later must be forked to build it again."""
    import shutil

    with Context() as ctx:
        env = _find(ctx, key)
        ctx.store.environments.delete(env.key, force=force)
        shutil.rmtree(ctx.settings.workspaces_path / "environments" / env.key, ignore_errors=True)
    if json_output:
        views.emit({"removed": env.key})
        return
    render.show(Text(f"removed environment {env.key}"))
