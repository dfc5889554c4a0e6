"""One tick: claim a session, advance exactly one micro-phase, save, publish the next tick.

The micro-phase is the session kind's runner's (`runner_for`: the agent loop's or a
graph's, `tickwork.worker.tick.frame.Runner`), picked once from the claimed head; what is
around it (the claim, the lease, the failures that fail the session or leave the tick to
run again, the save, the next tick) is the same for every kind.

`advance` returns a `TickReport` of what it did and tells the runtime's observers
(`tickwork.worker.observers.report`): metrics, webhooks and tracing hang on that, not on the tick.
"""

from __future__ import annotations

import contextlib
import logging
import time

from tickwork.fsm import machine, transitions
from tickwork.fsm.budgets import deadline_passed
from tickwork.fsm.errors import (
    ArtifactsUnavailable,
    BlobCorrupt,
    BlobMissing,
    CancelledMeanwhile,
    ClaimLost,
    GraphVersionMismatch,
    SessionFinished,
    StoreError,
    TreeFull,
)
from tickwork.fsm.joins import JoinMode
from tickwork.fsm.kinds import SessionKind, kind_of
from tickwork.fsm.transitions import Change
from tickwork.fsm.values import ErrorCode, Head, Status
from tickwork.worker.config import release
from tickwork.worker.config.process import node_name
from tickwork.worker.config.secrets import mask, mask_change
from tickwork.worker.observers.report import Outcome, TickReport
from tickwork.worker.tick.agent import AgentRunner
from tickwork.worker.tick.files import TickFiles, disk_full
from tickwork.worker.tick.frame import Runner, Tick
from tickwork.worker.tick.graphs import GraphRunner
from tickwork.worker.tick.runtime import Runtime

__all__ = ["RUNNERS", "Outcome", "TickFiles", "TickReport", "advance", "runner_for"]

log = logging.getLogger("tickwork.tick")


#: the runner of each kind of session, picked once per tick from the claimed head
RUNNERS: dict[SessionKind, Runner] = {
    SessionKind.AGENT: AgentRunner(),
    SessionKind.GRAPH: GraphRunner(),
}


def runner_for(head: Head) -> Runner:
    """The runner of the session's kind (`tickwork.fsm.kinds.kind_of`)."""
    return RUNNERS[kind_of(head)]


def advance(rt: Runtime, session_id: str, version: int, *, node: str | None = None) -> TickReport:
    """Run one tick of `session_id` from `version`, leased in the name of the Celery worker
    `node` (its `--hostname`); the report goes to `rt.observers` (also when the tick raises:
    then with outcome ERROR, and the exception goes on)."""
    report = TickReport(session_id, version)
    try:
        outcome = _tick(rt, report, node)
    except BaseException as exc:
        rt.observers.notify(report.close(Outcome.ERROR, error=type(exc).__name__))
        raise
    rt.observers.notify(report.close(outcome))
    return report


def _tick(rt: Runtime, report: TickReport, node: str | None) -> Outcome:
    owner = rt.owner(node)  # under this worker's sign of life (worker/tick/liveness.py)
    started = time.perf_counter()
    claimed = rt.store.claim(
        report.session_id,
        report.version,
        owner=owner,
        now=rt.clock(),
        lease_s=rt.leases.lease_s,
        level=rt.level,
        # an idempotent call is marked started by the claim, in its transaction
        idempotent=rt.jobs.idempotent,
    )
    report.claim_s = time.perf_counter() - started
    if claimed is None:
        _say_if_refused(rt, report.session_id, report.version)
        return Outcome.DROPPED
    report.claimed = claimed.head
    runner = runner_for(claimed.head)
    report.phase = runner.phase(claimed.head)
    files = TickFiles(rt, claimed.head, node=node)
    try:
        return _advance(Tick(rt, claimed, files, report), runner, owner, node)
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
            "`tickwork runbook upgrades`)",
            session_id,
            head.runtime_level,
            release.version(),
            rt.level,
        )


def _refuse_unseen_files(rt: Runtime, head: Head, version: int, exc: BlobMissing) -> None:
    """Say why a tick is refused whose session's files this worker's artifact store lacks.

    A blob is put before the save that names it and retention moves it to the archive, where
    the tick looks too: one that neither holds means this host's TICKWORK_ARTIFACTS_URL is
    not the store the session was stored in (another folder mounted, another prefix). So
    the session is left as it is, as for a job kind this worker lacks, for a worker that
    sees its files; past its deadline it fails DEADLINE naming the blob."""
    log.error(
        "session %s v%d: %s. The tick is refused and the session left as it is for a worker "
        "that sees its files: check that TICKWORK_ARTIFACTS_URL (here %s) names the same "
        "store on every host",
        head.id,
        version,
        exc.message,
        mask(rt.settings.artifacts_url, []) or "empty: the database's blobs table",
    )


