"""The context a model sees (docs/DESIGN.md section 14): a policy per session, masking of old
observations and compaction, as pure functions of the stored steps.

The prompt of a THINK is built from a *view* of the stored steps: the latest compaction
(its summary stands for the steps up to its cut) and the latest mask boundary (the
observations of steps up to it are one-line stubs). Both are stored on the steps they made
(`Step.compacted_through`, `Step.masked_through`), so the messages a model saw at step k
are a function of the steps up to k, and a fork or replay sees them again.

The view only ever moves forward, and only when the next prompt would pass the policy's
target: first the mask boundary (all but the last `keep` observations become stubs), and
if that is not enough a compaction; a prompt still past the window masks some of the last
`keep` too (as many of the newest stay whole as fit), before any compaction (which keeps
them whole) and before the session fails. An
observation shorter than its stub stays whole. Between two such moves the prompt only grows at its
end, so a provider's prefix cache holds; a move changes the prompt from the first message
it touches (a mask round) or from the summary (a compaction).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Head, Observation, Step, StepKind, ToolCall

Message = dict[str, Any]
#: what estimates a prompt's tokens (the worker's estimator: four characters a token)
Estimate = Callable[[Sequence[Message]], int]

#: the tool every session with a context policy has, to see an elided observation again
RECALL = "recall"
#: the share of the window a prompt may fill before the view moves
DEFAULT_TARGET = 0.75
#: the newest observations that always stay whole
DEFAULT_KEEP = 3
#: the most replies a prompt shows after its summary: past them, a compaction, so what a
#: THINK reads on a cache miss stays bounded however small each masked step is
DEFAULT_SPAN = 50
#: the bounds of a context window a submitter may give, in tokens
MIN_WINDOW, MAX_WINDOW = 1_024, 10_000_000
#: an observation of at most this many bytes is read whole even where it is masked (a
#: store's THINK claim reads the others' sizes only): its stub may be no shorter, and an
#: observation shorter than its stub stays whole (a stub is at most about 400 bytes)
READ_WHOLE_BYTES = 512
#: the most characters of a tool's name a stub shows
STUB_NAME = 64
#: the room a compaction's request leaves its summary in the window (a server refuses a
#: request whose prompt leaves less than the cap asked for, and a cap of a few tokens would
#: cut the summary): where it would leave less, it masks the newest observations too
SUMMARY_ROOM = 1_024

SUMMARISE = (
    "The conversation is too long for your context window and is being compacted. "
    "Write a summary of everything above up to and including step {through}, for "
    "yourself to go on from: the task, what you found (files, errors, test results), what "
    "you changed, what failed and what you plan next. Be specific and brief; the steps "
    "after step {through} stay in the conversation as they are. Do not call tools."
)
#: what the summary of a compaction starts with in the prompts after it
SUMMARY_HEADING = "Summary of steps 1-{through} (compacted):\n"


def template_pattern(template: str, **groups: str) -> str:
    """A regex for `template` with each `{name}` matched by `groups[name]`."""
    found = re.escape(template)
    for name, group in groups.items():
        found = found.replace(re.escape(f"{{{name}}}"), group)
    return found


#: the end of a compaction request (a ReAct prompt has it after other user text)
_ASKED = re.compile(template_pattern(SUMMARISE, through=r"(\d+)") + r"\Z")


def summary_asked(messages: Sequence[Message]) -> int | None:
    """The step a compaction asks to be summarised through, if `messages` ends with its
    request; None for an ordinary prompt. Models that are not chat models (a script, a
    ReAct text model) answer the request differently from a THINK."""
    last = messages[-1] if messages and messages[-1].get("role") == "user" else {}
    asked = _ASKED.search(str(last.get("content") or ""))
    return int(asked.group(1)) if asked else None


@dataclass(frozen=True)
class Policy:
    """How much of the model's context window a session's prompt may fill."""

    #: the model's context window in tokens
    window: int
    #: the share of the window the prompt may reach before old observations are masked
    target: float = DEFAULT_TARGET
    #: how many of the newest observations always stay whole
    keep: int = DEFAULT_KEEP
    #: the most replies shown after the summary before the next compaction
    span: int = DEFAULT_SPAN

    @property
    def limit(self) -> int:
        return int(self.window * self.target)

    def to_config(self) -> dict[str, Any]:
        return {"window": self.window, "target": self.target, "keep": self.keep, "span": self.span}


def policy_of(config: Mapping[str, Any]) -> Policy | None:
    """The session's policy from its config (`config["context"]`); None: sent whole."""
    given = config.get("context")
    if not isinstance(given, Mapping):
        return None
    return Policy(
        window=int(given["window"]),
        target=float(given.get("target", DEFAULT_TARGET)),
        keep=int(given.get("keep", DEFAULT_KEEP)),
        span=int(given.get("span", DEFAULT_SPAN)),
    )


