"""`tickwork runbook [TOPIC]`: the operators' runbook, ops/RUNBOOK.md, which ships in the
wheel, so the messages that point to a section of it can be followed from any install."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from .manuals import read, shipped

#: package data in an installed wheel (`tickwork/ops`), `ops/` in a checkout
RUNBOOK = shipped("ops") / "RUNBOOK.md"


def register(app: typer.Typer) -> None:
    app.command()(runbook)


def sections(text: str) -> list[tuple[str, str]]:
    """The runbook's `## ` sections as (title, text from the heading on), in order."""
    parts = re.split(r"^(?=## )", text, flags=re.M)
    return [
        (p.splitlines()[0][3:].strip(), p.rstrip() + "\n") for p in parts if p.startswith("## ")
    ]


def about(topic: str, found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The sections whose title holds every word of `topic`, case aside."""
    words = topic.lower().split()
    return [(title, text) for title, text in found if all(w in title.lower() for w in words)]


def runbook(
    topic: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TOPIC",
            help="Words of a section's title (`upgrades`, `sandbox`, `graph version`); "
            "without them, the list of sections.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Print a section of the operators' runbook: what to do when something goes wrong,
    upgrades, backups, the sandbox, alerts. Messages that send you there name the command.
    """
    from tickwork.fsm.errors import InvalidInput

    found = sections(read(RUNBOOK, "the runbook"))
    asked = " ".join(topic or ())
    if not asked.strip():
        typer.echo("The runbook's sections (`tickwork runbook TOPIC` prints one):")
        for title, _ in found:
            typer.echo(f"  {title}")
        return
    chosen = about(asked, found)
    if not chosen:
        raise InvalidInput(
            f"no runbook section's title holds {asked!r}; list them with `tickwork runbook`"
        )
    typer.echo("\n".join(text for _, text in chosen), nl=False)
