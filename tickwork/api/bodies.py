"""What the API takes: request bodies, validated before anything is written.

Bodies forbid unknown fields, so an `approver` (or any misspelt field) in a body is a 422:
who decides comes from the token. Every text is bounded (a goal, an instruction, the
whole input), and none may hold NUL or a lone surrogate.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from pydantic_core import core_schema as schemas

from tickwork.fsm.admission import CONCURRENCY_KEY, MAX_PER_KEY, MAX_PRIORITY, MIN_PRIORITY
from tickwork.fsm.context import MAX_WINDOW, MIN_WINDOW
from tickwork.fsm.forks import MAX_INSTRUCTION_CHARS, MAX_SYSTEM_PROMPT_CHARS
from tickwork.fsm.tenants import TENANT_PATTERN
from tickwork.fsm.values import MAX_PRICE, MIN_PRICE_RATES, PRICE_RATES, DecisionKind
from tickwork.parsing import DEADLINE_SECONDS, SESSION_ID_PATTERN, new_session_id
from tickwork.parsing import fingerprint as whole_fingerprint

from .inputs import RepairInput
from .limits import check_tree

#: the longest text of a job's input (a goal, a test command)
MAX_TEXT = 20_000
#: the largest job input, as JSON
MAX_INPUT_BYTES = 65_536
#: the most budget overrides, tool outputs
MAX_ENTRIES = 50
#: the longest model spec a submit or a fork gives (`model`)
MAX_MODEL_SPEC = 500
#: the header that makes a submit's or fork's retry safe, as clients of Stripe, PayPal or the
#: IETF draft send it (`retries`; here for the remote client, which loads no route)
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: what its key may be: visible ASCII, as the IETF draft's examples (uuids, random strings)
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")
#: the fewest sessions of a concurrency key a limit may allow in flight
MIN_PER_KEY = 1
#: how many rates a price gives, fewest and most (prompt and completion; cached; cache write)
PRICE_COUNTS = (MIN_PRICE_RATES, len(PRICE_RATES))


def _session_id(value: str | None) -> str | None:
    return None if value is None else new_session_id(value, what="id")


#: a whole number of a body: strict, so `true` or `"2"` is a 422 naming the field and the
#: type, not 1 or 2 (a fork's `from_step: false` started over and closed the dead letter)
Integer = Annotated[int, Field(strict=True)]
#: a price in USD per million tokens, finite (JSON may hold NaN); strict as `Integer`
Price = Annotated[float, Field(ge=0, le=MAX_PRICE, allow_inf_nan=False, strict=True)]

# the fields a submit and a fork share, bounded once: each body gives its own default and
# description
#: a model's context window in tokens
ContextWindow = Annotated[Integer | None, Field(ge=MIN_WINDOW, le=MAX_WINDOW, examples=[128000])]
#: the admission order within the tenant (`tickwork.fsm.admission`)
Priority = Annotated[Integer, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY)]
#: sessions of the tenant with the same key run `max_per_key` at a time (the pattern is
#: the schema's; the admission checks it, `tickwork.fsm.admission`)
ConcurrencyKey = Annotated[
    str | None, Field(max_length=200, json_schema_extra={"pattern": CONCURRENCY_KEY.pattern})
]
#: how many sessions of a concurrency key may be in flight at once
PerKey = Annotated[Integer | None, Field(ge=MIN_PER_KEY, le=MAX_PER_KEY)]
#: the new session's id (the pattern is the schema's; `_session_id` checks it in its words)
SessionId = Annotated[
    str | None,
    Field(max_length=64, json_schema_extra={"pattern": SESSION_ID_PATTERN}),
    AfterValidator(_session_id),
]
#: budget overrides by name (the client checks each when the session is made)
BudgetOverrides = Annotated[dict[str, Any], Field(max_length=MAX_ENTRIES)]


def page_bounds() -> dict[str, Any]:
    """The bounds the page's forms offer, as these bodies take them, and the units its
    Deadline fields take, as `--deadline` does: served in the page (`make_api`), so its
    fields cannot drift from the API's and the CLI's."""
    return {
        "deadline_units": DEADLINE_SECONDS,
        "priority": [MIN_PRIORITY, MAX_PRIORITY],
        "max_per_key": [MIN_PER_KEY, MAX_PER_KEY],
        "context_window": [MIN_WINDOW, MAX_WINDOW],
        "price": [0, MAX_PRICE],
        "price_rates": list(PRICE_COUNTS),
    }


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        check_tree(data, where="body")
        return data


def _bounded_input(value: dict[str, Any]) -> dict[str, Any]:
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > MAX_INPUT_BYTES:
        raise ValueError(f"the input is {size} bytes as JSON; at most {MAX_INPUT_BYTES} are taken")
    for key, item in value.items():
        if isinstance(item, str) and len(item) > MAX_TEXT:
            raise ValueError(
                f"input.{key} is {len(item)} characters long; at most {MAX_TEXT} are taken"
            )
    return value


class SubmitOptions(Body):
    """What every submit may give besides its kind and input."""

    model: str | None = Field(
        default=None,
        max_length=MAX_MODEL_SPEC,
        description="scripted:PATH or openai:MODEL [default: the deployment's TICKWORK_MODEL].",
    )
    budgets: BudgetOverrides = Field(
        default_factory=dict,
        examples=[{"max_steps": 20, "max_cost_usd": 2.0}],
        description="Budget overrides: max_steps, max_tokens, max_cost_usd, deadline_s, ...",
    )
    id: SessionId = Field(default=None, description="The new session's id [default: a random one].")
    price: list[Price] | None = Field(
        default=None,
        min_length=PRICE_COUNTS[0],
        max_length=PRICE_COUNTS[1],
        examples=[[0.5, 1.5], [3, 12, 1.5], [3, 15, 0.3, 3.75]],
        description="The model's price in USD per million tokens, [prompt, completion], "
        "[prompt, completion, cached] or [prompt, completion, cached, cache_write] (cached: "
        "prompt tokens read from the provider's prompt cache; cache_write: those written to "
        "it, which Anthropic bills at a premium; left out, they keep the model's discount on "
        "the given prompt rate, or cost the prompt rate for a model without one). Each rate "
        "at least the deployment's for the model (TICKWORK_PRICES or the built-in table), "
        "which it may raise, never lower. A model the deployment has no price for is not "
        "priced here: an operator prices it in TICKWORK_PRICES; until then it is refused "
        "while the session has a cost budget (budgets.max_cost_usd 0 turns it off) or the "
        "tenant a dollar quota.",
    )
    context_window: ContextWindow = Field(
        default=None,
        description="The model's context window in tokens [default: the model table's]; old "
        "observations are masked, then the transcript compacted, to keep each prompt under it.",
    )

    priority: Priority = Field(
        default=0, description="Admission order within the tenant: higher first, then older first."
    )
    concurrency_key: ConcurrencyKey = Field(
        default=None,
        examples=["github.com/org/repo"],
        description="At most `max_per_key` sessions of the tenant with this key run at once "
        "(e.g. one repair per repository); the others wait as `queued`.",
    )
    max_per_key: PerKey = Field(
        default=None,
        description="How many sessions of `concurrency_key` may be in flight at once "
        "[default: 1]; needs a `concurrency_key`.",
    )
    tenant: str | None = Field(
        default=None,
        max_length=64,
        json_schema_extra={"pattern": TENANT_PATTERN},
        description="The tenant to submit into [default: the token's]; only an admin token "
        "may name another tenant than its own.",
    )


class Submit(SubmitOptions):
    """A new session. Its schema is a union on `kind` (`RepairSubmit`, `KindSubmit`): a repair's
    input is typed; the job kind checks every input when the session is made."""

    kind: str = Field(
        min_length=1,
        max_length=200,
        examples=["repair"],
        description="A job kind the deployment knows: `repair`, a kind named in "
        "TICKWORK_IMPORTS, or one of those `module:attr` specs.",
    )
    input: dict[str, Any] = Field(
        default_factory=dict,
        description=f"The job's input: at most {MAX_INPUT_BYTES} bytes as JSON, each text "
        f"at most {MAX_TEXT} characters.",
    )

    _input = field_validator("input")(_bounded_input)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return submit_schema(handler)


class RepairSubmit(SubmitOptions):
    """A new `repair` session."""

    kind: Literal["repair"]
    input: RepairInput


class KindSubmit(SubmitOptions):
    """A new session of another job kind: one named in TICKWORK_IMPORTS (or its
    `module:attr` spec), with an input of that kind's own."""

    kind: str = Field(
        min_length=1,
        max_length=200,
        json_schema_extra={"not": {"const": "repair"}},
        examples=["mypkg.jobs:TRIAGE"],
    )
    input: dict[str, Any] = Field(default_factory=dict, description="The kind's own input.")


