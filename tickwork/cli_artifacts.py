"""`tickwork artifacts verify`: scrub the artifact store (every blob against its hash)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from . import options, render, views
from .context import Context


def register(app: typer.Typer) -> None:
    artifacts = typer.Typer(no_args_is_help=True, help="The artifact store's blobs.")
    artifacts.command()(verify)
    app.add_typer(artifacts, name="artifacts")


def verify(
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Replace each bad blob from the archive, or delete it when no good copy "
            "exists (a session needing it then stops on a missing blob; submitting the "
            "same source again puts it back).",
        ),
    ] = False,
    json_output: options.Json = False,
) -> None:
    """Read every blob of the artifact store (TICKWORK_ARTIFACTS_URL) and check it against
    its hash; list the bad ones. Exits 1 if a bad blob is left or had to be deleted."""
    from tickwork.store.scrub import scrub

    with Context() as ctx:
        live = ctx.client.artifacts
        where = ctx.settings.artifacts_url or "the database's blobs table"
        report = scrub(live, ctx.reads.archive, repair=repair)  # type: ignore[arg-type]
        if json_output:
            views.emit(
                {
                    "store": where,
                    "checked": report.checked,
                    "bad": [{"hash": f.key, "action": f.action} for f in report.findings],
                }
            )
        else:
            if report.findings:
                table = Table("blob", "what was done", title="blobs that do not match their hash")
                for finding in report.findings:
                    table.add_row(finding.key, finding.action)
                render.show(table)
            render.show(f"checked {report.checked} blob(s) in {where}: {len(report.findings)} bad")
    if report.lost:
        raise typer.Exit(1)
