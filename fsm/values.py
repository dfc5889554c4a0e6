"""The session as values: statuses, budgets, steps, calls, observations, decisions, events."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from tickwork.fsm.people import MAX_NAME
from tickwork.fsm.tenants import DEFAULT_TENANT, TENANT_PATTERN

#: Version of the snapshot format stored in dead letters; see `tickwork.fsm.snapshots`.
#: 2: the head carries `submitted_by`; calls carry `provider_call_id` and `approval_reason`
#: 3: the head carries `runtime_level`
#: 4: the head carries `tenant`, `priority`, `concurrency_key` and `max_per_key`
SNAPSHOT_SCHEMA_VERSION = 4

#: The runtime level this code writes and runs (docs/DESIGN.md section 12): bumped,
#: separately from the package's version, when what a session stores changes so that an
#: older worker would run it wrongly. A session records the level it needs; a worker
#: claims only sessions of its level or below, so in a rolling upgrade an older worker
#: leaves a newer session to a newer worker instead of half-running it (ops/RUNBOOK.md,
#: "Upgrades").
#: 1: the session's files are stored (`config.files`: a base manifest and the changes of
#:    its ticks); also the sessions of 0.1.0, which recorded no level. A session from
#:    before stored files (`config.workspace` and `config.baseline`) runs on level 1 too,
#:    in its own folder (`tickwork.worker.jobs.repair.legacy`).
#: 2: session trees (children, their joins, `waiting_children`, `each` deliveries),
#:    tenants and admission (`queued`): a level-1 worker would fail a woken parent and
#:    could not count a child's end on its join. A child needs at least this level
#:    whatever its parent's (`tickwork.fsm.trees.lineage`).
RUNTIME_LEVEL = 2


class Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Status(StrEnum):
    #: beyond its tenant's in-flight limit or its concurrency key's: no tick anywhere until
    #: the relay admits it (to `ready`); neither runnable nor in flight nor finished
    QUEUED = "queued"
    READY = "ready"  #: the next tick calls the model
    EXECUTING = "executing"  #: the next tick runs the next pending tool call
    WAITING_APPROVAL = "waiting_approval"  #: suspended until a person decides
    #: suspended until the children it spawned have ended (the join, docs/DESIGN.md
    #: section 16); it holds no worker, and the last child's end wakes it
    WAITING_CHILDREN = "waiting_children"
    COMPLETED = "completed"  #: the model answered without tool calls
    FAILED = "failed"  #: `error_code` says why
    CANCELLED = "cancelled"  #: cancel was requested and took effect

    @property
    def runnable(self) -> bool:
        return self in RUNNABLE

    @property
    def terminal(self) -> bool:
        return self in (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

    @property
    def moving(self) -> bool:
        """Workers move it on without a person: runnable, or queued until admitted."""
        return self is Status.QUEUED or self in RUNNABLE

    @property
    def in_flight(self) -> bool:
        """Admitted and not finished: what the in-flight limits count (docs/DESIGN.md
        section 15). A session waiting for a person holds its slot too."""
        return self is not Status.QUEUED and not self.terminal


#: the statuses in which a session has a tick queued or due (the store's scans and partial
#: index select these)
RUNNABLE = (Status.READY, Status.EXECUTING)
#: the statuses the in-flight limits count: every one but `queued` and the finished ones
IN_FLIGHT = tuple(s for s in Status if s.in_flight)


class CallState(StrEnum):
    PENDING = "pending"  #: recorded, will run in order
    AWAITING_APPROVAL = "awaiting_approval"  #: a person must decide before it runs
    APPROVED = "approved"  #: decided: run as proposed
    EDITED = "edited"  #: decided: run with the decision's arguments
    REJECTED = "rejected"  #: decided: do not run; the feedback is the observation
    STARTED = "started"  #: claimed and running; with no observation after a crash it is in doubt
    DONE = "done"  #: has its observation
    IN_DOUBT = "in_doubt"  #: started, then the worker died; a person chooses what happens

    @property
    def awaits_person(self) -> bool:
        return self in (CallState.AWAITING_APPROVAL, CallState.IN_DOUBT)

    @property
    def open(self) -> bool:
        """Still to be executed by an EXECUTE tick."""
        return self in (
            CallState.PENDING,
            CallState.APPROVED,
            CallState.EDITED,
            CallState.REJECTED,
            CallState.STARTED,
        )


class ErrorCode(StrEnum):
    BUDGET_STEPS = "BUDGET_STEPS"  #: `max_steps` model calls were made
    BUDGET_TOKENS = "BUDGET_TOKENS"  #: `max_tokens` tokens were used
    BUDGET_COST = "BUDGET_COST"  #: `max_cost_usd` was spent
    DEADLINE = "DEADLINE"  #: `deadline_s` seconds passed since the session was created
    LOOP = "LOOP"  #: the model repeated itself past `max_loop_interventions`
    MODEL_ERROR = "MODEL_ERROR"  #: the model failed permanently or past its retry budget
    INTERNAL = "INTERNAL"  #: a bug or broken configuration in tickwork or the job
    ENV_SETUP = "ENV_SETUP"  #: the job's environment could not be built (its setup failed)
    #: the prompt passes the model's context window even after compacting the transcript
    CONTEXT = "CONTEXT"
    #: a blob of the session's files does not match its hash in any tier that holds it
    ARTIFACT_CORRUPT = "ARTIFACT_CORRUPT"


class DecisionKind(StrEnum):
    APPROVE = "approve"  #: run the call as proposed (for an in-doubt call: run it again)
    EDIT = "edit"  #: run the call with new arguments
    REJECT = "reject"  #: do not run; tell the model why
    PROVIDE_OUTPUT = "provide_output"  #: in-doubt calls only: this text is the call's output


class EventKind(StrEnum):
    CREATED = "created"
    MODEL_CALLED = "model_called"
    MODEL_RETRY = "model_retry"
    STEP_RECORDED = "step_recorded"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    TOOL_STARTED = "tool_started"
    TOOL_FINISHED = "tool_finished"
    LOOP_INTERVENTION = "loop_intervention"
    CANCEL_REQUESTED = "cancel_requested"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD_LETTERED = "dead_lettered"
    FORKED = "forked"
    ADMITTED = "admitted"  #: a queued session was let in: it is `ready` now
    ENVIRONMENT_WAITING = "environment_waiting"  #: another worker builds the environment
    ENVIRONMENT_READY = "environment_ready"  #: the environment is built or found, recorded
    COMPACTED = "compacted"
    #: the model refused a prompt as longer than its context window
    CONTEXT_OVERFLOW = "context_overflow"
    CHILDREN_SPAWNED = "children_spawned"  #: the session started children and waits for them
    CHILDREN_JOINED = "children_joined"  #: its children ended: the join woke it
    #: its worker's sign of life was gone: the relay took it over before its lease ran out
    #: (`data["from"]`: that worker's lease owner)
    TAKEN_OVER = "taken_over"
    #: its lease ran out with no tick saved (a worker stopped, stalled, or gone where no
    #: sign of life is watched): the relay offered its tick again (`data["from"]`: the lease
    #: owner)
    LEASE_EXPIRED = "lease_expired"
    #: a worker took its tick but cannot run it (its job kind, or its graph's version, is
    #: not there, or its artifact store lacks the session's files): nothing else changes
    #: (`data`: `worker`, `version`, `reason`)
    TICK_REFUSED = "tick_refused"


def utc_date(value: datetime) -> str:
    """A date as tickwork gives it out (views, webhook cards, exports, eval runs): ISO 8601
    in UTC ending in `Z`. A naive one is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().removesuffix("+00:00") + "Z"


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        unit = " of seconds" if name.endswith("_s") else ""  # `--deadline 1h` is no number
        raise ValueError(f"`{name}` must be a positive finite number{unit}, got {value!r}")
    return value


