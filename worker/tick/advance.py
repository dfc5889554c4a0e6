"""One tick: claim a session, advance exactly one micro-phase, save, publish the next tick.

`advance` returns a `TickReport` of what it did and tells the runtime's observers
(`tickwork.worker.observers.report`): metrics, webhooks and tracing hang on that, not on the tick.
"""

from __future__ import annotations

import errno
import functools
import inspect
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickwork.fsm import budgets, context, machine
from tickwork.fsm.errors import (
    ArtifactsUnavailable,
    BlobCorrupt,
    ClaimLost,
    ContextTooLong,
    GraphVersionMismatch,
    InvalidToolArguments,
    ModelError,
    StoreError,
)
from tickwork.fsm.machine import Change, Compact, RunTool
from tickwork.fsm.values import (
    ErrorCode,
    Event,
    EventKind,
    Head,
    ModelReply,
    Status,
    idempotency_key,
)
from tickwork.store import Claimed
from tickwork.store.files import FileChange
from tickwork.worker.config import release
from tickwork.worker.config.secrets import mask_change
from tickwork.worker.files import environments
from tickwork.worker.files.workspaces import (
    READ_ONLY_TOOLS,
    WorkingCopy,
    session_files,
    written_paths,
)
from tickwork.worker.models import ModelSettings, pricing
from tickwork.worker.models.base import estimate_prompt as estimate
from tickwork.worker.observers.report import ModelCall, Outcome, Phase, TickReport, ToolRun
from tickwork.worker.sandbox.runner import sandbox_of
from tickwork.worker.tick import graphs
from tickwork.worker.tick.runtime import Runtime, Stops, owner_name
from tickwork.worker.tools.registry import ToolContext, ToolRegistry, run_tool

__all__ = ["Outcome", "TickFiles", "TickReport", "advance"]

log = logging.getLogger("tickwork.tick")


@dataclass
class _Notes:
    """What the tick did so far, for its report."""

    session_id: str
    version: int
    started_ns: int = field(default_factory=time.time_ns)
    phase: Phase = Phase.NONE
    claim_s: float = 0.0
    io_s: float = 0.0
    save_s: float = 0.0
    claimed: Head | None = None
    change: Change | None = None
    head: Head | None = None
    model: ModelCall | None = None
    tool: ToolRun | None = None

    def report(self, outcome: Outcome, *, error: str = "") -> TickReport:
        return TickReport(
            session_id=self.session_id,
            version=self.version,
            phase=self.phase,
            outcome=outcome,
            started_ns=self.started_ns,
            ended_ns=time.time_ns(),
            claim_s=self.claim_s,
            io_s=self.io_s,
            save_s=self.save_s,
            claimed=self.claimed,
            change=self.change,
            head=self.head,
            model=self.model,
            tool=self.tool,
            error=error,
        )


def advance(rt: Runtime, session_id: str, version: int) -> TickReport:
    """Run one tick of `session_id` from `version`; the report goes to `rt.observers`
    (also when the tick raises: then with outcome ERROR, and the exception goes on)."""
    notes = _Notes(session_id, version)
    try:
        outcome = _tick(rt, notes)
    except BaseException as exc:
        rt.observers.notify(notes.report(Outcome.ERROR, error=type(exc).__name__))
        raise
    report = notes.report(outcome)
    rt.observers.notify(report)
    return report


def _tick(rt: Runtime, notes: _Notes) -> Outcome:
    owner = owner_name()
    started = time.perf_counter()
    claimed = rt.store.claim(
        notes.session_id,
        notes.version,
        owner=owner,
        now=rt.clock(),
        lease_s=rt.settings.lease_s,
        level=rt.level,
    )
    notes.claim_s = time.perf_counter() - started
    if claimed is None:
        _say_if_refused(rt, notes.session_id, notes.version)
        return Outcome.DROPPED
    notes.claimed = claimed.head
    if graphs.is_graph(claimed.head):
        notes.phase = Phase.NODE
    else:
        notes.phase = Phase.THINK if claimed.head.status is Status.READY else Phase.EXECUTE
    files = TickFiles(rt, claimed.head)
    try:
        return _advance(rt, claimed, notes, owner, files)
    finally:
        files.release()


