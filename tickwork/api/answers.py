"""What the API answers besides the store's own values: models for the OpenAPI schema and
for the remote client, which reads the answers with them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tickwork.fsm.forks import ForkPatch
from tickwork.fsm.outcomes import Outcome
from tickwork.fsm.values import CallState, DecisionKind, EventKind, Head, Status


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


class Preview(BaseModel):
    """What a waiting call would change when it runs, for the person deciding."""

    type: Literal["diff"] = Field(description="`diff`: a unified diff.")
    path: str | None = Field(
        description="The file the call writes; null for a patch (`apply_patch`, `adopt_patch`)."
    )
    note: str = Field(
        description="What the diff is against (`new file`, the session's current file, why "
        "it was not diffed), and who edited the arguments where a person did."
    )
    diff: str = Field(description="The unified diff.")


class CallObservation(BaseModel):
    """What a call's run gave back (the tool's output, or a rejection's feedback)."""

    content: str
    is_error: bool
    at: datetime
    duration_ms: float


class CallDecision(BaseModel):
    """A person's decision on a call (its latest)."""

    kind: DecisionKind
    attempt: int = Field(
        description="0 for the decision the call waited for; 1, 2, ... for "
        "an in-doubt call decided again."
    )
    approver: str = Field(description="Who decided.")
    at: datetime
    fingerprint: str = Field(description="The fingerprint of the call the person saw.")
    comment: str
    arguments: dict[str, Any] | None = Field(
        description="The arguments it runs with where a person gave them (an edit)."
    )
    feedback: str = Field(description="A rejection's feedback to the model.")
    output: str = Field(description="A `provide_output`'s output.")


class WaitingCall(BaseModel):
    """A call waiting for a person, as the approvals answer it."""

    model_config = ConfigDict(extra="allow")

    call_id: str = Field(
        description="The call's id (`s3c0`: step 3's first call), as a decision's path names it."
    )
    step: int
    index: int
    name: str = Field(description="The tool it calls.")
    arguments: dict[str, Any] | None = Field(
        description="The arguments the model proposed; null when its text did not parse as a "
        "JSON object (`raw_arguments`)."
    )
    raw_arguments: str
    fingerprint: str = Field(
        description="Send it as a decision's `fingerprint`: a decision on other arguments "
        "than those seen is refused (409 `stale_decision`)."
    )
    state: CallState = Field(
        description="`awaiting_approval`: approve, edit or reject it; `in_doubt`: its run was "
        "interrupted (approve runs it again, or `provide_output`)."
    )
    needs_approval: bool
    approval_reason: str | None = Field(description="Why the approval rules asked a person.")
    provider_call_id: str | None
    blocked: bool
    observation: CallObservation | None = Field(description="Null until it has run.")
    decision: CallDecision | None = Field(description="Its latest decision; null before one.")
    as_edited: str | None = Field(
        description="Who gave the arguments it runs with (`as edited by bob`; its "
        "`decision.arguments`), null where it runs as the model proposed it."
    )
    preview: Preview | None = Field(
        description="The diff it would make; null for a call that writes no file, or with "
        "`preview=false`."
    )


class Job(BaseModel):
    """What a repair job works on."""

    source: str = Field(description="Its repository or workspace, in words.")
    goal: str
    test_command: str


class Waiting(BaseModel):
    """A session waiting for a person, with its waiting calls (`GET /approvals`,
    `GET /approvals/{id}`)."""

    session: Listed = Field(description="The session's head.")
    root: str | None = Field(description="A child session's tree root; null for a root.")
    job: Job | None = Field(
        description="A repair's source, goal and test command; null for other kinds."
    )
    thought: str = Field(description="The model's text in the step that proposed the calls.")
    calls: list[WaitingCall] = Field(
        description="The calls waiting for a person, in order (empty once none waits)."
    )
    waiting_since: datetime | None = Field(
        description="When it asked for a person; null once it waits for nobody."
    )


class ShownFork(BaseModel):
    """A fork of a dead letter's session, as `GET /dead-letters/{key}` lists it."""

    id: str = Field(description="The fork's session id.")
    fork_step: int = Field(description="The step of the session it was forked from.")
    status: str = Field(description="Its status (an archived fork's, when it was archived).")
    created_at: datetime = Field(description="When it was forked.")


class LetterShown(LetterView):
    """A dead letter with its session, the budgets a fork is proposed and its forks."""

    session: SessionView = Field(
        description="Its session as a timeline, as it was dead-lettered (the fields of "
        "`GET /sessions/{id}` but the live session's forks, lease and tree)."
    )
    fork_budgets: dict[str, float] = Field(
        description="The budgets a fork is proposed (the page's fork form): a spent budget "
        "raised, and each other the kept steps used more than half of; empty once closed."
    )
    forks: list[ShownFork] = Field(description="Its session's forks, oldest first.")
    earlier_patches: list[EarlierPatch] = Field(
        description="A fork of a fork: the forks before it, oldest first, each with its patch."
    )


class LetterGroup(BaseModel):
    """The dead letters of one value of a grouping."""

    value: str | None = Field(
        description="The code, kind, model, last tool or error signature; null for those "
        "without one (no last tool)."
    )
    count: int
    latest: datetime = Field(description="When the newest of them was dead-lettered.")


class LetterStats(BaseModel):
    """Dead letters counted by code, kind, model, last tool and error signature."""

    since: datetime | None = Field(description="The `since` asked for; null: all of them.")
    total: int
    by: dict[str, list[LetterGroup]] = Field(
        description="Each grouping asked for (`by`, else code, kind, model, last_tool and "
        "error_signature), largest first."
    )


class CodeCounts(BaseModel):
    """One error code's dead letters per bucket."""

    code: str
    counts: list[int] = Field(description="One count per bucket, in the buckets' order.")
    total: int


class LetterTimeline(BaseModel):
    """Dead letters per UTC day or hour, by code (the page's chart)."""

    bucket: Literal["day", "hour"]
    buckets: list[datetime] = Field(description="Every bucket's start, oldest first.")
    codes: list[CodeCounts] = Field(description="Most dead letters first.")
    total: int
    since: datetime = Field(description="Where the first bucket starts from.")