#: the key of a session's result (its card) holding the context window its model stated
#: when it refused a prompt as too long, below the configured one: the policy's from then on
STATED_WINDOW = "context_window"
#: how a provider states its window when it refuses a prompt: OpenAI's and vLLM's "maximum
#: context length is 8192 tokens", Anthropic's "... tokens > 200000 maximum", and that
#: without "maximum" ("prompt is too long: 210000 tokens > 200000"), whose number must end
#: there (no digit, or comma and digit, after it: never the start of a longer one)
_STATED = re.compile(
    r"maximum context length is (\d[\d,]{0,12}) tokens|> (\d[\d,]{0,12}) maximum"
    r"|prompt is too long: \d[\d,]{0,12} tokens > (\d[\d,]{0,12})(?!\d|,\d)",
    re.IGNORECASE,
)


def stated_window(message: str) -> int | None:
    """The context window a provider's refusal of a prompt as too long states, if it does."""
    found = _STATED.search(message)
    if found is None:
        return None
    window = int(next(g for g in found.groups() if g is not None).replace(",", ""))
    # the server's text: a number past any window is no window (it is not believed)
    return window if 1 <= window <= MAX_WINDOW else None


def policy_for(head: Head) -> Policy | None:
    """The session's policy (`policy_of` its config) under the window its model stated when
    it refused a prompt (`STATED_WINDOW` in its result), where that is smaller."""
    policy = policy_of(head.config)
    stated = head.result.get(STATED_WINDOW)
    if policy is None or isinstance(stated, bool) or not isinstance(stated, int):
        return policy
    return replace(policy, window=stated) if 0 < stated < policy.window else policy


def check_window(value: Any, *, what: str = "`context_window`") -> int:
    """A context window a submitter gave, checked: a whole number of tokens in bounds
    (`what`: the field, in backticks as the command line turns it into its flag)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(
            f"{what} must be a whole number of tokens, got {value!r}; e.g. {what}=128000"
        )
    if not MIN_WINDOW <= value <= MAX_WINDOW:
        raise InvalidInput(
            f"{what} must be between {MIN_WINDOW:,} and {MAX_WINDOW:,} tokens, got {value:,}"
        )
    return value


@dataclass(frozen=True)
class View:
    """Which stored steps the prompt shows whole, masked or summarised."""

    #: the steps up to this one are summarised (0: no compaction yet)
    through: int = 0
    summary: str | None = None
    #: the observations of steps up to this one are stubs
    masked: int = 0


@dataclass(frozen=True)
class Plan:
    """What the next THINK sends: `messages` (estimated at `tokens` with the tools' schemas
    sent beside them, scaled as the server counts) under `view`, or first a compaction of
    the steps up to `compact_through`, or nothing: `too_long` says why. `unscaled`: the
    same estimate unscaled, which a reply's step keeps (`Step.prompt_estimate`)."""

    messages: list[Message]
    view: View
    tokens: int
    compact_through: int | None = None
    too_long: str | None = None
    unscaled: int = 0


def stored_view(steps: Sequence[Step]) -> View:
    """The view the latest stored steps were made under."""
    compaction = next((s for s in reversed(steps) if s.kind is StepKind.COMPACTION), None)
    through, summary, since = 0, None, 0
    if compaction is not None:
        through, summary, since = compaction.compacted_through, compaction.thought, compaction.step
    masked = max([through, *(s.masked_through for s in steps if s.step > since)])
    return View(through=through, summary=summary, masked=masked)


def needed_from(steps: Sequence[Step], *, history: int = 0) -> int:
    """The first step a THINK needs: the latest compaction, or the first step after its
    cut if earlier, and at least the last `history` replies for loop detection."""
    compaction = next((s for s in reversed(steps) if s.kind is StepKind.COMPACTION), None)
    if compaction is None:
        return steps[0].step if steps else 1
    replies = [s.step for s in steps if s.kind is StepKind.REPLY]
    first = min(compaction.compacted_through + 1, compaction.step)
    return min([first, *replies[-history:]]) if history else first