#: the largest value of each budget a submission, a fork or a setting may give: a count
#: what the database's INTEGER holds (a step's number), tokens what a JSON number holds
#: exactly (any client reads it back), dollars and seconds far past any session's (a
#: deadline of a century). Checked where budgets come in (`over_bound`), not when a stored
#: session is read: one stored before the bounds still loads.
BUDGET_MAXIMA: dict[str, float] = {
    "max_steps": 2**31 - 1,
    "max_tokens": 2**53 - 1,
    "max_cost_usd": 1e9,
    "deadline_s": 100 * 365.25 * 86400,
    "max_consecutive_repeats": 2**31 - 1,
    "max_loop_interventions": 2**31 - 1,
    "max_model_retries": 2**31 - 1,
    "max_calls_per_step": 2**31 - 1,
}


#: the highest rate, in USD per million tokens, a submission's price may give
MAX_PRICE = 1_000_000.0
#: the rates of a price, in the order a submission gives them (`--price`, the API's `price`
#: list) and of the fields of `tickwork.worker.models.Price`: USD per million prompt,
#: completion, cached tokens and tokens written to the cache
PRICE_RATES = ("prompt", "completion", "cached", "cache_write")
#: the fewest of PRICE_RATES a price gives, the first ones: prompt and completion
MIN_PRICE_RATES = 2


def over_bound(budgets: Mapping[str, Any]) -> str | None:
    """What is wrong with the first of `budgets` (name -> value, as given) past its bound in
    BUDGET_MAXIMA, or None."""
    for name, value in budgets.items():
        most = BUDGET_MAXIMA.get(name, math.inf)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > most:
            return f"`{name}` must be at most {most:,.0f}, got {value!r}"
    return None


