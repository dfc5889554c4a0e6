"""The one error hierarchy of tickwork.

Every error's docstring is its default message; callers add the session, the
call and what to do next.
"""

from __future__ import annotations


class TickworkError(Exception):
    """Something went wrong in tickwork."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidInput(TickworkError, ValueError):
    """The input was not valid: fix it and try again."""


class SourceUnreachable(TickworkError):
    """A repair's repository could not be cloned: its host did not resolve or did not answer
    (no network, a proxy, a server down); the URL may be right, so try again once it
    answers."""


class UnknownKind(InvalidInput):
    """No job kind of that name: neither a built-in one nor one of TICKWORK_IMPORTS."""


class InvalidBudget(InvalidInput):
    """A budget was not a positive, finite number, or is one a fork's kept steps have used
    up already."""


class InvalidModelSpec(InvalidInput):
    """The model spec is not one tickwork can run: use openai:MODEL, anthropic:MODEL,
    react:openai:MODEL or scripted:PATH."""


class UnpricedModel(InvalidInput):
    """The model has no price, so a cost budget cannot limit it: give its price or turn the
    cost budget off."""


class QuotaExceeded(TickworkError):
    """A submit (or a fork) would take the tenant past one of its quotas; nothing was
    stored. The HTTP API answers 429 with Retry-After; wait, or ask an operator to raise
    the quota."""

    def __init__(
        self,
        message: str | None = None,
        *,
        tenant: str = "",
        quota: str = "",
        limit: float = 0,
        used: float = 0,
        retry_after_s: int = 60,
    ) -> None:
        super().__init__(message)
        #: the tenant, and the quota's name in the tenants file (e.g. `max_usd_per_day`)
        self.tenant, self.quota = tenant, quota
        #: the quota, and what the tenant uses of it now
        self.limit, self.used = limit, used
        #: when a submit may pass again, in seconds (a hint)
        self.retry_after_s = retry_after_s


#: how an API caller lists sessions, named in SessionNotFound's message
API_LISTING = "API: GET /api/v1/sessions"


class SessionNotFound(TickworkError, LookupError):
    """No session has that id: list sessions with `tickwork ls`."""

    #: how to list sessions from the command line
    listing = "list sessions with `tickwork ls`"

    def __init__(
        self, message: str | None = None, *, session_id: str | None = None, hint: str = ""
    ) -> None:
        super().__init__(message)
        #: the id asked for, when known: each surface says it with its own way to list
        self.session_id = session_id
        #: what follows the id in the message (how a start of an id was looked for)
        self.hint = hint

    @classmethod
    def of(cls, session_id: str, *, hint: str = "") -> SessionNotFound:
        """The error of a session id nobody made, with where to list them (the CLI's way,
        then the API's)."""
        return cls(
            f"{cls.said(session_id, hint)} ({API_LISTING})", session_id=session_id, hint=hint
        )

    @classmethod
    def said(cls, session_id: str, hint: str = "") -> str:
        """The message without the API's listing, for a surface that names its own."""
        return f"no session {session_id!r}{hint}; {cls.listing}"


class SessionArchived(SessionNotFound):
    """The session is archived (retention moved it out of the live tables): what serves live
    sessions only finds none, but its patch and forks are read back from the archive. The
    API answers it 404 `session_not_found` with `archived: true`."""

    @classmethod
    def of(cls, session_id: str, *, hint: str = "") -> SessionArchived:
        """The error of an archived session asked of a route that serves live sessions only,
        with what is served of it (the CLI's way, then the API's)."""
        routes = f"/api/v1/sessions/{session_id}"
        return cls(
            f"session {session_id!r} is archived: the server serves only its patch and forks "
            f"(`tickwork patch`, `tickwork fork`; API: GET {routes}/patch, GET {routes}/forks, "
            f"POST {routes}/fork)",
            session_id=session_id,
            hint=hint,
        )


class SessionExists(TickworkError):
    """A session has that id already (one space for every tenant): choose another id, or
    leave it out for a random one. Not bad input but an id in use: the API's 409."""


class CallNotFound(TickworkError, LookupError):
    """The session has no tool call with that id: see `tickwork show SESSION`."""


class NoDatabase(TickworkError, LookupError):
    """There is no tickwork database where the command looked; a command that only reads
    does not make one: submit a session first (`tickwork submit`, `tickwork demo`), or point
    TICKWORK_STATE_DIR or TICKWORK_DATABASE_URL at the database."""


class NotInstalled(TickworkError, LookupError):
    """A file tickwork ships beside its code (its docs, the operators' runbook) is missing
    from this install: reinstall tickwork from its wheel."""


class NoPatch(TickworkError, LookupError):
    """The session has no patch: it changed no files, or its job kind has none."""


class PatchDoesNotApply(TickworkError):
    """A session's patch cannot be applied to the folder given (`tickwork patch --apply`):
    its files differ from the session's source, or hold the patch already; nothing was
    changed. The command was right: what it asks cannot be done to that folder."""


class IllegalTransition(TickworkError):
    """The session is not in a state where that can happen."""


class SessionFinished(IllegalTransition):
    """The session has finished and can no longer change; fork it to go on."""


class NotWaiting(IllegalTransition):
    """The call is not waiting for a decision."""


class AlreadyDecided(IllegalTransition):
    """The call was already decided; each call is decided once."""


class StaleDecision(IllegalTransition):
    """The call's arguments are not the ones the approver saw; look at it again."""


class NotInDoubt(IllegalTransition):
    """An output was given for a call that waits for approval, not in doubt: only a call
    whose run was interrupted takes one, so approve, edit or reject it now."""


class InvalidDecision(InvalidInput):
    """The decision is not valid for this call."""


class ClaimLost(TickworkError):
    """The session moved on or its lease passed to another worker; this tick's work is dropped."""


class CancelledMeanwhile(TickworkError):
    """A save that would end the session completed found its cancel requested while the
    tick ran: nothing was saved and the lease is still the tick's, which saves its work
    again ending the session cancelled (`tickwork.fsm.transitions.cancelled_meanwhile`)."""


class TreeFull(TickworkError):
    """A spawn's children would take their tree past its most sessions, counted as the
    store inserts them (another spawn in the tree, a sibling's at the same moment, was
    saved since the tick counted): nothing was saved and the lease is still the tick's,
    which saves the message as the spawning call's error observation instead, or fails a
    graph session whose node fanned out, worded for it from the counts
    (`tickwork.fsm.trees.MAX_TREE_SESSIONS`)."""

    def __init__(
        self, message: str | None = None, *, held: int = 0, adding: int = 0, limit: int = 0
    ) -> None:
        super().__init__(message)
        #: the sessions the tree held, those the spawn would add, and the most it may hold
        self.held, self.adding, self.limit = held, adding, limit


class DeadLetterClosed(IllegalTransition):
    """The dead letter was already forked, resolved or dismissed; the message says by whom
    and when. Fork it once more on purpose with `--again`."""


class ForkOutOfRange(InvalidInput):
    """The fork step is outside the session's steps."""


class UnknownSchemaVersion(TickworkError):
    """A stored snapshot has a schema version this tickwork cannot read; upgrade tickwork."""


class ConfigurationError(TickworkError):
    """tickwork is not configured correctly."""


class NotImportable(ConfigurationError):
    """An object named `module:attr` (a job kind, a model provider) cannot be had in this
    process: its module is not on its path, fails to import one of its own, or holds no such
    attribute. Another process (another worker, after a deploy) may have it."""


class MissingCredentials(ConfigurationError):
    """This process lacks what a model needs to be called (its API key): another process
    of the fleet may hold it."""


class ModelError(TickworkError):
    """The model call failed."""

    #: a timeout, a connection error, 429 or 5xx: the same call may succeed later
    transient: bool = False

    def __init__(self, message: str | None = None, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TransientModelError(ModelError):
    """The model did not answer this time (timeout, connection, 429, 5xx); it is retried."""

    transient = True


class PermanentModelError(ModelError):
    """The model refused the request (400, 401, 403, 404); retrying will not help."""


class ContextTooLong(PermanentModelError):
    """The model refused the prompt as longer than its context window (OpenAI's
    `context_length_exceeded`, Anthropic's "prompt is too long"): the same call will not
    succeed, so the session compacts its transcript and tries again."""


class ToolError(TickworkError):
    """A tool call could not run; the message becomes the model's error observation."""


class UnknownTool(ToolError):
    """The model called a tool that this job does not have."""


class InvalidToolArguments(ToolError, InvalidInput):
    """The arguments do not match the tool's schema."""


class PathOutsideWorkspace(ToolError):
    """The path leaves the workspace; tools only touch files inside it."""


class SandboxUnavailable(ToolError):
    """A command was refused: the OS sandbox (bubblewrap) cannot run on this worker and
    `TICKWORK_SANDBOX=none` was not set."""


class BlobMissing(TickworkError, LookupError):
    """A blob a session's files name is not in the artifact store (deleted, or never put)."""


class BlobCorrupt(TickworkError, ValueError):
    """A blob read back does not hold the content its hash names, and no other copy does:
    the session stops (`ARTIFACT_CORRUPT`); `tickwork artifacts verify --repair` scrubs."""

    def __init__(self, message: str | None = None, *, keys: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        #: the hashes whose copies were bad
        self.keys = keys


class StoreError(TickworkError):
    """The database failed a request of the store; the message names the database (without
    its password) and what it said. Raised by every `Store` method instead of SQLAlchemy's
    or the driver's exceptions, which never leave store/."""


class StoreUnavailable(StoreError):
    """The database did not answer: down, unreachable, restarting, or too busy (a refused or
    dropped connection, a lock or pool timeout, a deadlock it broke). Nothing of the request
    was committed, and the same request may succeed later: the HTTP API answers 503, and a
    tick gives up so that its session's lease runs out and the relay runs it again."""


class SchemaMissing(StoreUnavailable):
    """The database answers but has no tickwork schema, or an older one (a table or column
    the store reads is not there): run `tickwork db upgrade` against it."""


class StoreBusy(StoreUnavailable):
    """Every connection of this process's pool to the database stayed in use for as long as
    the pool waits for one: the database answers, but this process had more requests at
    once than connections. Nothing was done, and the same request may succeed in a moment:
    the HTTP API answers 503 `server_busy` with Retry-After: `waited_s`, how long the pool
    waits for a connection (None: not known)."""

    def __init__(self, message: str | None = None, *, waited_s: float | None = None) -> None:
        super().__init__(message)
        self.waited_s = waited_s


class StoreConflict(StoreError):
    """The write broke one of the database's constraints (a row with that key exists
    already, or a row it names does not); nothing of it was committed."""


class UnstorableValue(StoreError, ValueError):
    """The database refused a value as out of range or malformed for its column; nothing was
    committed. Input is checked before it reaches the store, so this is a bug to report."""


class BrokerUnavailable(TickworkError):
    """The broker did not take a tick; the tick stays in the outbox and a relay publishes it
    once the broker answers."""


class ArtifactsUnavailable(TickworkError):
    """The artifact store could not be read or written; the tick is run again later."""


class InvalidGraph(ConfigurationError):
    """The graph definition is not valid; the message names the node or edge to fix."""


class InvalidStateUpdate(TickworkError):
    """A graph node (or a person's edit of its state) gave an update the state schema refuses."""


class GraphVersionMismatch(ConfigurationError):
    """The session was started on another version of its graph than this worker has; the
    tick is refused and the session left for a worker that has that version."""


class EnvironmentNotFound(TickworkError, LookupError):
    """No environment has that key: list them with `tickwork env ls`."""


class EnvironmentInUse(TickworkError):
    """An environment a live session uses cannot be removed without --force."""