def _refuse(tick: Tick, node: str | None, reason: str) -> None:
    """Record on the session that this worker refused its tick (`tick_refused`, once a
    node and version: not again from the node's other processes, nor after it restarts), so
    that `show` says why it does not move; the refusal stands if the database cannot take
    it. A refusal this process knows is recorded costs no database call (`Refusals`)."""
    head, worker = tick.claimed.head, node_name(node)
    refusal = (head.id, head.created_at, head.version, worker)
    if refusal in tick.rt.refusals:
        return
    try:
        tick.rt.store.refuse_tick(
            head.id, head.version, worker=worker, reason=reason, now=tick.rt.clock()
        )
    except StoreError as exc:
        log.warning("session %s: could not record the refused tick: %s", head.id, exc)
        return
    tick.rt.refusals.add(refusal)


def _advance(tick: Tick, runner: Runner, owner: str, node: str | None) -> Outcome:
    rt, claimed, files, report = tick.rt, tick.claimed, tick.files, tick.report
    session_id, version = claimed.head.id, report.version
    started = time.perf_counter()
    try:
        with rt.leases.hold(session_id, version, owner):
            missing = rt.jobs.missing(claimed.head.kind)  # a kind found but broken raises
            if missing is None:
                change = runner.advance(tick)
            elif claimed.head.cancel_requested:  # a cancel needs no kind
                # nor its tools: but without them nothing says that a call found started
                # may run twice, so it reads as interrupted (at the deadline too)
                change = transitions.cancelled(
                    claimed.head, claimed.calls, rt.clock(), claimed.decisions
                )
            elif (late := deadline_passed(claimed.head, now=rt.clock())) is not None:
                # nor does the deadline: a kind no worker will have again ends there
                message = (
                    f"{late}; no worker that took its tick had its job kind "
                    f"{claimed.head.kind!r} ({missing})"
                )
                change = machine.fail(
                    claimed.head,
                    ErrorCode.DEADLINE,
                    message,
                    now=rt.clock(),
                    open_calls=claimed.calls,
                    decisions=claimed.decisions,
                )
            else:
                # refused, not failed, as a graph version this worker lacks: nothing is saved,
                # the lease runs out and the relay offers the tick again, to a worker that has
                # the kind
                log.warning(
                    "session %s of job kind %r: this worker cannot run it: %s. The tick is "
                    "refused and the session left as it is for a worker that has the kind: "
                    "start one whose TICKWORK_IMPORTS names the kind, with its package "
                    "installed (or fix TICKWORK_IMPORTS and PYTHONPATH here, and restart)",
                    session_id,
                    claimed.head.kind,
                    missing,
                )
                _refuse(tick, node, f"this worker cannot run its job kind: {missing}")
                return Outcome.DROPPED
    except ClaimLost:
        return Outcome.LOST
    except GraphVersionMismatch as exc:
        # refused, not failed: nothing is saved, the lease runs out and the relay offers the
        # tick again, to a worker that has the session's graph version
        log.error("%s", exc)
        _refuse(tick, node, exc.message)
        return Outcome.DROPPED
    except (StoreError, ArtifactsUnavailable):
        # the database or the artifact store is away: the lease expires and the relay runs
        # this tick again (on files the store holds: nothing of this attempt was saved)
        raise
    except BlobMissing as exc:
        files.discard()
        late = deadline_passed(claimed.head, now=rt.clock())
        if late is None:
            _refuse_unseen_files(rt, claimed.head, version, exc)
            _refuse(tick, node, f"this worker does not see its files: {exc.message}")
            return Outcome.DROPPED
        change = machine.fail(
            claimed.head,
            ErrorCode.DEADLINE,
            f"{late}; no worker that took its tick found its files ({exc.message})",
            now=rt.clock(),
            open_calls=claimed.calls,
            decisions=claimed.decisions,
            idempotent=_idempotent(tick, runner),
        )
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
            decisions=claimed.decisions,
            idempotent=_idempotent(tick, runner),
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
        change = _internal(tick, runner, exc)
    finally:
        report.io_s = time.perf_counter() - started
    change = mask_change(change, rt.masker)
    report.change = change
    started = time.perf_counter()
    try:
        head, change = _save(tick, runner, change, owner)
    except ClaimLost:
        return Outcome.LOST
    finally:
        report.save_s = time.perf_counter() - started
    report.change, report.head = change, head
    files.saved(head)
    after_commit(rt, change, head)
    return Outcome.SAVED


