"""The client's read facade: sessions, their files and patches, forks and dead letters, live
or read back from the archive. Reading imports no Celery; `tickwork` commands that only read
use it alone (`Context.reads`)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tickwork.fsm.errors import (
    InvalidInput,
    NoPatch,
    SessionArchived,
    SessionFinished,
    SessionNotFound,
)
from tickwork.fsm.values import Head, Session, Status
from tickwork.store import dead_letters as dl
from tickwork.store.archived import saved_of
from tickwork.worker.files.workspaces import session_files
from tickwork.worker.tools.registry import ChildResult, child_results

from . import views
from .bundles import write_bundle
from .deployment import Deployment
from .events import EventPage, Streamed
from .parsing import (
    MIN_ID_PREFIX,
    NO_START,
    SHOWN_CANDIDATES,
    TOO_SHORT,
    ended_otherwise,
    one_id,
    statuses,
    still,
)
from .patches import patch_text, unchanged

#: how many of a session's first events hold its `forked` event if it is a fork: the store
#: writes `created`, then the events the new session came with (`fsm.forks.fork`: `forked`)
FORKED_AT = 2


class Reads(Deployment):
    """What a deployment tells about its sessions; nothing here changes one."""

    def get(self, session_id: str) -> Head:
        """The session's head; SessionNotFound if no live session has the id, a
        `SessionArchived` saying how to read it back for one retention archived."""
        try:
            return self.store.get(session_id)
        except SessionNotFound as exc:
            raise self._not_live(session_id, exc) from None

    def session_id(self, given: str, *, tenant: str | None = None) -> str:
        """The id of the session `given` names: its own id (a live or an archived
        session's), else the start of exactly one id, of MIN_ID_PREFIX characters or more;
        with `tenant`, among that tenant's sessions only (no other tenant's id is said).
        SessionNotFound if none does; InvalidInput, listing a few, if more than one does."""
        try:
            head = self.store.get(given)
        except SessionNotFound:
            entry = self.store.retention.entry(given)
            if entry is not None and tenant in (None, entry.tenant):
                return given
        else:
            if tenant in (None, head.tenant):
                return head.id
        if len(given) < MIN_ID_PREFIX:
            raise SessionNotFound.of(given, hint=TOO_SHORT)
        more = SHOWN_CANDIDATES + 1
        found = sorted(
            {
                *self.store.ids_starting(given, limit=more, tenant=tenant),
                *self.store.retention.ids_starting(given, limit=more, tenant=tenant),
            }
        )
        return one_id(given, found, none=SessionNotFound.of(given, hint=NO_START))

    def load(self, session_id: str) -> Session:
        """The whole session; SessionNotFound as `get` raises it."""
        try:
            return self.store.load(session_id)
        except SessionNotFound as exc:
            raise self._not_live(session_id, exc) from None

    def _not_live(self, session_id: str, missing: SessionNotFound) -> SessionNotFound:
        """What `get` and `load` raise for an id no live session has: `missing` (no session
        has it), or for one retention archived a `SessionArchived` (a SessionNotFound too)
        naming what reads it back, as the API's 404 says `archived` and the CLI's `show`
        reads it."""
        if self.store.retention.entry(session_id) is None:
            return missing
        return SessionArchived(
            f"session {session_id!r} is archived (retention moved it out of the live "
            f"tables): read it back with `archived({session_id!r})` (`tickwork show "
            f"{session_id}`); `patch`, `forks` and `fork` read it too, and "
            "`archived_sessions()` lists the archived ones (`tickwork ls --archived`)",
            session_id=session_id,
        )

    def sessions(self, **filters: Any) -> list[Head]:
        """Sessions newest first (`waited_longest_first=True`: those whose last wait for a
        person began first), filtered by status, kind, error_code, outcome, submitted_by,
        parent_id, tenant, id_prefix (the start of their ids); paged by limit, offset."""
        return self.store.list_sessions(**filters)

    def archived_sessions(self, **filters: Any) -> list[dict[str, Any]]:
        """The sessions retention archived, the latest archived first, from the archive's
        index (no archive is read: `tickwork ls --archived`), filtered by status, kind,
        tenant, submitted_by; paged by limit, offset. Each is `views.archived_entry`."""
        return [views.archived_entry(e) for e in self.store.retention.listing(**filters)]

    def wait(
        self,
        session_id: str,
        *,
        until: Iterable[Status | str] | str = (),
        timeout: float = 60.0,
        poll: float = 0.05,
    ) -> Head:
        """The session once its status is one of `until` (as the remote client's `wait`
        takes it) [default: once it is suspended or finished]; SessionFinished at once for
        one finished in another status, TimeoutError after `timeout`."""
        wanted = set(statuses(until, what="until"))
        deadline = time.monotonic() + timeout
        while True:
            head = self.store.get(session_id)
            if head.status in wanted or (not wanted and not head.status.moving):
                return head
            if head.status.terminal:
                raise SessionFinished(ended_otherwise(session_id, head.status, wanted))
            if time.monotonic() > deadline:
                raise TimeoutError(
                    still(
                        session_id, head.status, wanted, timeout, by_default="suspended or finished"
                    )
                )
            time.sleep(poll)

    def tree(
        self, session_id: str, *, sees: Callable[[Head], bool] | None = None
    ) -> dict[str, Any] | None:
        """The tree the session belongs to, drawn from its root (`views.tree`); None for a
        session that neither spawned children nor is one. `sees`: the sessions the caller
        may see (the API's tenant and own-only check); one it may not is left out with all
        under it, and a root it may not see draws no tree. Children inherit their parent's
        tenant and submitter, so this only bites on rows written around the runtime."""
        head = self.store.get(session_id)
        root = self.store.get(head.root_id) if head.root_id else head
        below = self.store.tree(root.id)
        if sees is not None:
            if not sees(root):
                return None
            below = [h for h in below if sees(h)]
        if not below:
            return None
        return views.tree(root, below)

    def timeline(self, session_id: str) -> dict[str, Any]:
        """A live session as a timeline: the document `tickwork show --json` prints and the
        API serves at `GET /sessions/{id}` (`views.shown`: head, steps with calls,
        observations and decisions, totals, events; with who holds its `lease`, its
        `forks`, the `tree` it belongs to and a fork of a fork's `earlier_patches`). An
        archived session is SessionArchived (a SessionNotFound), as the API's;
        `archived(session_id)` reads one back."""
        whole = Reads.load(self, session_id)
        return views.shown(
            whole,
            lease=views.lease(self.store.lease(session_id), now=datetime.now(UTC)),
            found_forks=self.forks(session_id),
            earlier=self.earlier_patches(whole),
            tree=self.tree(session_id),
        )

    def events(self, session_id: str, *, after: int = 0, limit: int = 1000) -> EventPage:
        """A page of a live session's events after event id `after` (at most `limit`), with
        its status when read: the API's `GET /sessions/{id}/events`, as the same
        `EventPage` the remote client's `events` gives. `last_id` is the last event's id,
        or `after` when there is none; pass it as `after` for the next page. An archived
        session is SessionArchived, as for `timeline`."""
        for name, value, least in (("after", after, 0), ("limit", limit, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidInput(
                    f"`{name}` must be a whole number of {least} or more, got {value!r}"
                )
        status = Reads.get(self, session_id).status  # read first: no event is newer than it
        found = self.store.events_after(session_id, after, limit)
        frames = tuple(Streamed(i, e.kind.value, views.event(i, e)) for i, e in found)
        return EventPage(status, frames, found[-1][0] if found else after)

    def waiting(self, session_id: str) -> dict[str, Any]:
        """A live session's calls waiting for a person, each with a preview of what it
        would change (a file write's diff, an `adopt_patch`'s child patch): the approvals
        page's card, `GET /approvals/{id}` (`views.waiting_view`: `session`, `root`, `job`,
        `thought`, `calls`, `waiting_since`). A session waiting for nobody has no `calls`
        and `waiting_since` None; an archived session is SessionArchived, as for
        `timeline`."""
        return views.waiting_view(Reads.load(self, session_id), self)

    def children(self, head: Head) -> list[ChildResult]:
        """The session's children as its tools see them (what `adopt_patch` would take),
        numbered as the tools number them; none outside its tenant (only rows written
        around the runtime could be)."""
        found = self.store.children(head.id)
        return [
            result
            for result, child in zip(child_results(found), found, strict=True)
            if child.tenant == head.tenant
        ]

    def forks(self, session_id: str) -> list[dict[str, Any]]:
        """The sessions forked from this one, live or archived, oldest first, each saying
        which (`archived`). The live ones are read first: archiving moves a fork from the
        live tables to the index in one transaction, so one archived between the two reads
        is in the second (listed once, as archived), never in neither."""
        found = {f["id"]: {**f, "archived": False} for f in self.store.forks(session_id)}
        found.update(
            (f["id"], {**f, "archived": True}) for f in self.store.retention.forks(session_id)
        )
        return sorted(found.values(), key=lambda f: (f["created_at"], f["id"]))

    def earlier_patches(
        self,
        session: Session,
        *,
        most: int = 50,
        sees: Callable[[str, str | None], bool] | None = None,
    ) -> list[dict[str, Any]]:
        """The forks `session` (itself a fork) descends from, fork by fork, oldest first,
        each its id (`fork`) and what it was forked from with its patch
        (`views.forked_from`): the config a fork of a fork runs under holds them all, its
        own patch only the last. An archived fork (or one more than `most` back) ends the
        chain, saying where to look (`unread`); an archived session that was no fork ends
        it with nothing. `sees`: the sessions the caller may see, by tenant and submitter
        (the API's tenant and own-only check); the chain ends before one it may not. Each
        ancestor costs two small reads (its head, its first events: a fork's second is
        its `forked` one, after `created`), not a load of its whole transcript: the API's
        session view gives the chain every time the page refreshes."""
        chain: list[dict[str, Any]] = []
        origin = views.forked_from(session)
        while origin is not None and origin["session_id"]:
            parent_id = origin["session_id"]
            if len(chain) == most:
                chain.append({"fork": parent_id, "unread": True})
                break
            try:
                head = self.store.get(parent_id)
            except SessionNotFound:
                entry = self.store.retention.entry(parent_id)
                forked = entry is not None and entry.parent_id and entry.spawn_call is None
                if forked and (sees is None or sees(entry.tenant, entry.submitted_by)):
                    chain.append({"fork": parent_id, "unread": True})
                break
            if sees is not None and not sees(head.tenant, head.submitted_by):
                break
            first = self.store.events_after(parent_id, 0, FORKED_AT)
            origin = views.fork_origin(e for _, e in first)
            if origin is not None:
                chain.append({"fork": parent_id, **origin})
        return chain[::-1]

    def patch(self, session_id: str, *, required: bool = False) -> str:
        """The patch from the session's source to its files as stored now (its result's
        patch once it has finished; an archived session's from the archive): "" if it
        changed nothing, or with `required` `NoPatch` saying why; `NoPatch` for a session
        without files (another job kind)."""
        try:
            head, saved = self.store.get(session_id), None
        except SessionNotFound:
            found = self.archived(session_id)
            if found is None:
                raise
            head, saved = found.session.head, saved_of(found.record)
        text = patch_text(head, self.files, saved)
        if not text and required:
            raise NoPatch(f"session {session_id} has no patch: {unchanged(head)}")
        return text

    def bundle(self, session_id: str, dest: Path) -> str:
        """A git bundle at `dest` holding the branch `tickwork/<session_id>`: the source's
        commit plus one commit with the session's files. Returns the branch name."""
        return write_bundle(self.store.get(session_id), self.files, dest)

    def read_file(self, session_id: str, path: str) -> bytes | None:
        """One file of the session as stored now; None if it has none there."""
        read = self.file_reader(self.store.get(session_id))
        return None if read is None else read(path)

    def file_reader(self, head: Head) -> Callable[[str], bytes | None] | None:
        """Reads one file of the session as it is now (None: no such file), for previews;
        None if the session has no files. A legacy session's are in its project folder."""
        from tickwork.worker.jobs.repair import legacy

        if session_files(head) is not None:
            return functools.partial(self.files.read, head)
        if legacy.is_legacy(head):
            return functools.partial(legacy.read_file, head)
        return None

    def dead_letters(self, **filters: Any) -> list[dl.DeadLetter]:
        return self.store.dead_letters(**filters)

    def dead_letter(self, key: int | str) -> dl.DeadLetter:
        return self.store.dead_letter(key)

    def find_dead_letter(self, key: str) -> dl.DeadLetter:
        """A dead letter as the CLI names one: by its number (`#12` by it only; `12` is
        number 12 or session 12's, refused when the two are different letters:
        `dead_letters.by_key`), else by its session's id (or a unique start of one,
        `session_id`, unless `key` is digits only: a mistyped letter number must not name
        the letter of a session whose id starts with those digits)."""

        def found(lookup: int | str) -> dl.DeadLetter | None:
            try:
                return self.store.dead_letter(lookup)
            except dl.DeadLetterNotFound:
                return None

        letter = dl.by_key(key, numbered=found, of_session=found)
        if letter is not None:
            return letter
        listing = dl.DeadLetterNotFound.listing
        if key.startswith("#"):
            raise dl.DeadLetterNotFound(f"no dead letter has number {key[1:]}; {listing}")
        if key.isascii() and key.isdigit():
            raise dl.DeadLetterNotFound(
                f"no dead letter has id or session id {key!r} (digits only name a dead letter "
                f"or a whole session id, never the start of one); {listing}"
            )
        nobody = dl.DeadLetterNotFound(f"no dead letter has id or session id {key!r}; {listing}")
        try:
            session_id = self.session_id(key)
        except SessionNotFound:
            raise nobody from None
        try:
            return self.store.dead_letter(session_id)
        except dl.DeadLetterNotFound:
            raise self._none_for(session_id, nobody) from None

    def _none_for(self, session_id: str, nobody: dl.DeadLetterNotFound) -> dl.DeadLetterNotFound:
        """Why the session `session_id` has no live dead letter: it has not failed, or
        retention archived it (its dead letter with it); else `nobody`, as for an id nobody
        made."""
        try:
            status = self.store.get(session_id).status
        except SessionNotFound:
            archived = self.store.retention.entry(session_id) is not None
            return dl.DeadLetterNotFound.archived(session_id) if archived else nobody
        if status is not Status.FAILED:
            return dl.DeadLetterNotFound.not_failed(session_id, status.value)
        return nobody

    def dead_letter_stats(
        self,
        *,
        by: str = "code",
        since: datetime | None = None,
        tenant: str | None = None,
        submitted_by: str | None = None,
        unresolved: bool = False,
    ) -> list[dict[str, Any]]:
        return self.store.dead_letter_stats(
            by=by, since=since, tenant=tenant, submitted_by=submitted_by, unresolved=unresolved
        )
