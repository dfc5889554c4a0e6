"""What the API answers besides the store's own values: models for the OpenAPI schema and
for the remote client, which reads the answers with them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.outcomes import Outcome
from tickwork.fsm.values import EventKind, Head, Status


class Listed(Head):
    """A session's head in a list, with what a finished repair achieved."""

    outcome: Outcome | None = Field(
        default=None,
        description="A completed repair's outcome (`tests_not_run` also for a repair that "
        "failed ENV_SETUP); null for other kinds, unfinished sessions and sessions stored "
        "before outcomes were recorded.",
    )


class ListedArchived(BaseModel):
    """A session retention archived, as `GET /sessions?archived=true` lists it (its row of
    the archive's index: `tickwork ls --archived`)."""

    id: str = Field(description="The session id; its page serves its patch and its forks.")
    status: str = Field(description="Its status when it was archived.")
    kind: str = Field(description="Its job kind.")
    tenant: str = Field(description="Its tenant.")
    parent_id: str | None = Field(description="The session it was forked (or spawned) from.")
    fork_step: int | None = Field(description="The parent's step it was forked from.")
    submitted_by: str | None = Field(
        default=None,
        description="Who submitted (or forked) it; null for one archived before the "
        "archive's index kept it.",
    )
    created_at: datetime = Field(description="When it was submitted.")
    finished_at: datetime = Field(description="When it finished.")
    archived_at: datetime | None = Field(description="When retention archived it.")


class ForkedFrom(BaseModel):
    """What a fork was made from, and the patch it applied (its `forked` event)."""

    session_id: str = Field(description="The session it was forked from.")
    step: int = Field(description="It kept that session's steps 1..step (0: none).")
    by: str | None = Field(description="Who forked it.")
    at: datetime = Field(description="When it was forked.")
    patch: ForkPatch = Field(
        description="What the fork changed; only the fields it set (an empty object: "
        "nothing but the step it starts from)."
    )


class EarlierPatch(BaseModel):
    """A fork a fork of a fork descends from, with its patch (`forked_from` holds the
    session's own patch only; it runs under every patch of its chain)."""

    fork: str = Field(description="The earlier fork's session id.")
    session_id: str | None = Field(
        default=None, description="The session that fork was forked from."
    )
    step: int | None = Field(
        default=None, description="It kept that session's steps 1..step (0: none)."
    )
    by: str | None = Field(default=None, description="Who forked it.")
    at: datetime | None = Field(default=None, description="When it was forked.")
    patch: ForkPatch | None = Field(
        default=None, description="What that fork changed; only the fields it set."
    )
    unread: bool = Field(
        default=False,
        description="true: that fork was not read (archived, or more than 50 forks back): "
        "the chain ends there and its other fields are left out (an archived session that was "
        "no fork, or one the caller may not see, ends it with no entry); `tickwork show FORK` "
        "where the database is shows its patch (read back from the archive).",
    )


class SessionView(BaseModel):
    """A session as a timeline: the JSON of `tickwork show --json`."""

    model_config = ConfigDict(extra="allow")

    head: Listed
    steps: list[dict[str, Any]] = Field(
        description="Each step with its calls, their observations and decisions."
    )
    totals: dict[str, Any] = Field(description="Steps, calls, tokens, cost and latency.")
    events: list[dict[str, Any]] = Field(
        description="What happened, in order; each event's `id` is null here: "
        "GET /api/v1/sessions/{id}/events pages them with their ids, which `after` and the "
        "stream's Last-Event-ID take."
    )
    forked_from: ForkedFrom | None = Field(
        description="A fork's parent, step and patch; null for a session that is not a fork."
    )
    refused: list[dict[str, Any]] = Field(
        default=[],
        description="The workers that took its tick and could not run it (its job kind or "
        "graph version is not theirs, or they do not see its files): `worker` (a Celery node "
        "name), `at`, `reason`; empty unless it waits for "
        "a worker at the version they refused.",
    )
    lease: dict[str, Any] | None = Field(
        default=None, description="Who holds its lease, until when, and whether it expired."
    )
    forks: list[dict[str, Any]] = Field(default=[], description="The forks made of it.")
    tree: dict[str, Any] | None = Field(
        default=None, description="The session tree it belongs to, from its root."
    )
    earlier_patches: list[EarlierPatch] = Field(
        default=[],
        description="A fork of a fork: the forks before it, oldest first, each with what it "
        "was forked from and its patch (`forked_from` is its own); empty for a session "
        "that is not a fork of a fork. The system prompt, budgets and model of each hold "
        "unless a later fork changed them again; an appended instruction and hand-written "
        "tool outputs only where a later fork kept the step they came at.",
    )


class Identity(BaseModel):
    """Who a token belongs to (`GET /api/v1/me`)."""

    name: str = Field(description="Recorded as submitter, approver, forker.")
    roles: list[str] = Field(description="submitter, approver, operator, admin; sorted.")
    tenant: str = Field(description="The tenant the token sees and submits into.")
    own_only: bool = Field(description="true: only the sessions it submitted, and their forks.")


class EventView(BaseModel):
    """One of a session's events."""

    model_config = ConfigDict(extra="allow")

    id: int = Field(description="The store's event id: give it as `after` (or Last-Event-ID).")
    kind: EventKind
    at: datetime
    data: dict[str, Any] = Field(description="What the event says; its fields depend on `kind`.")


class EventPage(BaseModel):
    """A page of a session's events after an event id."""

    status: Status = Field(description="The session's status when the page was read.")
    events: list[EventView] = Field(description="Oldest first, at most `limit`.")
    last_id: int = Field(
        description="The last event's id (`after` when the page is empty): ask for the "
        "next page with after=last_id."
    )


class LetterView(BaseModel):
    """A dead letter: a failed session's cause, and how it was closed."""

    model_config = ConfigDict(extra="allow")

    id: int
    session_id: str
    code: str = Field(description="BUDGET_STEPS, LOOP, MODEL_ERROR, ... (the error code).")
    message: str
    kind: str
    model: str
    last_tool: str | None
    error_signature: str = Field(description="The message with its particulars taken out.")
    at: datetime = Field(description="When it was dead-lettered.")
    schema_version: int
    tenant: str
    submitted_by: str
    status: str = Field(description="open, forked, resolved or dismissed.")
    resolved_at: datetime | None
    resolution: dict[str, Any] | None = Field(description="Who closed it, how and why.")
    closed: str | None = Field(description="How it was closed, in words; null while open.")