def elided(call_id: str, tool: str, size: int) -> str:
    """The stub an observation becomes once it is masked."""
    return (
        f"[observation of call {call_id} ({tool[:STUB_NAME]}) elided: {size} bytes; "
        f'recall("{call_id}") to see it]'
    )


def build(
    head: Head, steps: Sequence[Step], observations: Mapping[str, Observation], view: View
) -> list[Message]:
    """OpenAI-style messages: system, the task, the summary if any, then each reply step
    after the view's cut and its observations (stubs up to the view's mask).

    Each call goes back under the provider's own id when it gave one (servers may check
    them: Mistral's take 9 letters and digits), else under ours (`ToolCall.wire_id`).
    """
    config = head.config
    out: list[Message] = []
    if config.get("system_prompt"):
        out.append({"role": "system", "content": config["system_prompt"]})
    task = config.get("user_prompt") or json.dumps(head.input, ensure_ascii=False)
    out.append({"role": "user", "content": task})
    instructions: dict[int, list[str]] = {}
    for item in config.get("instructions", []):
        after = int(item["after_step"])
        instructions.setdefault(after if after > view.through else 0, []).append(str(item["text"]))
    if view.summary is not None:
        out.append(
            {
                "role": "user",
                "content": SUMMARY_HEADING.format(through=view.through) + view.summary,
            }
        )
    out.extend({"role": "user", "content": t} for t in instructions.get(0, []))
    limit = head.budgets.max_calls_per_step
    for step in steps:
        if step.kind is not StepKind.REPLY or step.step <= view.through:
            continue
        assistant: Message = {"role": "assistant", "content": step.thought}
        if step.calls:
            assistant["tool_calls"] = [
                {
                    "id": c.wire_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.raw_arguments},
                }
                for c in step.calls
            ]
        out.append(assistant)
        for call in step.calls:
            seen = observations.get(call.call_id)
            if seen is None:
                continue
            content = _shown(call, seen, masked=step.step <= view.masked)
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call.wire_id,
                    "name": call.name,
                    "content": content,
                }
            )
        if len(step.calls) >= limit:
            out.append(
                {
                    "role": "user",
                    "content": (
                        f"At most {limit} tool calls of a reply run; any calls after the {limit}th "
                        "were dropped. Make fewer calls per reply."
                    ),
                }
            )
        out.extend({"role": "user", "content": t} for t in instructions.get(step.step, []))
    return out


def _shown(call: ToolCall, seen: Observation, *, masked: bool) -> str:
    """What the prompt shows of a call's observation: whole, or its stub where masked and
    the stub is shorter (a stub longer than the observation would make the prompt longer,
    and move the cached prefix, for nothing)."""
    error = "ERROR: " if seen.is_error else ""
    if masked:
        stub = elided(call.call_id, call.name, seen.size)
        if len(stub.encode()) < seen.size + len(error):
            return stub
    return error + seen.content


def _keep_boundary(
    steps: Sequence[Step], observations: Mapping[str, Observation], view: View, keep: int
) -> int:
    """The last step whose observations can be masked so that at least `keep` of the
    newest stay whole (never below the view's)."""
    seen = 0
    for step in reversed(steps):
        if step.step <= view.through:
            break
        if step.kind is not StepKind.REPLY:
            continue
        if keep <= 0:
            return max(view.masked, step.step)
        seen += sum(1 for c in step.calls if c.call_id in observations)
        if seen >= keep:
            return max(view.masked, step.step - 1)
    return view.masked


def _fewer_whole(
    head: Head,
    steps: Sequence[Step],
    observations: Mapping[str, Observation],
    view: View,
    sent: list[Message],
    tokens: int,
    *,
    keep: int,
    window: int,
    estimate: Estimate,
    then: Sequence[Message] = (),
) -> tuple[View, list[Message], int]:
    """Before a prompt fails for its length, the newest `keep` observations give way: the
    view that masks all but the most of the newest (fewer than `keep`) whose prompt (and
    `then` after it) fits `window`; if none does, the view that masks them all. `sent` is
    `view`'s prompt (with `then`) and `tokens` its estimate: each prompt is estimated once."""
    for whole in range(keep - 1, -1, -1):
        boundary = _keep_boundary(steps, observations, view, whole)
        if boundary <= view.masked:
            continue
        view = View(through=view.through, summary=view.summary, masked=boundary)
        sent = [*build(head, steps, observations, view), *then]
        tokens = estimate(sent)
        if tokens <= window:
            break
    return view, sent, tokens


