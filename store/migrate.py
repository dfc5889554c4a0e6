"""Alembic migrations, run from code: `tickwork db upgrade|current|history|downgrade` and the
tests call these."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from tickwork.fsm.errors import InvalidInput
from tickwork.store.edge import translating
from tickwork.store.engine import make_engine, normalize_url
from tickwork.store.urls import shown

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database to `revision`; StoreUnavailable if it does not answer."""
    with translating(shown(url)):
        command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate the database down to `revision`; InvalidInput for a revision the code does
    not know, StoreUnavailable if the database does not answer."""
    with translating(shown(url)):
        try:
            command.downgrade(alembic_config(url), revision)
        except CommandError as exc:
            raise InvalidInput(
                f"cannot downgrade to {revision!r}: {exc}; `tickwork db history` lists the "
                "revisions"
            ) from None


@dataclass(frozen=True)
class Revision:
    """One migration, as `tickwork db history` lists it."""

    id: str
    #: the revision(s) it follows; empty for the first
    follows: tuple[str, ...]
    #: the first line of its docstring
    doc: str
    is_head: bool


def current(url: str) -> str | None:
    """The schema revision the database is at; None if it has no tickwork schema."""
    engine = make_engine(url)
    try:
        with translating(shown(url)), engine.connect() as connection:
            heads = MigrationContext.configure(connection).get_current_heads()
    finally:
        engine.dispose()
    return ",".join(heads) if heads else None


def history(url: str) -> list[Revision]:
    """Every revision the code knows, newest first."""
    scripts = ScriptDirectory.from_config(alembic_config(url))
    found = []
    for script in scripts.walk_revisions():
        down = script.down_revision
        follows = (down,) if isinstance(down, str) else tuple(down or ())
        doc = (script.doc or "").strip().splitlines()
        found.append(Revision(script.revision, follows, doc[0] if doc else "", script.is_head))
    return found


def behind(url: str, at: str) -> bool:
    """Whether revision `at` (the database's) is one this code knows, below its newest: the
    database needs `upgrade`. A revision the code does not know is a newer release's."""
    scripts = ScriptDirectory.from_config(alembic_config(url))
    known = {script.revision for script in scripts.walk_revisions()}
    return set(at.split(",")) <= known and at != head(url)


def head(url: str) -> str:
    """The newest revision the code knows: what `upgrade` brings a database to."""
    return ",".join(ScriptDirectory.from_config(alembic_config(url)).get_heads())
