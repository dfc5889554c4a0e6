"""`Store.retention`: what retention, `tickwork gc` and reading archived sessions ask of
the database (`retention.py` archives and prunes, `archived.py` reads the index)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from tickwork.fsm.values import Session
from tickwork.store import archive as archives
from tickwork.store import archived, retention
from tickwork.store.artifacts import Artifacts
from tickwork.store.edge import guarded


@guarded
class Retention:
    """The archive index and the archive-then-prune passes of one store."""

    def __init__(self, engine: Engine, load: Callable[[str], Session]) -> None:
        self.engine, self._load = engine, load

    def archive_pass(
        self,
        archive: archives.Archive,
        policy: retention.Policy,
        *,
        now: datetime,
        max_batches: int | None = None,
        after_write: Callable[[retention.Batch], None] | None = None,
        artifacts: Artifacts | None = None,
        clock: Callable[[], datetime] | None = None,
        **kwargs: Any,
    ) -> retention.Report:
        """Archive and prune up to `max_batches` batches (`retention.archive_pass`)."""
        return retention.archive_pass(
            self.engine,
            self._load,
            archive,
            policy,
            now=now,
            max_batches=max_batches,
            after_write=after_write,
            artifacts=artifacts,
            clock=clock,
            **kwargs,
        )

    def eligible(self, policy: retention.Policy, *, now: datetime) -> dict[str, int]:
        """How many sessions of each status a pass would archive now; reads only."""
        return retention.eligible(self.engine, policy, now=now)

    def live_and_archived(self) -> dict[str, int]:
        """How many sessions are live, pending and archived."""
        return retention.live_and_archived(self.engine)

    def entry(self, session_id: str) -> archived.Entry | None:
        """Where an archived session is; None if it is not archived."""
        return archived.entry(self.engine, session_id)

    def ids_starting(self, prefix: str, *, limit: int, tenant: str | None = None) -> list[str]:
        """The ids of the archived sessions (of `tenant`, if given) that start with
        `prefix`, in id order."""
        return archived.archived_ids_starting(self.engine, prefix, limit=limit, tenant=tenant)

    def load(self, archive: archives.Archive, session_id: str) -> archived.ArchivedSession | None:
        """An archived session read back from its batch; None if it is not archived."""
        return archived.load_archived(self.engine, archive, session_id)

    def listing(
        self,
        *,
        status: Sequence[str] = (),
        kind: str | None = None,
        limit: int = 50,
        offset: int = 0,
        tenant: str | None = None,
        submitted_by: str | None = None,
    ) -> list[archived.Entry]:
        """Archived sessions, the latest archived first, from the index (`ls --archived`);
        only `tenant`'s if given, and `submitted_by`'s."""
        return archived.list_archived(
            self.engine,
            status=status,
            kind=kind,
            limit=limit,
            offset=offset,
            tenant=tenant,
            submitted_by=submitted_by,
        )

    def forks(self, parent_id: str) -> list[dict[str, Any]]:
        """The archived sessions forked from `parent_id`."""
        return archived.archived_forks(self.engine, parent_id)

    def since(self, since: datetime) -> list[str]:
        """The sessions archived at or after `since`."""
        return archived.archived_since(self.engine, since)