def _compaction(
    head: Head,
    steps: Sequence[Step],
    observations: Mapping[str, Observation],
    view: View,
    cut: int,
    estimate: Estimate,
    policy: Policy,
) -> Plan:
    """The plan to summarise the steps up to `cut`, asked with the prompt as it stands
    (masked up to the cut at least), so the provider's cache holds most of it; a request
    past the window masks the observations after the cut too, the newest last."""
    masked = View(through=view.through, summary=view.summary, masked=max(view.masked, cut))
    ask = [
        *build(head, steps, observations, masked),
        {"role": "user", "content": SUMMARISE.format(through=cut)},
    ]
    tokens = estimate(ask)
    room = max(policy.window - SUMMARY_ROOM, policy.window // 2)
    if tokens > room:
        request, ask, tokens = _fewer_whole(
            head,
            steps,
            observations,
            masked,
            ask,
            tokens,
            keep=policy.keep,
            window=room,
            estimate=estimate,
            then=ask[-1:],
        )
        # the compaction step records the cut; the request's own masks are its alone
        return Plan(ask, request, tokens, compact_through=cut)
    return Plan(ask, masked, tokens, compact_through=cut)


def _under_target(
    head: Head,
    steps: Sequence[Step],
    observations: Mapping[str, Observation],
    view: View,
    cut: int,
    estimate: Estimate,
    policy: Policy,
    *,
    bound: int | None = None,
) -> bool:
    """Whether a compaction through `cut` could bring the prompt under the target (or
    `bound`): the prompt after it does, with a summary as long as the last one (empty
    before the first: the new one summarises it and more). When the observations kept
    whole pass the target alone, or with the summary beside them, one would leave the
    prompt past it all the same, and one at every step would double the model calls for
    nothing."""
    after = View(through=cut, summary=view.summary or "", masked=max(view.masked, cut))
    limit = policy.limit if bound is None else bound
    return estimate(build(head, steps, observations, after)) <= limit


def _blind(
    head: Head,
    steps: Sequence[Step],
    observations: Mapping[str, Observation],
    view: View,
    masked: View,
    estimate: Estimate,
    policy: Policy,
) -> int | None:
    """Where `masked` (the view the newest observations gave way in) masks the newest one
    too, so the model would not see what its last call returned (nor a `recall` of it),
    the cut of a compaction that leaves only that one's step after it, if the prompt after
    it shows the observation whole within the window: the stubs of older steps, not the
    observation, took the room. None where the newest is whole or no compaction helps."""
    newest = _keep_boundary(steps, observations, view, 1)
    if masked.masked <= newest or newest <= view.through:
        return None
    fits = _under_target(
        head, steps, observations, view, newest, estimate, policy, bound=policy.window
    )
    return newest if fits else None


def plan(
    head: Head,
    steps: Sequence[Step],
    observations: Mapping[str, Observation],
    *,
    estimate: Estimate,
    tools: int = 0,
    by: float = 1.0,
    force: bool = False,
    stored: View | None = None,
) -> Plan:
    """The next THINK's prompt under the session's policy; `tools`: the tokens of the tools'
    schemas every call sends beside the messages, which fill the window as they do (the
    plan's estimates count them); `by`: how many times `estimate` the server counts
    (`scale`), which the plan's estimates are multiplied by; `force`: the model refused the
    last prompt as too long, so compact now whatever the estimate says; `stored`: the
    steps' `stored_view`, where the caller has found it already."""
    estimates = _Estimates(estimate, tools=tools, by=by)
    made = _plan(head, steps, observations, estimate=estimates, force=force, stored=stored)
    return replace(made, unscaled=estimates.unscaled(made.messages))


class _Estimates:
    """The plan's estimator: a prompt's tokens with the schemas', both times `by` rounded
    up, keeping each prompt's unscaled estimate, so the one chosen is not estimated again
    for the estimate its step keeps."""

    def __init__(self, estimate: Estimate, *, tools: int, by: float) -> None:
        self._estimate, self._tools, self._by = estimate, tools, by
        self._scaled_tools = math.ceil(tools * by)
        #: each prompt estimated, by identity (kept, so no other list takes its id)
        self._seen: dict[int, tuple[Sequence[Message], int]] = {}

    def __call__(self, messages: Sequence[Message]) -> int:
        tokens = self._estimate(messages)
        self._seen[id(messages)] = (messages, tokens)
        scaled = tokens if self._by <= 1.0 else math.ceil(tokens * self._by)
        return scaled + self._scaled_tools

    def unscaled(self, messages: Sequence[Message]) -> int:
        """The estimate of `messages` and the schemas, unscaled."""
        seen = self._seen.get(id(messages))
        tokens = seen[1] if seen is not None and seen[0] is messages else self._estimate(messages)
        return tokens + self._tools


def _plan(
    head: Head,
    steps: Sequence[Step],
    observations: Mapping[str, Observation],
    *,
    estimate: Estimate,
    force: bool,
    stored: View | None,
) -> Plan:
    """`plan` with `estimate` counting the schemas and the scale."""
    view = stored_view(steps) if stored is None else stored
    sent = build(head, steps, observations, view)
    policy = policy_for(head)
    if policy is None:
        return Plan(sent, view, estimate(sent))
    tokens = estimate(sent)
    shown = sum(1 for s in steps if s.kind is StepKind.REPLY and s.step > view.through)
    long = shown > policy.span
    if not force and not long and tokens <= policy.limit:
        return Plan(sent, view, tokens)
    boundary = _keep_boundary(steps, observations, view, policy.keep)
    if long and not force and boundary > view.through:
        return _compaction(head, steps, observations, view, boundary, estimate, policy)
    if not force and boundary > view.masked:
        view = View(through=view.through, summary=view.summary, masked=boundary)
        sent = build(head, steps, observations, view)
        tokens = estimate(sent)
        if tokens <= policy.limit:
            return Plan(sent, view, tokens)
    last = max((s.step for s in steps if s.kind is StepKind.REPLY), default=0)
    # forced: keep fewer whole steps each time the model refuses, down to none
    cut = boundary if boundary > view.through else (last if force else view.through)
    if cut > view.through and (
        force or _under_target(head, steps, observations, view, cut, estimate, policy)
    ):
        return _compaction(head, steps, observations, view, cut, estimate, policy)
    if force:
        return Plan(sent, view, tokens, too_long=_too_long(head, steps, view, tokens, policy, True))
    if tokens <= policy.window:
        return Plan(sent, view, tokens)  # past the target, within the window: go on
    # the observations kept whole pass the window: a compaction would leave them whole, so
    # the oldest of them give way first, and a compaction is made only where the prompt
    # left is still past the target and the compaction brings it under (or past the window)
    masked, sent, tokens = _fewer_whole(
        head,
        steps,
        observations,
        view,
        sent,
        tokens,
        keep=policy.keep,
        window=policy.window,
        estimate=estimate,
    )
    if cut > view.through and (
        tokens > policy.window
        or (
            tokens > policy.limit
            and _under_target(head, steps, observations, masked, cut, estimate, policy)
        )
    ):
        return _compaction(head, steps, observations, view, cut, estimate, policy)
    deeper = _blind(head, steps, observations, view, masked, estimate, policy)
    if deeper is not None:
        return _compaction(head, steps, observations, view, deeper, estimate, policy)
    if tokens <= policy.window:
        return Plan(sent, masked, tokens)
    return Plan(
        sent, masked, tokens, too_long=_too_long(head, steps, masked, tokens, policy, False)
    )


#: the most a server's count of a prompt may scale the estimate by (`scale`): a usage far
#: past it is no tokenizer's (a script's made-up numbers, a server that bills other input)
MAX_SCALE = 2.0


def scale(
    head: Head,
    steps: Sequence[Step],
    observations: Mapping[str, Observation],
    *,
    estimate: Estimate,
    tools: int = 0,
) -> float:
    """How many times the estimate the server counted the prompt of the last reply since
    the latest compaction (its `usage.prompt_tokens`), or before the first such reply the
    compaction's own request, at least 1 and at most MAX_SCALE: a tokenizer counts code and
    JSON at fewer characters a token than the estimate, and a policy that trusted the
    estimate would let the prompt the server reads pass the window while its estimate was
    still under the target (the first prompt after a compaction, with the observations it
    kept whole, most of all). 1 where no such step is stored, nor one the session's model
    made (a fork onto it keeps others' replies, `model_since`).

    The step holds the estimate its prompt was sent with (`Step.prompt_estimate`); only a
    reply stored before it was kept has its prompt built again from the steps before it and
    estimated with `estimate`, and `tools` (the schemas' tokens) added (a compaction stored
    without it counts as none)."""
    compaction = next((s for s in reversed(steps) if s.kind is StepKind.COMPACTION), None)
    since = model_since(head)
    last = next(
        (
            s
            for s in reversed(steps)
            if s.step > since and (s.kind is StepKind.REPLY or s is compaction)
        ),
        None,
    )
    if last is None or last.usage.prompt_tokens <= 0:
        return 1.0
    estimated = last.prompt_estimate
    if estimated is None and last.kind is StepKind.COMPACTION:
        return 1.0
    if estimated is None:
        before = [s for s in steps if s.step < last.step]
        seen = stored_view(before)
        view = View(through=seen.through, summary=seen.summary, masked=last.masked_through)
        estimated = estimate(build(head, before, observations, view)) + tools
    return measured(last.usage.prompt_tokens, estimated)


#: the key of a session's config holding the last step a fork kept of a parent on another
#: model: another server's tokenizer counted those replies' prompts, so neither `scale` nor
#: the next call's floor (the last reply's usage) reads them as this model's
MODEL_SINCE = "model_since"


def model_since(head: Head) -> int:
    """The last step whose reply another model made (`MODEL_SINCE`), 0 where every reply
    is the session's model's."""
    found = head.config.get(MODEL_SINCE)
    return found if isinstance(found, int) and not isinstance(found, bool) else 0


def measured(counted: int, estimated: int) -> float:
    """How many times `estimated` (a prompt's estimate, with the schemas sent beside it) the
    server `counted` the prompt (its `usage.prompt_tokens`), at least 1 and at most
    MAX_SCALE; 1 where either is not positive (`scale`)."""
    if counted <= 0 or estimated <= 0:
        return 1.0
    return min(MAX_SCALE, max(1.0, counted / estimated))


#: the key of a graph session's result (its card) holding the scale (`measured`) of the
#: last prompt its nodes sent: a graph's steps keep no prompt estimate for `scale` to read,
#: and a node's first call is fitted and capped by it as an agent's THINK is by `scale`
LEARNED_SCALE = "prompt_scale"


def learned_scale(head: Head) -> float:
    """The scale a graph session's nodes learned (`LEARNED_SCALE` on its card), bounded as
    `measured` bounds it; 1 before any node's call was counted."""
    found = head.result.get(LEARNED_SCALE)
    if isinstance(found, bool) or not isinstance(found, int | float) or not math.isfinite(found):
        return 1.0
    return min(MAX_SCALE, max(1.0, float(found)))


def _too_long(
    head: Head, steps: Sequence[Step], view: View, tokens: int, policy: Policy, force: bool
) -> str:
    """Why the session fails CONTEXT: the prompt as it was last tried, and what was tried
    to shorten it."""
    tried = []
    if view.through:
        tried.append(f"steps 1-{view.through} compacted")
    if any(s.calls for s in steps if s.kind is StepKind.REPLY and view.through < s.step):
        tried.append(
            "every observation since masked" if view.through else "every observation masked"
        )
    return (
        f"the prompt of step {head.step + 1} is about {tokens:,} tokens with "
        + (" and ".join(tried) or "nothing earlier to compact or mask")
        + f", and the model's context window is {policy.window:,}"
        + (" (the model refused it)" if force else "")
        + "; fork it with a larger window (`context_window`) or submit it again with tools "
        "that return less"
    )


def fit(
    messages: list[Message],
    policy: Policy | None,
    *,
    estimate: Estimate,
    tools: int = 0,
    by: float = 1.0,
) -> list[Message]:
    """A graph node's own messages (`ctx.generate`) under the session's policy: past the
    target (with the `tools` tokens of the schemas sent beside them, both times `by`, as
    the server counts: `measured`), the content of every tool message but the newest `keep`
    becomes a stub. The node built them, so there is nothing stored to recall; the same
    messages always fit the same way."""
    if policy is None or _Estimates(estimate, tools=tools, by=by)(messages) <= policy.limit:
        return messages
    outputs = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    old = set(outputs[: len(outputs) - policy.keep] if policy.keep else outputs)
    out = []
    for i, m in enumerate(messages):
        content = str(m.get("content") or "")
        stub = f"[tool output elided: {len(content.encode())} bytes]"
        out.append({**m, "content": stub} if i in old and len(stub) < len(content) else m)
    return out