def _save(tick: Tick, runner: Runner, change: Change, owner: str) -> tuple[Head, Change]:
    """Save the tick's change; the head saved and the change it saved. A cancel requested
    while the tick ran that would complete the session (the tree's root cancelled while a
    branch ran its node): what the tick did is saved, once, and the session ends cancelled.
    A spawn or fan-out the store found its tree too full for (a sibling's spawned
    meanwhile): what the runner makes of it is saved instead (`Runner.tree_full`: a spawn
    call's error observation, a graph's failure)."""
    rt, files, session_id, version = tick.rt, tick.files, tick.head.id, tick.report.version
    try:
        head = rt.store.save(
            change, version=version, owner=owner, now=rt.clock(), files=files.recorded
        )
        return head, change
    except TreeFull as exc:
        log.info("session %s v%d: its spawn was refused as it saved: %s", session_id, version, exc)
        change = runner.tree_full(tick, change, exc)
        head = rt.store.save(
            change, version=version, owner=owner, now=rt.clock(), files=files.recorded
        )
        return head, change
    except CancelledMeanwhile:
        log.info(
            "session %s v%d was cancelled while its tick ran: the tick's work is saved and "
            "the session ends cancelled, not completed",
            session_id,
            version,
        )
        change = transitions.cancelled_meanwhile(change, rt.clock())
        head = rt.store.save(
            change, version=version, owner=owner, now=rt.clock(), files=files.recorded
        )
        return head, change


def ended_child(rt: Runtime, head: Head) -> None:
    """After a child's end committed: publish its parent's tick if the end woke it (its
    outbox row is there already: the relay publishes it anyway, later), and in a join
    that wanted the first child only, cancel the others. Best effort: the relay repeats
    both (`missed_wakes`, `to_cancel`). A join still incomplete (every child's end but
    the last, unless it is `each`) costs one read."""
    assert head.parent_id is not None and head.spawn_call is not None
    try:
        join = rt.store.join(head.parent_id, head.spawn_call)
        if join is None:
            return  # its parent is gone with its tree
        if join.complete or join.mode is JoinMode.EACH:
            # an `each` end may have woken its parent (a claim drops a tick published twice)
            parent = rt.store.get(head.parent_id)
            rate = rt.settings.drop_publish_rate
            if parent.status is Status.EXECUTING and not (rate and rt.jitter() < rate):
                rt.publish(parent.id, parent.version)
        if join.mode is JoinMode.FIRST:
            for sibling in rt.store.children(head.parent_id, head.spawn_call):
                if not sibling.status.terminal and not sibling.cancel_requested:
                    with contextlib.suppress(SessionFinished):
                        rt.store.request_cancel(
                            sibling.id, now=rt.clock(), by=f"first of {head.parent_id}"
                        )
    except Exception as exc:
        log.warning("after child %s ended: %s (the relay finishes it)", head.id, exc)


def _internal(tick: Tick, runner: Runner, exc: Exception) -> Change:
    """A broken job kind, tool registry or model factory: fail loudly, keep everything."""
    rt, claimed = tick.rt, tick.claimed
    log.exception("tick of session %s v%d failed", claimed.head.id, claimed.head.version)
    tick.files.discard()  # what the tool may have half done is not saved with a failure
    return machine.fail(
        claimed.head,
        ErrorCode.INTERNAL,
        f"{type(exc).__name__}: {exc}",
        now=rt.clock(),
        open_calls=claimed.calls,
        decisions=claimed.decisions,
        idempotent=_idempotent(tick, runner),
    )


def _idempotent(tick: Tick, runner: Runner) -> bool:
    """Whether the step's next call, found started, may run twice (`Runner.idempotent`),
    for a tick that fails the session outside its runner; False where the kind's tools or
    graph cannot say (they may be what broke): such a call reads as interrupted."""
    try:
        return runner.idempotent(tick)
    except Exception:
        return False


def after_commit(rt: Runtime, change: Change, head: Head) -> None:
    if head.status.terminal and head.spawn_call is not None:
        ended_child(rt, head)
    if head.cancel_requested and head.status in (Status.WAITING_APPROVAL, Status.WAITING_CHILDREN):
        # cancelled while this tick ran, which then suspended it: a suspended session is
        # cancelled at once, so do it now instead of leaving it waiting with the flag set
        with contextlib.suppress(SessionFinished):
            rt.store.request_cancel(head.id, now=rt.clock(), by="cancel during a tick")
    rate = rt.settings.drop_publish_rate
    for child in change.children:
        # their first ticks are in the outbox with the spawn: the relay publishes any lost
        if not (rate and rt.jitter() < rate):
            rt.publish(child.id, child.version)
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
        rt.announce_dead_letter(head)
