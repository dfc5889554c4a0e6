"""`tickwork gc`: archive and prune finished sessions now, by the retention policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.wording import counted

from . import options, render, views
from .context import Context

if TYPE_CHECKING:
    from tickwork.worker.config.settings import Settings
    from tickwork.worker.tick.retention import RetentionSettings


def register(app: typer.Typer) -> None:
    app.command()(gc)


def gc(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would go; change nothing.")
    ] = False,
    batches: Annotated[
        int | None,
        typer.Option(min=1, help="Stop after this many batches.", show_default="all that are due"),
    ] = None,
    take_over_after: Annotated[
        float,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="Finish batches another pass left pending this long ago (writing one again "
            "is safe: it replaces the same objects).",
        ),
    ] = 0.0,
    json_output: options.Json = False,
) -> None:
    """Archive finished sessions past their retention age (TICKWORK_RETENTION_*) to the
    archive as JSON Lines and Parquet by day, then delete them from the live tables; workers
    do the same in the background, a few batches at a time."""
    from tickwork.worker.config.settings import read_settings
    from tickwork.worker.tick.retention import RetentionSettings, drop_archived_copies, run_pass

    retention = read_settings(RetentionSettings)
    policy = retention.policy()
    with Context() as ctx:
        kept = ctx.store.retention
        archive = ctx.reads.archive
        now = ctx.client.clock()
        before = kept.live_and_archived()
        ages = {
            "completed": policy.completed_s,
            "cancelled": policy.cancelled_s,
            "failed (dead letter closed)": policy.failed_s,
        }
        if dry_run:
            if policy.enabled:
                retention.shared_archive(ctx.settings)  # refused as `gc` itself would be
            due = kept.eligible(policy, now=now)
            if json_output:
                views.emit({"dry_run": True, "due": due, "rows": before, "archive": archive.url})
                return
            render.show(
                _policy_table(ages),
                _due_table(due),
                _rows_table(before, None),
                Text(f"archive: {archive.url}"),
            )
            if not policy.enabled:
                render.show(Text(_OFF + _unshared(retention, ctx.settings)))
            return
        report = run_pass(
            ctx.store,
            retention.shared_archive(ctx.settings),
            retention,
            now=now,
            max_batches=batches,
            stale_after_s=take_over_after,
            artifacts=ctx.client.artifacts,
            clock=ctx.client.clock,
        )
        dropped = drop_archived_copies(
            ctx.store, ctx.settings.workspaces_path, ctx.client.files.drop, since=now
        )
        after = kept.live_and_archived()
    summary: dict[str, Any] = {
        "archived": report.archived,
        "batches": report.batches,
        "resumed": report.resumed,
        "retried": report.retried,
        "parquet": report.parquet,
        "archive": archive.url,
        "locations": list(report.locations),
        "working_copies_dropped": dropped,
        "blobs_moved": report.blobs_moved,
        "rows_before": before,
        "rows_after": after,
    }
    if json_output:
        views.emit(summary)
        return
    archived = counted(report.archived, "session")
    line = f"archived {archived} in {counted(report.batches, 'batch', 'batches')} to {archive.url}"
    if report.blobs_moved:
        line += f", and {counted(report.blobs_moved, 'blob')} only they used"
    if report.resumed:
        line += f" ({report.resumed} left pending by a pass that stopped)"
    render.show(Text(line), _rows_table(before, after))
    if not report.parquet:
        render.show(
            Text(
                "Parquet skipped: pyarrow is not installed (pip install 'tickwork[parquet]'); "
                "the archive has JSON Lines only",
                style="yellow",
            )
        )
    if report.retried:
        changed = counted(report.retried, "batch", "batches")
        render.show(Text(f"{changed} changed while written; the next pass retries"))
    if not policy.enabled and not report.batches:
        render.show(Text(_OFF))


def _unshared(retention: RetentionSettings, settings: Settings) -> str:
    """What else turning retention on needs, for a dry run with retention off: the archive
    it names would be refused on a shared database, which the operator learnt only once
    retention was on."""
    try:
        retention.shared_archive(settings)
    except ConfigurationError as exc:
        return f"; but first: {exc}"
    return ""


_OFF = (
    "retention is off: set TICKWORK_RETENTION_COMPLETED_S, _CANCELLED_S or _FAILED_S "
    "(seconds a finished session stays live) to archive and prune"
)


def _policy_table(ages: dict[str, float | None]) -> Table:
    table = Table(title="retention policy", title_justify="left")
    table.add_column("SESSIONS")
    table.add_column("STAY LIVE", justify="right")
    for name, age in ages.items():
        table.add_row(name, "for ever" if age is None else f"{age:g} s")
    return table


def _due_table(due: dict[str, int]) -> Table:
    table = Table(title="would archive now", title_justify="left")
    table.add_column("STATUS")
    table.add_column("SESSIONS", justify="right")
    for status in ("completed", "cancelled", "failed"):
        table.add_row(status, str(due.get(status, 0)))
    table.add_row("pending (a pass stopped)", str(due.get("pending", 0)))
    return table


def _rows_table(before: dict[str, int], after: dict[str, int] | None) -> Table:
    table = Table(title="rows", title_justify="left")
    table.add_column("TABLE")
    table.add_column("BEFORE" if after is not None else "NOW", justify="right")
    if after is not None:
        table.add_column("AFTER", justify="right")
    for name, count in before.items():
        table.add_row(name, str(count), *([str(after.get(name, 0))] if after is not None else []))
    return table
