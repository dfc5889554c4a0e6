"""What a caller may see: its tenant's sessions (only its own with an `own_only` token), or
every tenant's with the `admin` role.

Anything else answers exactly as if it did not exist (404, the same message), so a session
or dead-letter id of another tenant cannot be told from one nobody made.
"""

from __future__ import annotations

from typing import Any

from tickwork.client import Tickwork
from tickwork.fsm.errors import ArtifactsUnavailable, SessionArchived, SessionNotFound
from tickwork.fsm.values import Head
from tickwork.store import dead_letters as dl
from tickwork.store.archive import ArchiveMissing

from .auth import Principal
from .errors import ApiError


def seen_head(client: Tickwork, who: Principal, session_id: str, *, archived: bool = True) -> Head:
    """The session's head (live, or archived unless `archived` is False) if `who` may see
    it; else SessionNotFound, and SessionArchived for an archived session `who` sees that
    is not read back (`archived` False: the route serves live sessions only)."""
    try:
        head = client.get(session_id)
    except SessionNotFound:
        if not archived:
            if _archived_seen(client, who, session_id):
                raise SessionArchived.of(session_id) from None
            # the client says an id is an archived session's: one `who` may not see is none
            raise SessionNotFound.of(session_id) from None
        found = client.archived(session_id)
        if found is None:
            raise SessionNotFound.of(session_id) from None
        head = found.session.head
    if not who.sees(head.tenant, head.submitted_by):
        raise SessionNotFound.of(session_id)
    return head


def _archived_seen(client: Tickwork, who: Principal, session_id: str) -> bool:
    """Whether `session_id` is an archived session `who` may see, from the archive's index;
    read back from the archive only for an own-only token and a session archived before the
    index kept its submitter (False if it cannot be read)."""
    entry = client.store.retention.entry(session_id)
    if entry is None:
        return False
    if entry.submitted_by is None and who.own_only and not who.admin:
        return _made_by(client, who, session_id)
    return who.sees(entry.tenant, entry.submitted_by or "")


def seen_letter(who: Principal, letter: dl.DeadLetter, key: str) -> dl.DeadLetter:
    """The dead letter if `who` may see its session; else DeadLetterNotFound."""
    if not who.sees(letter.tenant, letter.submitted_by):
        raise dl.DeadLetterNotFound.of(key)
    return letter


def session_filters(who: Principal, submitted_by: str | None = None) -> dict[str, Any] | None:
    """A listing's filters for `who` (tenant, and submitter for an own-only token); None if
    the listing asked for another submitter than an own-only token's (nothing to list)."""
    if who.own_only and not who.admin:
        if submitted_by and submitted_by != who.name:
            return None
        submitted_by = who.name
    return {"tenant": who.scope, "submitted_by": submitted_by}


def check_named_tenant(who: Principal, tenant: str | None, what: str) -> None:
    """A listing's `tenant` filter: an admin's to name any; another token may name only its
    own (naming another is refused, as a submit into it is, whether that tenant exists or
    not: an empty answer would read as "that tenant has none")."""
    if tenant and not who.admin and tenant != who.tenant:
        raise ApiError(
            403,
            "forbidden",
            f"{who.name} reads tenant {who.tenant}'s {what} only; leave `tenant` out "
            "(naming another tenant takes the admin role)",
        )


def letter_filters(who: Principal, tenant: str | None = None) -> dict[str, Any]:
    """The dead-letter filters for `who`: its tenant's, only its own for an own-only token;
    `tenant` narrows an admin's to one tenant (`check_named_tenant`)."""
    check_named_tenant(who, tenant, "dead letters")
    own = who.own_only and not who.admin
    scope = tenant if who.admin and tenant else who.scope
    return {"tenant": scope, "submitted_by": who.name if own else None}


def submit_tenant(who: Principal, asked: str | None) -> str:
    """The tenant a submit goes into: the token's, or for an admin the one it names."""
    if asked is None or asked == who.tenant:
        return who.tenant
    if not who.admin:
        raise ApiError(
            403,
            "forbidden",
            f"{who.name} submits into tenant {who.tenant} only; leave `tenant` out (naming "
            "another tenant takes the admin role)",
        )
    return asked


def seen_forks(client: Tickwork, who: Principal, forks: list[dict[str, Any]]) -> list[Any]:
    """The forks `who` may see: a fork is in its parent's tenant, so an own-only token's
    are those it made, known from the fork's row or the archive's index. Only a fork
    archived before the index kept its submitter is read back from the archive, and left
    out if it cannot be."""
    kept = []
    for fork in forks:
        by = fork.get("submitted_by")
        if (
            who.admin
            or not who.own_only
            or by == who.name
            or (by is None and _made_by(client, who, str(fork["id"])))
        ):
            kept.append(fork)
    return kept


def _made_by(client: Tickwork, who: Principal, fork_id: str) -> bool:
    """Whether `who` may see the fork, read back from the archive; False if it cannot be
    read, gone or not answering (the listing is not refused for an archive it does not
    need to show, nor a live-only route's 404 made the archive's fault)."""
    try:
        seen_head(client, who, fork_id)
    except (SessionNotFound, ArchiveMissing, ArtifactsUnavailable):
        return False
    return True