class Budgets(Value):
    """Per-session limits; defaults come from settings."""

    #: a head's budgets hold every one: the schema of an answer says so, as of `Head`
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    max_steps: int = 50
    max_tokens: int = 2_000_000
    #: 0 turns the cost budget off (for a model that has no price)
    max_cost_usd: float = 10.0
    deadline_s: float = 6 * 3600.0
    max_consecutive_repeats: int = 3
    max_loop_interventions: int = 2
    max_model_retries: int = 5
    max_calls_per_step: int = 32

    @field_validator("*", mode="before")
    @classmethod
    def _not_bool(cls, value: Any, info: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"`{info.field_name}` must be a number, got {value!r}")
        return value

    @field_validator("*")
    @classmethod
    def _check(cls, value: float, info: Any) -> float:
        if info.field_name != "max_cost_usd":
            return _positive(info.field_name, value)
        if value == 0:
            return value  # 0: no cost budget, said on purpose (a model with no price)
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"`max_cost_usd` must be 0 (no cost budget) or a positive finite number, "
                f"got {value!r}"
            )
        return value

    @property
    def limits_cost(self) -> bool:
        """False when `max_cost_usd` is 0: the session has no cost budget."""
        return self.max_cost_usd > 0


class Usage(Value):
    """The tokens of one model call, as the server reported them."""

    #: every prompt token, those read from or written to the provider's prompt cache included
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: of `prompt_tokens`, those read from the provider's prompt cache (billed at a discount)
    cached_prompt_tokens: int = 0
    #: of `prompt_tokens`, those written to the prompt cache (Anthropic bills them at a premium)
    cache_creation_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


#: the longest provider call id kept; a longer one (or one with spaces or control
#: characters) is not sent back, and the call goes back under tickwork's own id
MAX_PROVIDER_CALL_ID = 128


def provider_call_id(value: Any) -> str | None:
    """A model's id for a call if it is one we can store and send back, else None."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_PROVIDER_CALL_ID:
        return None
    return value if value.isascii() and value.isprintable() and " " not in value else None


class ProposedCall(Value):
    """A tool call as the model wrote it; `arguments` may be text that is not JSON."""

    name: str
    arguments: str | dict[str, Any]
    #: the provider's id of the call (OpenAI `tool_calls[].id`), None when it gave none
    id: str | None = None


class ModelReply(Value):
    """What a model returned for one THINK."""

    content: str = ""
    calls: tuple[ProposedCall, ...] = ()
    usage: Usage = Usage()
    model: str = ""
    latency_ms: float = 0.0
    #: the server stopped writing at the completion cap it was sent (finish_reason `length`)
    truncated: bool = False
    #: the cap was lowered below the one asked for, to the room the server said the prompt
    #: left in its window: a cut then is the window's, not a budget's
    cap_lowered: bool = False
    #: the cap it was lowered to (None: not lowered, or the model did not say)
    cap_lowered_to: int | None = None
    #: the context window the server stated when it refused the cap first asked for
    stated_window: int | None = None


class ToolCall(Value):
    call_id: str
    step: int
    index: int
    name: str
    #: parsed arguments, or None when the model's text did not parse as a JSON object
    arguments: dict[str, Any] | None
    raw_arguments: str
    fingerprint: str
    state: CallState = CallState.PENDING
    #: True if the approval rules asked for a person when the call was proposed
    needs_approval: bool = False
    #: why the approval rules asked for a person (None when they did not)
    approval_reason: str | None = None
    #: the provider's id of the call, sent back with its result; None: `call_id` is sent
    provider_call_id: str | None = None

    @property
    def wire_id(self) -> str:
        """The id the model sees for this call: the provider's own, else ours."""
        return self.provider_call_id or self.call_id


class Observation(Value):
    call_id: str
    content: str
    is_error: bool = False
    at: datetime
    duration_ms: float = 0.0
    #: set when the content was not read, only its size in bytes: a THINK claim leaves out
    #: observations its prompt shows as stubs (`tickwork.fsm.context`); never stored
    elided: int | None = Field(default=None, exclude=True)

    @property
    def size(self) -> int:
        """The content's size in bytes."""
        return self.elided if self.elided is not None else len(self.content.encode())


class Decision(Value):
    call_id: str
    kind: DecisionKind
    #: 0 for the decision a call waited for; a call that went in doubt afterwards is
    #: decided again with the next number
    attempt: int = 0
    approver: str
    at: datetime
    #: the fingerprint of the call the approver saw
    fingerprint: str
    comment: str = ""
    arguments: dict[str, Any] | None = None
    feedback: str = ""
    output: str = ""


class StepKind(StrEnum):
    REPLY = "reply"  #: a model reply: a thought and its tool calls (or the final answer)
    #: a model call that summarised the steps up to `compacted_through`; its thought is
    #: the summary, and it has no calls (docs/DESIGN.md section 14)
    COMPACTION = "compaction"