def _say_if_refused(rt: Runtime, session_id: str, version: int) -> None:
    """Log it if the claim was refused for the session's runtime level, not for a stale tick.

    Refused like a graph version this worker lacks, but in the claim itself: the session is
    not touched (no lease, its outbox row kept) and the relay offers the tick again after
    its usual wait (`offer_again`), until a worker of the session's level takes it."""
    try:
        head = rt.store.get(session_id)
    except Exception:
        return  # gone, or the database is away: the tick is dropped either way
    if head.version == version and head.runtime_level > rt.level:
        rt.store.offer_again(session_id, version, now=rt.clock())
        log.error(
            "session %s needs runtime level %d; this worker (tickwork %s) runs level %d. The "
            "tick is refused and the session left for a worker of a later release (see "
            "ops/RUNBOOK.md, Upgrades)",
            session_id,
            head.runtime_level,
            release.version(),
            rt.level,
        )


def _advance(rt: Runtime, claimed: Claimed, notes: _Notes, owner: str, files: TickFiles) -> Outcome:
    session_id, version = claimed.head.id, notes.version
    started = time.perf_counter()
    try:
        with rt.leases.hold(session_id, version, owner):
            # issue 15: a graph session runs one node a tick (worker/tick/graphs.py)
            change = (
                graphs.tick(rt, claimed)
                if graphs.is_graph(claimed.head)
                else _phase(rt, claimed, files, notes)
            )
    except ClaimLost:
        return Outcome.LOST
    except GraphVersionMismatch as exc:
        # refused, not failed: nothing is saved, the lease runs out and the relay offers the
        # tick again, to a worker that has the session's graph version
        log.error("%s", exc)
        return Outcome.DROPPED
    except (StoreError, ArtifactsUnavailable):
        # the database or the artifact store is away: the lease expires and the relay runs
        # this tick again (on files the store holds: nothing of this attempt was saved)
        raise
    except BlobCorrupt as exc:
        # no tier holds a good copy: running on bad files would be worse than stopping
        log.error("session %s v%d: %s", session_id, version, exc)
        files.discard()
        change = machine.fail(
            claimed.head,
            ErrorCode.ARTIFACT_CORRUPT,
            exc.message,
            now=rt.clock(),
            open_calls=claimed.calls,
        )
    except Exception as exc:
        if disk_full(exc):
            # the worker's own writes (this session's working copy, the blob cache) found the
            # workspaces filesystem full, perhaps filled by another session: not this
            # session's fault; nothing is saved, the lease runs out and the tick runs again
            log.error(
                "tick of session %s v%d left to run again later: the workspaces filesystem "
                "%s is full (%s); free space there or raise TICKWORK_DISK_RESERVE_BYTES",
                session_id,
                version,
                rt.settings.workspaces_path,
                exc,
            )
            files.discard()
            return Outcome.DROPPED
        change = _internal(rt, claimed, files, exc)
    finally:
        notes.io_s = time.perf_counter() - started
    change = mask_change(change, rt.masker)
    notes.change = change
    started = time.perf_counter()
    try:
        head = rt.store.save(
            change, version=version, owner=owner, now=rt.clock(), files=files.recorded
        )
    except ClaimLost:
        return Outcome.LOST
    finally:
        notes.save_s = time.perf_counter() - started
    notes.head = head
    files.saved(head)
    after_commit(rt, change, head)
    return Outcome.SAVED


def _internal(rt: Runtime, claimed: Claimed, files: TickFiles, exc: Exception) -> Change:
    """A broken job kind, tool registry or model factory: fail loudly, keep everything."""
    log.exception("tick of session %s v%d failed", claimed.head.id, claimed.head.version)
    files.discard()  # what the tool may have half done is not saved with a failure
    return machine.fail(
        claimed.head,
        ErrorCode.INTERNAL,
        f"{type(exc).__name__}: {exc}",
        now=rt.clock(),
        open_calls=claimed.calls,
    )


