"""`tickwork docs [TOPIC] [WORDS]...`: the docs (docs/*.md), which ship in the wheel, so the
messages that point to one ("docs/ENVIRONMENTS.md (`tickwork docs environments`)") can be
followed from any install."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from tickwork.fsm.errors import InvalidInput

from .manuals import choose, missing, read, sections, shipped

#: package data in an installed wheel (`tickwork/docs`), `docs/` in a checkout
DOCS = shipped("docs")


def register(app: typer.Typer) -> None:
    app.command()(docs)


@dataclass(frozen=True)
class Doc:
    """One page of the docs: `tickwork docs TOPIC` prints it."""

    topic: str  #: the file's name in lower case, `-` for `_`: `job-kinds` for JOB_KINDS.md
    path: Path

    @property
    def name(self) -> str:
        """How messages and the README name it: `docs/JOB_KINDS.md`."""
        return f"docs/{self.path.name}"

    def title(self) -> str:
        """The page's first heading, its one-line description."""
        found = sections(read(self.path, self.name))
        return found[0].title if found else ""


def topic_of(name: str) -> str:
    """The topic a doc's name gives: `docs/JOB_KINDS.md`, `JOB_KINDS` and `job_kinds` are
    all `job-kinds`."""
    name = name.strip().removeprefix("docs/").removesuffix(".md").removesuffix(".MD")
    return name.lower().replace("_", "-")


def pages() -> list[Doc]:
    """Every page of the docs, by topic; NotInstalled when this install has none."""
    found = sorted(DOCS.glob("*.md")) if DOCS.is_dir() else []
    if not found:
        raise missing("the docs", DOCS)
    return sorted((Doc(topic_of(p.name), p) for p in found), key=lambda d: d.topic)


def find(topic: str) -> Doc:
    """The page `topic` names; InvalidInput listing the topics when none does."""
    found = pages()
    wanted = topic_of(topic)
    for doc in found:
        if doc.topic == wanted:
            return doc
    listed = ", ".join(d.topic for d in found)
    raise InvalidInput(f"no doc is called {topic!r}; the topics are {listed}")


def docs(
    topic: Annotated[
        str | None,
        typer.Argument(
            metavar="TOPIC[#ANCHOR]",
            help="A page, by the topic the list shows (`environments`), or one section of it "
            "by its anchor (`environments#settings`); without it, the list of pages.",
            show_default=False,
        ),
    ] = None,
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="WORDS",
            help="Words of a heading: print the sections whose heading holds them all "
            "(`tickwork docs design 16`, `tickwork docs environments key`).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Print a page of the docs (docs/*.md, shipped with tickwork), or one section of it.
    Messages that point to a page name the command that prints it. Pipe it to `less` to page
    through a long one.
    """
    if topic is None or not topic.strip():
        found = pages()
        typer.echo(
            "The docs (`tickwork docs TOPIC` prints one, `tickwork docs TOPIC WORDS` a section):"
        )
        width = max(len(d.topic) for d in found)
        for doc in found:
            typer.echo(f"  {doc.topic:<{width}}  {doc.title()}")
        typer.echo("The operators' runbook: `tickwork runbook`.")
        return
    name, hash_, anchor = topic.partition("#")
    doc = find(name)
    text = read(doc.path, doc.name)
    asked = f"#{anchor}" if hash_ else " ".join(words or ())
    if hash_ and words:
        raise InvalidInput(f"give a section by its anchor ({topic}) or by words, not both")
    if not asked.strip():
        typer.echo(text, nl=False)
        return
    chosen = choose(sections(text), asked, doc.name)
    typer.echo("\n".join(s.text for s in chosen), nl=False)