class Step(Value):
    step: int
    thought: str
    calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    fingerprint: str = ""
    model: str = ""
    trace_id: str = ""
    at: datetime
    kind: StepKind = StepKind.REPLY
    #: the observations of steps up to this one were shown as stubs in the prompt that made
    #: this step (`tickwork.fsm.context`); 0: none were
    masked_through: int = 0
    #: a compaction: its summary stands for the steps up to this one
    compacted_through: int = 0
    #: a reply or a compaction: the estimate (four characters a token, unscaled) of the
    #: prompt that made it, the tools' schemas sent beside it included, which
    #: `tickwork.fsm.context.scale` divides the server's count of that prompt by; None: a
    #: step stored before it was kept (0024_prompt_estimate; a compaction's, before 0.3),
    #: whose prompt `scale` builds again to estimate it (a compaction's: it reads none)
    prompt_estimate: int | None = None


class Event(Value):
    kind: EventKind
    at: datetime
    data: dict[str, Any] = {}


class Head(Value):
    """The small row that says where a session is; it moves to `version + 1` on every change."""

    #: every field is in every head a reader gets: the schema of an answer says so (a
    #: client generated from it reads `status`, not "a status or nothing")
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    id: str
    kind: str
    status: Status = Status.READY
    version: int = 0
    created_at: datetime
    updated_at: datetime
    model: str
    budgets: Budgets = Budgets()
    #: the job's input as submitted
    input: dict[str, Any] = {}
    #: resolved at submit: system_prompt, user_prompt, tools, instructions, workspace...
    config: dict[str, Any] = {}
    step: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    loop_interventions: int = 0
    model_attempts: int = 0
    cancel_requested: bool = False
    error_code: ErrorCode | None = None
    error_message: str = ""
    final_answer: str | None = None
    #: what the job produced besides the answer (the repair job: its patch)
    result: dict[str, Any] = {}
    #: the session forked from (with `fork_step`), or the one that spawned it (with
    #: `spawn_call`)
    parent_id: str | None = None
    fork_step: int | None = None
    #: a child session (docs/DESIGN.md section 16): the root of its tree (None: not a child)
    root_id: str | None = None
    #: a child session: the parent's call that spawned it (None: not a child)
    spawn_call: str | None = None
    #: a child session: its role, as the spawn named it
    role: str = ""
    #: the step's call ids still waiting for a person (for listings)
    awaiting: tuple[str, ...] = ()
    #: who submitted it (an API token's name, the CLI's --as or login name; a fork: who
    #: forked it); empty for sessions stored before it was recorded
    submitted_by: str = Field(default="", max_length=MAX_NAME)
    #: the runtime level a worker needs to run it (RUNTIME_LEVEL when it was created; a
    #: fork keeps its parent's if that is higher)
    runtime_level: int = Field(default=RUNTIME_LEVEL, ge=1)
    #: the tenant it belongs to (`tickwork.fsm.tenants`); a fork stays in its parent's
    tenant: str = Field(default=DEFAULT_TENANT, pattern=TENANT_PATTERN)
    #: admission order within the tenant: higher first, then older first (tickwork.fsm.admission)
    priority: int = 0
    #: at most `max_per_key` sessions of the tenant with this key are in flight at once
    concurrency_key: str | None = None
    max_per_key: int | None = None


class Session(Value):
    """A whole session for display, export and dead letters."""

    head: Head
    steps: tuple[Step, ...] = ()
    observations: tuple[Observation, ...] = ()
    decisions: tuple[Decision, ...] = ()
    events: tuple[Event, ...] = ()

    def call(self, call_id: str) -> ToolCall | None:
        for step in self.steps:
            for call in step.calls:
                if call.call_id == call_id:
                    return call
        return None

    def observation(self, call_id: str) -> Observation | None:
        return next((o for o in self.observations if o.call_id == call_id), None)

    def decision(self, call_id: str) -> Decision | None:
        """The latest decision on the call."""
        found = [d for d in self.decisions if d.call_id == call_id]
        return max(found, key=lambda d: d.attempt) if found else None


def call_id_for(step: int, index: int) -> str:
    """Our own stable call id; models' ids may be missing or repeated."""
    return f"{call_ids_of(step)}{index}"


def call_ids_of(step: int) -> str:
    """What every call id of step `step` starts with."""
    return f"s{step}c"


def step_of_call(call_id: str) -> int | None:
    """The step of one of our call ids (`call_id_for`); None for an id not of that form."""
    found = re.fullmatch(r"s(\d+)c\d+", call_id)
    return None if found is None else int(found.group(1))


def idempotency_key(session_id: str, step: int, call_id: str) -> str:
    return f"{session_id}:{step}:{call_id}"
