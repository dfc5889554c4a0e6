"""`tickwork dlq`: list, show, count, export, fork, resolve and dismiss dead letters."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.wording import counted

from . import cli_remote, exports, options, parsing, render, views
from .cli_sessions import fork_session
from .context import Context

if TYPE_CHECKING:
    from tickwork.store.dead_letters import DeadLetter


class Grouping(StrEnum):
    CODE = "code"  #: the error code
    KIND = "kind"  #: the job kind
    MODEL = "model"  #: the model spec
    LAST_TOOL = "last_tool"  #: the last tool the session called
    ERROR_SIGNATURE = "error_signature"  #: the message with its particulars taken out


#: an ErrorCode once parsed (`options.error_code`)
Code = Annotated[str | None, options.error_code_option("Only dead letters with this error code")]
Kind = Annotated[str | None, typer.Option(help="Only dead letters of this job kind.")]
Since = Annotated[
    str | None,
    typer.Option(
        metavar="WHEN", help="Only since an ISO time (naive: UTC) or a duration ago: 2h, 3d."
    ),
]
Unresolved = Annotated[
    bool, typer.Option(help="Only dead letters not yet forked, resolved or dismissed.")
]
Reason = Annotated[str, typer.Option("--reason", help="Why: kept with the dead letter.")]
Key = Annotated[
    str,
    typer.Argument(
        metavar="ID", help="Dead-letter id or session id.", callback=options.dead_letter_key
    ),
]
DeadLetterKey = Annotated[
    str,
    typer.Argument(
        metavar="ID",
        help="The dead-letter id, or the failed session's id.",
        callback=options.dead_letter_key,
    ),
]


def register(app: typer.Typer) -> None:
    dlq = typer.Typer(no_args_is_help=True, help="Failed sessions kept for analysis and forks.")
    dlq.command("ls")(list_dead_letters)
    dlq.command()(show)
    dlq.command()(stats)
    dlq.command()(export)
    dlq.command()(fork)
    dlq.command()(resolve)
    dlq.command()(dismiss)
    app.add_typer(dlq, name="dlq")


def list_dead_letters(
    code: Code = None,
    kind: Kind = None,
    since: Since = None,
    unresolved: Unresolved = False,
    limit: Annotated[
        int, typer.Option(min=1, max=options.MAX_LIMIT, help="At most this many.")
    ] = 100,
    tenant: options.Tenant = None,
    json_output: options.Json = False,
) -> None:
    """List dead letters, newest first."""
    remote = cli_remote.client()
    if remote is not None:
        parsing.since(since, now=datetime.now(UTC))  # a bad --since is refused here, as locally
        with remote:
            letters = remote.dead_letters(
                code=code,
                kind=kind,
                since=since,
                unresolved=unresolved,
                limit=limit,
                tenant=options.remote_tenant(tenant, many=True),
            )
        found = [views.dead_letter(d) for d in letters]
    else:
        with Context() as ctx:
            found = [
                views.dead_letter(d)
                for d in _list(ctx, code, kind, since, unresolved, limit, tenant)
            ]
            if tenant is None and not json_output:
                _note_other_tenants(ctx, code, kind, since, unresolved, limit)
    render.listing(
        found, render.dead_letters_table, json_output=json_output, none="no dead letters match"
    )


def show(key: Key, json_output: options.Json = False) -> None:
    """Show a dead letter and its session snapshot as a timeline."""
    remote = cli_remote.client()
    if remote is not None:
        with remote:
            view = remote.dead_letter(key)
    else:
        with Context() as ctx:
            letter = ctx.dead_letter(key)
            view = views.dead_letter_shown(
                letter,
                found_forks=ctx.reads.forks(letter.session_id),
                earlier=ctx.reads.earlier_patches(letter.session()),
            )
    if json_output:
        views.emit(view)
    else:
        render.show(render.dead_letter_header(view), render.timeline(view["session"]))


@options.fork_options
def fork(key: DeadLetterKey, fork: options.Fork) -> None:
    """Fork a dead letter's session from step K with a patch; the dead letter is resolved.
    Steps 1..K are kept: their model calls, tokens and cost count against the fork's
    budgets, so give each above what they used; the deadline runs from the fork."""
    fork_session(key, fork, dead_letter=True)


def resolve(
    key: Key, reason: Reason, by: options.Approver = None, json_output: options.Json = False
) -> None:
    """Mark a dead letter resolved without forking it (the cause was fixed another way)."""
    _close(key, "resolved", reason, by, json_output)


def dismiss(
    key: Key, reason: Reason, by: options.Approver = None, json_output: options.Json = False
) -> None:
    """Dismiss a dead letter: nothing is to be done about it."""
    _close(key, "dismissed", reason, by, json_output)


def _close(key: str, state: str, reason: str, by: str | None, json_output: bool) -> None:
    from tickwork.store.dead_letters import Closing, check_reason

    # before the server's body check, whose words name no option ("invalid reason: ...")
    check_reason(Closing(state), reason, what="--reason TEXT")
    remote = cli_remote.client()
    if remote is not None:
        cli_remote.no_name(by)
        with remote:
            verb = remote.resolve_dead_letter if state == "resolved" else remote.dismiss_dead_letter
            closed = verb(key, reason)
    else:
        name = options.approver(by, doing="resolving" if state == "resolved" else "dismissing")
        with Context() as ctx:
            letter = ctx.dead_letter(key)
            closed = ctx.client.close_dead_letter(
                letter.id, state=Closing(state), by=name, reason=reason
            )
    if json_output:
        views.emit(views.dead_letter(closed))
    else:
        render.show(Text(f"dead letter {closed.id} (session {closed.session_id}) {state}"))


def stats(
    by: Annotated[
        Grouping | None, typer.Option(help="Group by this only.", show_default="every grouping")
    ] = None,
    since: Since = None,
    recount: Annotated[
        bool,
        typer.Option(
            "--recount",
            help="Derive every dead letter's error signature again and count them afresh "
            "first: after an upgrade that changed the signatures, or to migration 0009 while "
            "older workers still ran (`tickwork runbook upgrades`).",
        ),
    ] = False,
    unresolved: Unresolved = False,
    tenant: options.Tenant = None,
    json_output: options.Json = False,
) -> None:
    """Count dead letters by code, kind, model, last tool and error signature."""
    start = parsing.since(since, now=datetime.now(UTC))
    remote = cli_remote.client()
    if remote is not None:
        if recount:
            cli_remote.local_only("`tickwork dlq stats --recount`")
        with remote:
            counted = remote.dead_letter_stats(
                by=by.value if by else None,
                since=since,
                unresolved=unresolved,
                tenant=options.remote_tenant(tenant, many=True),
            )
        grouped = counted["by"]
        start = datetime.fromisoformat(counted["since"]) if counted["since"] else None
    else:
        with Context() as ctx:
            if recount:
                ctx.store.recount_dead_letters()
            grouped = {
                g.value: [
                    _jsonable(r)
                    for r in ctx.store.dead_letter_stats(
                        by=g.value,
                        since=start,
                        unresolved=unresolved,
                        tenant=options.local_tenant(tenant, many=True),
                    )
                ]
                for g in ([by] if by else Grouping)
            }
            if tenant is None and not json_output:
                # every tenant's, counted by code (one row per code: a small query)
                everyone = ctx.store.dead_letter_stats(
                    by=Grouping.CODE.value, since=start, unresolved=unresolved, tenant=None
                )
                here = sum(r["count"] for r in next(iter(grouped.values())))
                said = options.other_tenants(
                    "dead letters", sum(int(r["count"]) for r in everyone) - here
                )
                if said:
                    render.note(said)
    total = sum(r["count"] for r in next(iter(grouped.values())))
    if json_output:
        views.emit({"since": views.date(start), "total": total, "by": grouped})
        return
    render.show(
        Text(
            f"{total} {'open ' if unresolved else ''}dead letters"
            + (f" since {render.when(views.date(start))}" if start else "")
        ),
        *render.stats_tables(grouped),
    )


def export(
    code: Code = None,
    kind: Kind = None,
    since: Since = None,
    unresolved: Unresolved = False,
    form: Annotated[
        exports.Format,
        typer.Option(
            "--format", help="jsonl, csv or parquet (Parquet needs pyarrow: the parquet extra)."
        ),
    ] = exports.Format.JSONL,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            "--out",
            help="Write to this file (`-`: stdout).",
            show_default="stdout",
        ),
    ] = None,
    snapshot: Annotated[
        bool, typer.Option("--snapshot", help="Add each dead letter's session snapshot (JSON).")
    ] = False,
    tenant: options.Tenant = None,
) -> None:
    """Export dead letters, oldest first, one row each: code (the cause), message, error
    signature, kind, model, last tool, steps, tokens, cost, lineage, status and times."""
    if output is not None and str(output) == "-":
        output = None
    remote = cli_remote.client()
    if remote is None:
        exports.check(form)  # a server exports Parquet with its own pyarrow
    if form.binary and output is None and sys.stdout.isatty():
        raise InvalidInput("Parquet is binary: give --output FILE, or redirect stdout to a file")
    if output is not None:
        output = options.output_file(output, option="--output")
    start = parsing.since(since, now=datetime.now(UTC))
    if remote is not None:
        with remote:
            data = remote.export_dead_letters(
                tenant=options.remote_tenant(tenant, many=True),
                format=form.value,
                code=code,
                kind=kind,
                since=since,
                unresolved=unresolved,
                snapshot=snapshot,
            )
        if output is None:
            if form.binary:
                sys.stdout.flush()
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            else:
                sys.stdout.write(data.decode("utf-8"))
                sys.stdout.flush()
            return
        output.write_bytes(data)
        render.show(Text(f"wrote {cli_remote.counted(form, data)} to {output} ({form.value})"))
        return
    with Context() as ctx:
        if kind is not None:
            # the rows stream: a misspelt kind is refused before any is written, as the API does
            options.check_kind(ctx, kind)
        if tenant is None:
            # a hint, not a census: counted among every tenant's newest thousand
            _note_other_tenants(ctx, code, kind, since, unresolved, 1000)
        rows = ctx.store.dead_letter_rows(
            code=code,
            kind=kind,
            since=start,
            unresolved=unresolved,
            with_snapshot=snapshot,
            tenant=options.local_tenant(tenant, many=True),
        )
        if output is None:
            stream: Any = sys.stdout.buffer if form.binary else sys.stdout
            exports.write(form, rows, stream, with_snapshot=snapshot)
            stream.flush()
            return
        if form.binary:
            with output.open("wb") as file:
                n = exports.write(form, rows, file, with_snapshot=snapshot)
        else:
            with output.open("w", encoding="utf-8", newline="") as file:
                n = exports.write(form, rows, file, with_snapshot=snapshot)
    render.show(Text(f"wrote {counted(n, 'dead letter')} to {output} ({form.value})"))


def _list(
    ctx: Context,
    code: str | None,
    kind: str | None,
    since: str | None,
    unresolved: bool,
    limit: int,
    tenant: str | None,
) -> list[DeadLetter]:
    start = parsing.since(since, now=datetime.now(UTC))
    found = ctx.store.dead_letters(
        code=code,
        kind=kind,
        since=start,
        unresolved=unresolved,
        limit=limit,
        tenant=options.local_tenant(tenant, many=True),
    )
    if kind is not None and not found:
        options.check_kind(ctx, kind)
    return found


def _note_other_tenants(
    ctx: Context,
    code: str | None,
    kind: str | None,
    since: str | None,
    unresolved: bool,
    limit: int,
) -> None:
    """Say on stderr how many dead letters of other tenants the filters match, for a command
    that, unasked, reads the default tenant's only."""
    everyone = _list(ctx, code, kind, since, unresolved, limit, options.ALL_TENANTS)
    options.note_other_tenants("dead letters", everyone, limit)


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    latest = row.get("latest")
    return {**row, "latest": views.date(latest) if isinstance(latest, datetime) else latest}