class TickFiles:
    """The claimed session's files during one tick: its working copy, checked out when a
    tool (or the job's finish) needs it, and what the tick changed in it."""

    def __init__(self, rt: Runtime, head: Head) -> None:
        self.rt, self.head = rt, head
        self.copy: WorkingCopy | None = None
        #: the change to save with the tick
        self.recorded: FileChange | None = None
        self._changes = False

    def open(self, *, changes: bool) -> Path | None:
        """The directory the tools work in; marked dirty if they may change it."""
        if session_files(self.head) is None:
            legacy = self.head.config.get("workspace")  # a kind that names its own folder
            return None if legacy is None else Path(legacy)
        if self.copy is None:
            self.copy = self.rt.workspaces.checkout(self.head)
        if changes and not self._changes:
            self._changes = True
            self.copy.begin()
        return self.copy.path

    def environment(self, head: Head | None = None) -> Path | None:
        """This host's copy of the session's environment (for /env), if it has one."""
        return environments.mounted(self.rt, head or self.head)

    def record(self, *, step: int, call_id: str, paths: list[str] | None = None) -> None:
        if self.copy is not None and self._changes:
            self.recorded = self.copy.record(step=step, call_id=call_id, paths=paths)

    def saved(self, head: Head) -> None:
        if self.copy is not None:
            try:
                self.copy.saved()
            except OSError as exc:
                if not disk_full(exc):
                    raise
                # the tick is saved; the copy stays marked dirty and is rebuilt next time
                log.warning(
                    "session %s: the working copy's state could not be written (%s); it is "
                    "rebuilt at its next tick",
                    head.id,
                    exc,
                )
        if head.status.terminal and session_files(head) is not None:
            self.release()
            self.rt.workspaces.drop(head.id)

    def discard(self) -> None:
        """Save nothing of the tick's files; the copy stays marked dirty if it was."""
        self.recorded = None
        self.release()

    def release(self) -> None:
        if self.copy is not None:
            self.copy.release()
            self.copy = None


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` says a filesystem is full (or a disk quota reached)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _finish(job_finish: Any, head: Head, files: TickFiles) -> dict[str, Any]:
    """Call a job kind's finish, giving it the tick's files if it takes them."""
    if "files" in inspect.signature(job_finish).parameters:
        result: dict[str, Any] = job_finish(head, files=files)
        return result
    legacy: dict[str, Any] = job_finish(head)
    return legacy


def after_commit(rt: Runtime, change: Change, head: Head) -> None:
    if head.status.runnable and change.delay_s > 0:
        # a delayed tick waits in the outbox; the relay publishes it when due, so no worker
        # holds an unacknowledged countdown message that the broker would time out
        log.info(
            "session %s v%d waits %.3gs for its next tick", head.id, head.version, change.delay_s
        )
    elif head.status.runnable:
        rate = rt.settings.drop_publish_rate
        if rate and rt.jitter() < rate:
            log.warning("chaos: dropped the tick of %s v%d after its commit", head.id, head.version)
            return
        rt.publish(head.id, head.version)
    elif head.status is Status.FAILED:
        try:
            rt.publish_dead_letter(head.id, head.error_code or "", head.error_message)
        except Exception as exc:
            log.warning("could not announce dead letter %s: %s", head.id, exc)


def _phase(rt: Runtime, claimed: Claimed, files: TickFiles, notes: _Notes) -> Change:
    if claimed.head.status is Status.READY:
        return _think(rt, claimed, files, notes)
    return _execute(rt, claimed, files, notes)


def _think(rt: Runtime, claimed: Claimed, files: TickFiles, notes: _Notes) -> Change:
    head = claimed.head
    prompt = context.plan(head, claimed.steps, claimed.observations, estimate=estimate)
    messages = prompt.messages
    stored = context.stored_view(claimed.steps)
    last = claimed.steps[-1] if claimed.steps else None
    ahead = pricing.next_call(
        messages,
        # what the last call read is a floor only while the prompt is the one it grew from
        last=last.usage if last is not None and prompt.view == stored else None,
        price=pricing.session_price(
            head.model, head.config, rt.settings.prices, providers=rt.providers
        ),
    )
    before = machine.start_think(head, now=rt.clock(), next_call=ahead, plan=prompt)
    if isinstance(before, Change):
        return before
    if machine.needs_environment(head):
        # built (or waited for) in a tick of its own; found ready, it is recorded and the
        # model is called in this same tick
        found = environments.prepare(rt, head)
        if isinstance(found, Change):
            return found
        head = found
    # the budget is a bound, not an estimate: the call may write no more than what is left
    cap = budgets.completion_cap(head, ahead)
    model = rt.model(head.model)
    tools = rt.jobs.tools(head.kind)
    schemas = _schemas(tools, head)
    if isinstance(before, Compact):
        return _compact(rt, head, prompt, schemas, notes, cap.tokens)
    job = rt.jobs.get(head.kind)
    asked = time.time_ns()
    try:
        reply = model.generate(
            messages,
            schemas,
            ModelSettings(timeout_s=rt.settings.model_timeout_s, max_tokens=cap.tokens),
        )
    except ContextTooLong as exc:
        # the model's window is smaller than the estimate thought: compact at once, and the
        # next tick tries again with the shorter transcript
        log.info("session %s: %s; compacting", head.id, exc)
        forced = context.plan(
            head, claimed.steps, claimed.observations, estimate=estimate, force=True
        )
        if forced.too_long is not None or forced.compact_through is None:
            # nothing to compact (or no policy: a session stored before 0.2.0) fits it
            why = forced.too_long or "the session has no context policy to compact under"
            failed = machine.fail(head, ErrorCode.CONTEXT, f"{why}: {exc}", now=rt.clock())
            notes.model = _model_failed(head.model, asked, messages, failed.head, str(exc))
            return failed
        return _compact(rt, head, forced, schemas, notes, cap.tokens)
    except ModelError as exc:
        return _model_error(rt, head, exc, asked, messages, notes)
    except Exception as exc:
        notes.model = ModelCall(
            spec=head.model,
            started_ns=asked,
            ended_ns=time.time_ns(),
            outcome="failed",
            error=f"{type(exc).__name__}: {exc}",
            messages=tuple(messages),
        )
        raise
    cut = budgets.cut_at(cap, ahead) if reply.truncated else None
    if not reply.calls and not reply.content.strip() and cut is None:
        # no answer and nothing to do: a glitch of the server, not the session's answer
        # (unless the budget's cap cut it, e.g. while a reasoning model was still thinking:
        # then it is billed, recorded and ends the session)
        why = "the model returned an empty reply (no content and no tool calls)"
        failed = machine.model_failed(
            head, error=why, transient=True, now=rt.clock(), jitter=rt.jitter()
        )
        notes.model = _model_failed(head.model, asked, messages, failed.head, why)
        return failed
    answered = time.time_ns()
    cost = _cost(rt, head, reply)
    change = machine.think(
        head,
        reply,
        now=rt.clock(),
        cost_usd=cost,
        trace_id=uuid.uuid4().hex,
        recent=claimed.recent,
        rules=tools.rules(),
        cut=cut,
        masked_through=prompt.view.masked,
    )
    notes.model = ModelCall(
        spec=head.model,
        started_ns=asked,
        ended_ns=answered,
        outcome="ok",
        response_model=reply.model or "",
        usage=reply.usage,
        cost_usd=cost,
        messages=tuple(messages),
        max_tokens=cap.tokens,
    )
    if change.head.status is Status.COMPLETED and job.finish is not None:
        result = _finish(job.finish, change.head, files)
        change = change.model_copy(
            update={
                "head": change.head.model_copy(update={"result": {**change.head.result, **result}}),
                "events": _with_outcome(change.events, result),
            }
        )
    return change


def _with_outcome(events: tuple[Event, ...], result: dict[str, Any]) -> tuple[Event, ...]:
    """The `completed` event says what the job achieved (a repair's outcome), so whoever
    follows the events (`watch`, the page's stream) learns it with the end."""
    outcome = result.get("outcome")
    if not isinstance(outcome, str):
        return events
    return tuple(
        e.model_copy(update={"data": {**e.data, "outcome": outcome}})
        if e.kind is EventKind.COMPLETED
        else e
        for e in events
    )


def _schemas(tools: ToolRegistry, head: Head) -> list[dict[str, Any]]:
    """The tools the model is offered: the session's, and `recall` under a context policy
    (an elided observation names it)."""
    schemas = tools.schemas(head.config.get("tools"))
    if context.policy_of(head.config) is not None and context.RECALL not in tools:
        schemas.append(RECALL_SCHEMA)
    return schemas


#: the `recall` tool's schema; `_execute` answers it from the store, running nothing
RECALL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": context.RECALL,
        "description": (
            "Show again the whole output of an earlier tool call whose observation was "
            "elided from the conversation; nothing is run again."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "call_id": {"type": "string", "description": "The call's id, as the stub names it."}
            },
            "required": ["call_id"],
            "additionalProperties": False,
        },
    },
}


def _cost(rt: Runtime, head: Head, reply: ModelReply) -> float:
    return pricing.call_cost(
        head.model,
        head.config,
        reply.model,
        reply.usage,
        rt.settings.prices,
        providers=rt.providers,
    )


def _compact(
    rt: Runtime,
    head: Head,
    prompt: context.Plan,
    schemas: list[dict[str, Any]],
    notes: _Notes,
    max_tokens: int | None,
) -> Change:
    """The compaction micro-phase: one model call that summarises the steps up to the
    plan's cut; saved as a step of its own by the usual compare-and-swap, so a tick that
    runs again after a kill cannot store a second one. `max_tokens`: the budgets' cap."""
    assert prompt.compact_through is not None
    model = rt.model(head.model)
    asked = time.time_ns()
    messages = prompt.messages
    notes.phase = Phase.COMPACT
    try:
        # the same tools as every THINK: they are part of the prefix a provider caches
        reply = model.generate(
            messages,
            schemas,
            ModelSettings(timeout_s=rt.settings.model_timeout_s, max_tokens=max_tokens),
        )
    except ContextTooLong as exc:
        why = f"compacting steps 1-{prompt.compact_through} was refused as too long too: {exc}"
        failed = machine.fail(head, ErrorCode.CONTEXT, why, now=rt.clock())
        notes.model = _model_failed(head.model, asked, messages, failed.head, str(exc))
        return failed
    except ModelError as exc:
        return _model_error(rt, head, exc, asked, messages, notes)
    if not reply.content.strip():
        why = "the model returned an empty summary for a compaction"
        failed = machine.model_failed(
            head, error=why, transient=True, now=rt.clock(), jitter=rt.jitter()
        )
        notes.model = _model_failed(head.model, asked, messages, failed.head, why)
        return failed
    cost = _cost(rt, head, reply)
    notes.model = ModelCall(
        spec=head.model,
        started_ns=asked,
        ended_ns=time.time_ns(),
        outcome="ok",
        response_model=reply.model or "",
        usage=reply.usage,
        cost_usd=cost,
        messages=tuple(messages),
    )
    return machine.compacted(
        head,
        reply,
        through=prompt.compact_through,
        now=rt.clock(),
        cost_usd=cost,
        trace_id=uuid.uuid4().hex,
    )


def _model_failed(spec: str, asked: int, messages: list[Any], after: Head, error: str) -> ModelCall:
    """A failed model call: `retry` if the session tries again later, else `failed`."""
    return ModelCall(
        spec=spec,
        started_ns=asked,
        ended_ns=time.time_ns(),
        outcome="retry" if after.status.runnable and after.error_code is None else "failed",
        error=error,
        messages=tuple(messages),
    )


def _model_error(
    rt: Runtime, head: Head, exc: ModelError, asked: int, messages: list[Any], notes: _Notes
) -> Change:
    """A model call that raised a ModelError: the machine retries it later or fails the
    session (a server's Retry-After capped), and the call is noted for the tick's report."""
    failed = machine.model_failed(
        head,
        error=str(exc),
        transient=exc.transient,
        now=rt.clock(),
        jitter=rt.jitter(),
        retry_after_s=_capped(rt, head.id, exc.retry_after_s),
    )
    notes.model = _model_failed(head.model, asked, messages, failed.head, str(exc))
    return failed


def _capped(rt: Runtime, session_id: str, retry_after_s: float | None) -> float | None:
    """A model's Retry-After, at most TICKWORK_MAX_RETRY_DELAY_S."""
    cap = rt.settings.max_retry_delay_s
    if retry_after_s is not None and retry_after_s > cap:
        log.warning(
            "session %s: the model asked to wait %gs; waiting TICKWORK_MAX_RETRY_DELAY_S=%gs",
            session_id,
            retry_after_s,
            cap,
        )
        return cap
    return retry_after_s


def _recall(rt: Runtime, head: Head, arguments: dict[str, Any]) -> tuple[str, bool]:
    """The `recall` tool: a stored observation of this session, read from the store."""
    wanted = arguments.get("call_id")
    if not isinstance(wanted, str) or not wanted.strip():
        return 'recall takes {"call_id": "<id>"}, the id an elided observation names', True
    found = rt.store.observation(head.id, wanted.strip())
    if found is None:
        return (
            f"no call {wanted.strip()[:80]!r} with an output in this session; use the id an "
            "elided observation names, e.g. s12c0",
            True,
        )
    return (f"ERROR: {found.content}" if found.is_error else found.content), False


def _execute(rt: Runtime, claimed: Claimed, files: TickFiles, notes: _Notes) -> Change:
    head = claimed.head
    tools = rt.jobs.tools(head.kind)
    upcoming = machine.next_call(claimed.calls)
    tool = tools.get(upcoming.name) if upcoming and upcoming.name in tools else None
    plan = machine.start_execute(
        head,
        claimed.calls,
        claimed.decisions,
        idempotent=tool.idempotent if tool else True,
        now=rt.clock(),
    )
    if not isinstance(plan, RunTool):
        return plan
    call = plan.call
    began = time.time_ns()

    def finished(
        output: str, *, is_error: bool, duration_ms: float = 0.0, arguments: Any = None
    ) -> Change:
        notes.tool = ToolRun(
            call_id=call.call_id,
            name=call.name,
            started_ns=began,
            ended_ns=time.time_ns(),
            is_error=is_error,
            arguments=plan.arguments if arguments is None else arguments,
        )
        return machine.tool_finished(
            head,
            claimed.calls,
            call,
            output=output,
            is_error=is_error,
            duration_ms=duration_ms,
            now=rt.clock(),
        )

    if tool is None and call.name == context.RECALL and context.policy_of(head.config):
        output, is_error = _recall(rt, head, plan.arguments)
        return finished(output, is_error=is_error)
    if tool is None:
        return finished(
            f"unknown tool {call.name!r}; the tools are: {', '.join(tools.names())}", is_error=True
        )
    try:
        arguments = tool.validate(plan.arguments)
    except InvalidToolArguments as exc:
        return finished(str(exc), is_error=True)
    # the files first: a copy that cannot be made leaves the call unstarted, not in doubt
    workspace = files.open(changes=tool.name not in READ_ONLY_TOOLS)
    environment = files.environment()  # unpacked before the call starts, like the files
    rt.store.start_call(
        head.id, head.version, call, owner=claimed.owner, now=rt.clock(), rerun=plan.rerun
    )
    began = time.time_ns()
    lease = functools.partial(rt.leases.lost, head.id, head.version)
    with Stops(
        rt.store, head.id, every_s=rt.settings.stop_poll_s, clock=rt.clock, lease=lease
    ) as stop:
        tool_context = ToolContext(
            session_id=head.id,
            call_id=call.call_id,
            step=call.step,
            idempotency_key=idempotency_key(head.id, call.step, call.call_id),
            workspace=workspace,
            config=head.config,
            timeout_s=min(tool.timeout_s, rt.settings.longest_call_s),  # fits the broker
            stop=stop,
            sandbox=sandbox_of(rt.settings),
            environment=environment,
        )
        result = run_tool(
            tool, arguments, tool_context, max_output_chars=rt.settings.max_output_chars
        )
    files.record(step=call.step, call_id=call.call_id, paths=written_paths(tool.name, arguments))
    return finished(
        result.output,
        is_error=result.is_error,
        duration_ms=result.duration_ms,
        arguments=arguments,
    )
