"""Plain JSON views of sessions, events and dead letters: what `--json` prints in full and
what the Rich renderer draws, so both always show the same facts."""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from tickwork.fsm.approvals import as_edited
from tickwork.fsm.values import utc_date

if TYPE_CHECKING:
    from tickwork.fsm.values import Event, Head, Session, ToolCall
    from tickwork.store.archived import Entry
    from tickwork.store.dead_letters import DeadLetter
    from tickwork.worker.tools.registry import ChildResult


#: what a terminal or an editor would obey in a session's text (a command's output, a
#: model's reply, a file a call writes): C0 and C1 controls but tab and newline, DEL, and
#: the bidirectional overrides (U+009B is a terminal's CSI, as ESC [ is). Printed text
#: drops them (`render.CONTROLS`), `--json` escapes them (`OBEYED`)
CONTROL_RANGES = ((0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0x202A, 0x202E), (0x2066, 0x2069))

#: what `--json` writes escaped though JSON would not: those controls above DEL (json
#: escapes C0 itself; terminals ignore DEL)
OBEYED = re.compile(
    "[" + "".join(f"{chr(max(a, 0x80))}-{chr(b)}" for a, b in CONTROL_RANGES if b >= 0x80) + "]"
)


def emit(document: Any) -> None:
    """Write one JSON document on stdout: non-ASCII text as it is, but the characters a
    terminal would obey escaped (`OBEYED`); the document reads back the same."""
    text = json.dumps(document, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write(OBEYED.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")
    sys.stdout.flush()


def date(value: datetime | None) -> str | None:
    """A date as every view gives it: ISO 8601 in UTC ending in `Z`, as the heads, steps and
    events (pydantic's) give theirs; None for none. A naive one is taken as UTC."""
    return None if value is None else utc_date(value)


def head(value: Head) -> dict[str, Any]:
    """The head, with `outcome` (what a finished repair achieved; None for other kinds and
    for sessions stored before outcomes) beside its status."""
    from tickwork.fsm.outcomes import outcome_of

    found = outcome_of(value.result)
    data = value.model_dump(mode="json")
    data["outcome"] = found.value if found else None
    return data


def archived_entry(entry: Entry) -> dict[str, Any]:
    """An archived session's row of the archive's index."""
    return {
        "id": entry.session_id,
        "status": entry.status,
        "kind": entry.kind,
        "tenant": entry.tenant,
        "parent_id": entry.parent_id,
        "fork_step": entry.fork_step,
        "submitted_by": entry.submitted_by,
        "created_at": date(entry.created_at),
        "finished_at": date(entry.finished_at),
        "archived_at": date(entry.archived_at),
        "location": entry.location,
    }


def event(event_id: int | None, value: Event) -> dict[str, Any]:
    return {"id": event_id, **value.model_dump(mode="json")}


def session(value: Session) -> dict[str, Any]:
    """The session as a timeline: each step with its calls, their outputs and decisions."""
    from tickwork.fsm.values import EventKind, StepKind

    # the steps whose calls loop detection closed unrun (`fsm.machine.think`)
    looped = {e.data.get("step") for e in value.events if e.kind is EventKind.LOOP_INTERVENTION}
    # the tools compactions' models called beside their summaries, which did not run
    ignored = {
        e.data.get("step"): e.data["ignored_calls"]
        for e in value.events
        if e.kind is EventKind.COMPACTED and e.data.get("ignored_calls")
    }
    # the prompts the model refused as too long, by the step they were for: a compaction
    # stored as that step was made at once because of the refusal
    too_long = {
        e.data.get("step"): e.data
        for e in value.events
        if e.kind is EventKind.CONTEXT_OVERFLOW and not e.data.get("node")
    }
    steps = []
    for step in value.steps:
        data = step.model_dump(mode="json", exclude={"calls", "usage"})
        data.update(
            prompt_tokens=step.usage.prompt_tokens,
            completion_tokens=step.usage.completion_tokens,
            cached_prompt_tokens=step.usage.cached_prompt_tokens,
            cache_creation_tokens=step.usage.cache_creation_tokens,
            tokens=step.usage.total,
            calls=[_call(value, c, looped=step.step in looped) for c in step.calls],
        )
        if step.step in ignored:
            data["ignored_calls"] = ignored[step.step]
        if step.kind is StepKind.COMPACTION and step.step in too_long:
            data["refused_prompt"] = {
                k: too_long[step.step].get(k)
                for k in ("prompt_tokens_estimate", "window", "stated_window")
            }
        steps.append(data)
    return {
        "head": head(value.head),
        "steps": steps,
        "totals": {
            "steps": len(value.steps),
            "calls": sum(len(s.calls) for s in value.steps),
            "prompt_tokens": sum(s.usage.prompt_tokens for s in value.steps),
            "completion_tokens": sum(s.usage.completion_tokens for s in value.steps),
            "cached_prompt_tokens": sum(s.usage.cached_prompt_tokens for s in value.steps),
            "cache_creation_tokens": sum(s.usage.cache_creation_tokens for s in value.steps),
            "tokens": sum(s.usage.total for s in value.steps),
            "cost_usd": sum(s.cost_usd for s in value.steps),
            "latency_ms": sum(s.latency_ms for s in value.steps),
        },
        "events": [event(None, e) for e in value.events],
        "forked_from": forked_from(value),
        "refused": refused_ticks(value),
    }


def refused_ticks(value: Session) -> list[dict[str, Any]]:
    """The workers that took the tick of a session waiting for one, at the version it is
    at, and could not run it (`tick_refused`: its job kind or graph version is not theirs,
    or they do not see its files),
    with when and why; empty once it moved on or ended."""
    from tickwork.fsm.values import EventKind

    if not value.head.status.moving:
        return []
    return [
        {"worker": e.data.get("worker"), "at": date(e.at), "reason": e.data.get("reason")}
        for e in value.events
        if e.kind is EventKind.TICK_REFUSED and e.data.get("version") == value.head.version
    ]


def forked_from(value: Session) -> dict[str, Any] | None:
    """What a fork was made from (session and step), by whom, when, and the patch it
    applied, from its `forked` event; None for a session that is not a fork."""
    return fork_origin(value.events)


def fork_origin(found: Iterable[Event]) -> dict[str, Any] | None:
    """`forked_from` of the session whose events (or first events) are `found`."""
    from tickwork.fsm.values import EventKind

    for e in found:
        if e.kind is EventKind.FORKED:
            return {
                "session_id": e.data.get("parent_id"),
                "step": e.data.get("from_step"),
                "by": e.data.get("by"),
                "at": date(e.at),
                "patch": e.data.get("patch") or {},
            }
    return None


def shown(
    value: Session,
    *,
    lease: dict[str, Any] | None,
    found_forks: list[dict[str, Any]],
    earlier: list[dict[str, Any]],
    tree: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What `show --json` and `GET /api/v1/sessions/{id}` give, one view for both: the
    session as a timeline with who holds its lease, its forks (`found_forks`, live or
    archived, as the caller may see them), the tree it belongs to and, for a fork of a fork,
    the `earlier` patches of its chain (`Reads.earlier_patches`, as `dead_letter_shown`
    gives them): `forked_from` holds its own patch only."""
    view = session(value)
    view["lease"] = lease
    view["forks"] = forks(found_forks)
    view["tree"] = tree
    view["earlier_patches"] = earlier
    return view


def _call(whole: Session, call: ToolCall, *, looped: bool = False) -> dict[str, Any]:
    """The call with its observation and decision; `blocked` if loop detection closed it
    without running it (its state is done: it has its observation, the intervention)."""
    data = call.model_dump(mode="json")
    seen = whole.observation(call.call_id)
    data["blocked"] = bool(looped and seen is not None and seen.is_error)
    decided = whole.decision(call.call_id)
    data["observation"] = (
        None if seen is None else seen.model_dump(mode="json", exclude={"call_id"})
    )
    data["decision"] = (
        None if decided is None else decided.model_dump(mode="json", exclude={"call_id"})
    )
    # "as edited by bob": the decision's arguments are those it ran (or runs) with
    data["as_edited"] = as_edited(decided)
    return data


def dead_letter(value: DeadLetter, *, snapshot: bool = False) -> dict[str, Any]:
    """The dead letter; with `snapshot`, its session as a timeline under `session`."""
    from tickwork.store.dead_letters import describe

    data = value.model_dump(mode="json", exclude={"snapshot"})
    data["resolution"] = _resolution(data["resolution"])
    # in words from the resolution as shown (its dates in Z): the same through the API
    data["closed"] = (
        describe(data["resolution"]).removeprefix("was already ") if value.resolution else None
    )
    if snapshot:
        data["session"] = session(value.session())
    return data


def dead_letter_shown(
    letter: DeadLetter, *, found_forks: list[dict[str, Any]], earlier: list[dict[str, Any]]
) -> dict[str, Any]:
    """What `dlq show --json` and `GET /api/v1/dead-letters/{key}` give, one view for both:
    the dead letter with its session, the budgets a fork is proposed (the page's fork form
    proposes them), the session's forks (`found_forks`, live or archived, as the caller may
    see them) and, for a fork of a fork, the `earlier` patches of its chain."""
    from tickwork.remedies import fork_budgets

    view = dead_letter(letter, snapshot=True)
    view["fork_budgets"] = fork_budgets(view)
    view["forks"] = forks(found_forks)
    view["earlier_patches"] = earlier
    return view


def _resolution(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """A dead letter's resolution with its dates (its `at`, its forks' `at`) as every view
    gives them: the store keeps them as the text they were written in, `+00:00`."""

    def dated(at: Any) -> Any:
        return date(datetime.fromisoformat(at)) if isinstance(at, str) else at

    if not found:
        return found
    shown = {**found, **({"at": dated(found["at"])} if "at" in found else {})}
    if isinstance(found.get("forks"), list):
        shown["forks"] = [
            {**f, "at": dated(f["at"])} if isinstance(f, dict) and "at" in f else f
            for f in found["forks"]
        ]
    return shown


def lease(held: tuple[str, datetime] | None, *, now: datetime) -> dict[str, Any] | None:
    """Who holds a session's lease, until when, and whether that time has passed (the
    worker died: the relay revives the session)."""
    if held is None:
        return None
    owner, expires = held
    return {"owner": owner, "expires_at": date(expires), "expired": expires < now}


def forks(found: list[dict[str, Any]], *, archived: bool = False) -> list[dict[str, Any]]:
    """The forks of a session as `show` lists them: id, step, status, when (who made each
    is for the API's own-only check, `tenancy.seen_forks`); with `archived`, whether
    retention archived each (as the API's listing of forks says)."""
    hidden = {"submitted_by"} if archived else {"submitted_by", "archived"}
    shown = [{k: v for k, v in f.items() if k not in hidden} for f in found]
    return [{**f, "created_at": date(f["created_at"])} for f in shown]


def tree(root: Head, descendants: list[Head]) -> dict[str, Any]:
    """A session tree (docs/DESIGN.md section 16) as nested nodes from `root`: each with
    its id, role, status, outcome, cost and children, in spawn order."""
    from tickwork.fsm.outcomes import outcome_of

    below: dict[str, list[Head]] = {}
    for h in descendants:
        below.setdefault(h.parent_id or "", []).append(h)

    def node(h: Head) -> dict[str, Any]:
        found = outcome_of(h.result)
        return {
            "id": h.id,
            # a child's role is its head's; a root's, taken from its input, its config's
            "role": h.role or str(h.config.get("role") or ""),
            "status": h.status.value,
            "outcome": found.value if found else None,
            "error_code": h.error_code.value if h.error_code else None,
            "cost_usd": h.cost_usd,
            "step": h.step,
            "children": [node(c) for c in below.get(h.id, ())],
        }

    return node(root)


def job(value: Head) -> dict[str, str] | None:
    """What a repair job works on, for approval cards: its source, goal and test command."""
    config = value.config
    if not isinstance(config.get("source"), dict):
        return None
    from tickwork.worker.files.sources import describe

    return {
        "source": describe(config["source"]),
        "goal": str(config.get("goal") or ""),
        "test_command": str(config.get("test_command") or ""),
    }


class Previewing(Protocol):
    """What `waiting_view` reads previews through: the local client (`tickwork.reads.Reads`)."""

    def file_reader(self, head: Head) -> Callable[[str], bytes | None] | None: ...

    def children(self, head: Head) -> list[ChildResult]: ...


def waiting_view(
    value: Session, client: Previewing | None = None, *, previewed: bool = True
) -> dict[str, Any]:
    """A waiting session for the approvals page (`GET /approvals/{id}`, the clients'
    `waiting`): its calls with previews (read from the session's stored files, and its
    children's patches; None for each unless `previewed`, or without a `client`)."""
    from tickwork.api import previews
    from tickwork.fsm.values import EventKind

    current = value.head
    read = None if client is None else client.file_reader(current)
    children = None if client is None else functools.partial(client.children, current)
    view = session(value)
    asked = [e.at for e in value.events if e.kind is EventKind.APPROVAL_REQUESTED]
    calls, thought = [], ""
    for step in view["steps"]:
        for call in step["calls"]:
            if call["call_id"] in current.awaiting:
                found = value.call(call["call_id"])
                decided = value.decision(call["call_id"])  # an in-doubt call's edit
                call["preview"] = (
                    previews.preview(found, read, children, decided)
                    if found is not None and previewed
                    else None
                )
                calls.append(call)
                thought = step["thought"]
    return {
        "session": head(current),
        # a child's approval names the root of its tree (docs/DESIGN.md section 16)
        "root": current.root_id,
        "job": job(current),
        "thought": thought,
        "calls": calls,
        # null once it waits for nobody: its last request is history, not a wait
        "waiting_since": date(asked[-1]) if asked and current.awaiting else None,
    }