def submit_schema(handler: GetJsonSchemaHandler) -> JsonSchemaValue:
    """A submit's schema: one of the kinds' bodies, told apart by `kind`."""
    union = schemas.union_schema(
        [RepairSubmit.__pydantic_core_schema__, KindSubmit.__pydantic_core_schema__]
    )
    schema = handler(union)
    repair = schema["anyOf"][0]
    return {
        "title": "Submit",
        "description": "A new session: its job kind, its input (typed for `repair`) and "
        "options. Every input is checked by its job kind when the session is made.",
        "oneOf": schema["anyOf"],
        "discriminator": {"propertyName": "kind", "mapping": {"repair": repair["$ref"]}},
    }


def _with_kind(kind: DecisionKind, field: str, given: JsonSchemaValue) -> JsonSchemaValue:
    """`field` must be given (as `given`) with a decision of `kind`, and only with it."""
    return {
        "if": {"properties": {"kind": {"const": kind.value}}},
        "then": {"required": [field], "properties": {field: given}},
        "else": {"properties": {field: {"type": "null"}}},
    }


#: where a client reads a waiting call's fingerprint
FINGERPRINT_SHOWN = "the call's `fingerprint` in GET /api/v1/approvals/{session_id}?preview=false"


def _json_kind(value: object) -> str:
    """What kind of JSON value `value` is, as a client reads it."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "a JSON array"


class Decide(Body):
    """One person's decision on one waiting call."""

    # the checks of `_fits_kind`, in the schema: a client generated from it knows them
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                _with_kind(DecisionKind.EDIT, "arguments", {"type": "object"}),
                _with_kind(DecisionKind.PROVIDE_OUTPUT, "output", {"type": "string"}),
                {
                    "if": {"not": {"properties": {"kind": {"const": "reject"}}}},
                    "then": {"properties": {"feedback": {"const": ""}}},
                },
            ]
        }
    )

    kind: DecisionKind
    fingerprint: str = Field(
        min_length=64,
        max_length=64,
        pattern="^[0-9a-f]{64}$",
        description="The call's whole fingerprint as you saw it (64 hex digits); the "
        "decision is refused with 409 if the call's arguments differ.",
    )
    comment: str = Field(default="", max_length=10_000, description="Why; recorded.")
    arguments: dict[str, Any] | None = Field(
        default=None, description="edit: the new arguments, checked against the tool's schema."
    )
    feedback: str = Field(
        default="",
        max_length=100_000,
        description="reject: what the model is told instead [default: that the call "
        "did not run and is not to be made again, without a reason].",
    )
    output: str | None = Field(
        default=None,
        max_length=1_000_000,
        description="provide_output (in-doubt calls): the output.",
    )

    @model_validator(mode="before")
    @classmethod
    def _has_fingerprint(cls, data: Any) -> Any:
        # pydantic would say only "Field required": say where a client finds it
        return _given(
            data,
            "fingerprint",
            f"give the fingerprint of the call as you saw it (64 hex digits: {FINGERPRINT_SHOWN})",
        )

    @field_validator("fingerprint", mode="before")
    @classmethod
    def _whole_fingerprint(cls, given: Any) -> Any:
        # pydantic would say only "String should have at least 64 characters"
        if isinstance(given, str):
            whole_fingerprint(given, what="fingerprint", shown=FINGERPRINT_SHOWN)
        return given

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments_object(cls, given: Any) -> Any:
        # pydantic would say only "Input should be a valid dictionary"
        if given is not None and not isinstance(given, dict):
            raise ValueError(
                f"`arguments` is {_json_kind(given)}: send the new arguments as one JSON "
                'object of the tool\'s parameters by name, e.g. {"path": "notes.txt"}'
            )
        return given

    @model_validator(mode="after")
    def _fits_kind(self) -> Self:
        if self.kind is DecisionKind.EDIT and self.arguments is None:
            raise ValueError("an edit needs `arguments`: the new arguments as a JSON object")
        if self.kind is not DecisionKind.EDIT and self.arguments is not None:
            raise ValueError(f"`arguments` go with an edit, not with {self.kind.value}")
        if self.kind is DecisionKind.PROVIDE_OUTPUT and self.output is None:
            raise ValueError("provide_output needs `output`: the call's output as text")
        if self.kind is not DecisionKind.PROVIDE_OUTPUT and self.output is not None:
            raise ValueError(f"`output` goes with provide_output, not with {self.kind.value}")
        if self.kind is not DecisionKind.REJECT and self.feedback:
            raise ValueError(f"`feedback` goes with reject, not with {self.kind.value}")
        return self


