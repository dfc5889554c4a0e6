"""A session's forks, live or archived, for a live session or an archived one: what `tickwork
show` lists, and the one listing of an archived session's (the session listing holds live
sessions only, and an archived session's view is not served)."""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from tickwork import views
from tickwork.fsm.errors import SessionArchived

from .auth import Reader
from .errors import documented
from .sessions import FOUND, Client, SessionId
from .tenancy import seen_forks, seen_head

router = APIRouter(prefix="/api/v1", tags=["sessions"], responses=documented(401, 403, 422, 503))


class ListedFork(BaseModel):
    """A fork of a session, as `GET /sessions/{id}/forks` lists it."""

    id: str = Field(description="The fork's session id.")
    fork_step: int = Field(description="The step of its parent it was forked from.")
    status: str = Field(description="Its status (an archived fork's, when it was archived).")
    created_at: str = Field(description="When it was forked (RFC 3339).")
    archived: bool = Field(
        description="true: retention archived it; its view is not served, its patch and forks are."
    )


@router.get(
    "/sessions/{session_id}/forks",
    response_model=list[ListedFork],
    summary="The sessions forked from this one, live or archived, oldest first (of a live "
    "session or an archived one)",
    responses=FOUND,
)
def forks(session_id: SessionId, client: Client, who: Reader) -> list[dict[str, Any]]:
    # an archived one `who` sees is told from the archive's index: the archive is not read
    with contextlib.suppress(SessionArchived):
        seen_head(client, who, session_id, archived=False)
    return views.forks(seen_forks(client, who, client.forks(session_id)), archived=True)