class Fork(Body):
    """A new session from step `from_step` of another, with a declared patch; the session's
    dead letter, if it has one, is resolved by it (`again` for one closed already)."""

    from_step: Integer = Field(
        ge=0, le=1_000_000, description="Keep steps 1..K of the original (0: start over)."
    )

    @model_validator(mode="before")
    @classmethod
    def _has_step(cls, data: Any) -> Any:
        # pydantic would say only "Field required": say what the step is, and where to see one
        return _given(
            data,
            "from_step",
            "give the step to fork from, K, to keep the original's steps 1..K (0: start "
            "over); `tickwork dlq show` proposes one under `next`",
        )

    system_prompt: str | None = Field(
        default=None, max_length=MAX_SYSTEM_PROMPT_CHARS, description="Replace the system prompt."
    )
    append_instruction: str | None = Field(
        default=None,
        max_length=MAX_INSTRUCTION_CHARS,
        description="Add an instruction after step K.",
    )
    tool_outputs: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_ENTRIES,
        description="call id -> the output to use instead.",
    )
    budgets: BudgetOverrides = Field(default_factory=dict, description="Budget overrides.")
    state: dict[str, Any] = Field(
        default_factory=dict,
        max_length=MAX_ENTRIES,
        description="A graph session: state fields to set in the fork.",
    )
    model: str | None = Field(
        default=None,
        max_length=MAX_MODEL_SPEC,
        description="The model the fork runs on from its next call, taken as a submit's "
        "`model` is (TICKWORK_API_MODELS, scripts only from TICKWORK_API_SCRIPTED_ROOTS) "
        "[default: the original's]. Another model runs under its own context window and "
        "price, as a submit of it would: a price given for the original's model is not kept.",
    )
    price: list[Price] | None = Field(
        default=None,
        min_length=PRICE_COUNTS[0],
        max_length=PRICE_COUNTS[1],
        examples=[[0.5, 1.5], [3, 15, 0.3, 3.75]],
        description="The price of the fork's model (`model`, else the original's) in USD per "
        "million tokens, taken as a submit's `price` is: [prompt, completion], with cached "
        "and cache_write after them if given; each rate at least the deployment's for the "
        "model, and none for a model the deployment has no price for [default: the "
        "original's for its model, none for another].",
    )
    context_window: ContextWindow = Field(
        default=None,
        description="The model's context window in tokens [default: the original's, or with "
        "another `model` its own]; a CONTEXT dead letter is forked onto a larger one.",
    )
    id: SessionId = Field(default=None, description="The fork's id [default: a random one].")
    priority: Priority | None = Field(
        default=None, description="Admission order within the tenant [default: the original's]."
    )
    concurrency_key: ConcurrencyKey = Field(
        default=None,
        description="The fork's concurrency key [default: the original's, with its "
        "`max_per_key`]; a new key without `max_per_key` allows one session at a time.",
    )
    max_per_key: PerKey = Field(
        default=None,
        description="How many sessions of the fork's concurrency key may be in flight at "
        "once [default: the original's for its key, else 1].",
    )

    again: bool = Field(
        default=False,
        strict=True,
        description="The session's dead letter was forked, resolved or dismissed already: "
        "fork it once more on purpose. (A fork of a session whose dead letter is open "
        "resolves it, however the fork is asked for.)",
    )


class Cancel(Body):
    """A cancel takes no fields (nor a body): one given is refused, not dropped, so a
    `reason` a client sends is not believed recorded."""


class Closing(Body):
    """Why the dead letter is resolved or dismissed."""

    reason: str = Field(min_length=1, max_length=2000, description="Kept with the dead letter.")

    @model_validator(mode="before")
    @classmethod
    def _has_reason(cls, data: Any) -> Any:
        # pydantic would say only "Field required" or "at least 1 character"; a blank one
        # is told what to do by the store: say the same of a missing or an empty one
        if isinstance(data, dict) and data.get("reason", "") == "":
            raise ValueError(
                "say why the dead letter is closed: give a `reason` (1 to 2,000 characters, "
                "kept with the dead letter and shown by `dlq show`)"
            )
        return data


def _given(data: Any, field: str, what: str) -> Any:
    """`data` (a body before it is validated), or a ValueError saying `field` is missing and
    `what` to give, where pydantic would say only "Field required"."""
    if isinstance(data, dict) and field not in data:
        raise ValueError(f"`{field}` is missing: {what}")
    return data
