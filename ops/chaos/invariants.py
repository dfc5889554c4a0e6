"""The invariants of a chaos run, checked on the store, the sink and the worker logs."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from tickwork.fsm.errors import TickworkError
from tickwork.fsm.values import (
    CallState,
    DecisionKind,
    EventKind,
    Session,
    Status,
    ToolCall,
    idempotency_key,
)
from tickwork.store.schema import outbox

from .driver import APPROVER, sink_lines
from .fleet import Fleet
from .plan import SINKS
from .report import Report


def check(report: Report, client: Any, ids: list[str], sink: Path) -> None:
    """The invariants, each as a figure."""
    engine = client.store.engine
    sessions: list[Session] = []
    lost = []
    for session_id in ids:
        try:
            sessions.append(client.load(session_id))
        except TickworkError:
            lost.append(session_id)
    statuses = Counter(s.head.status.value for s in sessions)
    in_doubt_waiting = [
        s
        for s in sessions
        if s.head.status is Status.WAITING_APPROVAL
        and all(
            (c := s.call(a)) is not None and c.state is CallState.IN_DOUBT for a in s.head.awaiting
        )
    ]
    with engine.connect() as conn:
        queued = {r.session_id for r in conn.execute(select(outbox.c.session_id))}
        outbox_rows = conn.execute(select(func.count()).select_from(outbox)).scalar_one()
    runnable = [s for s in sessions if s.head.status.runnable]
    stuck = [s.head.id for s in runnable if s.head.id not in queued]
    completed = statuses.get("completed", 0)
    report.add("sessions submitted", len(ids))
    report.add("sessions completed", completed)
    report.add("sessions waiting on an in-doubt call", len(in_doubt_waiting))
    report.add(
        "every session completed or waits on an in-doubt call",
        f"{completed + len(in_doubt_waiting)}/{len(ids)}",
        completed + len(in_doubt_waiting) == len(ids),
    )
    report.add("sessions lost (submitted, not in the store)", len(lost), not lost)
    report.add(
        "sessions failed or cancelled",
        statuses.get("failed", 0) + statuses.get("cancelled", 0),
        not (statuses.get("failed", 0) + statuses.get("cancelled", 0)),
    )
    report.add("sessions runnable without a live lease or outbox row", len(stuck), not stuck)
    report.add(
        "sessions still runnable at the end (with a lease or outbox row)",
        len(runnable) - len(stuck),
        len(runnable) == 0,
    )
    report.add("outbox rows left", outbox_rows)
    if lost or stuck:
        report.add("lost or stuck ids", ", ".join([*lost, *stuck][:10]))

    model_called: Counter[int] = Counter()
    tool_finished: Counter[int] = Counter()
    observations: Counter[int] = Counter()
    danger_decisions: Counter[int] = Counter()
    danger_events: Counter[int] = Counter()
    started_twice = 0
    #: tool name -> (idempotency key, call, whether its observation came from running it)
    calls_by_tool: dict[str, list[tuple[str, ToolCall, bool]]] = defaultdict(list)
    steps_ok = True
    for s in sessions:
        called = Counter(e.data.get("step") for e in s.events if e.kind is EventKind.MODEL_CALLED)
        finished = Counter(
            e.data.get("call_id") for e in s.events if e.kind is EventKind.TOOL_FINISHED
        )
        starts = Counter(
            e.data.get("call_id") for e in s.events if e.kind is EventKind.TOOL_STARTED
        )
        decided = Counter(
            e.data.get("call_id")
            for e in s.events
            if e.kind is EventKind.APPROVAL_DECIDED and e.data.get("approver") == APPROVER
        )
        first_decisions = Counter(d.call_id for d in s.decisions if d.attempt == 0)
        seen = Counter(o.call_id for o in s.observations)
        steps_ok &= [st.step for st in s.steps] == list(range(1, s.head.step + 1))
        for st in s.steps:
            model_called[called.get(st.step, 0)] += 1
            for c in st.calls:
                decision = s.decision(c.call_id)
                by_hand = decision is not None and decision.kind is DecisionKind.PROVIDE_OUTPUT
                key = idempotency_key(s.head.id, c.step, c.call_id)
                calls_by_tool[c.name].append((key, c, not by_hand))
                if c.state is CallState.DONE:
                    observations[seen.get(c.call_id, 0)] += 1
                    if not by_hand:
                        tool_finished[finished.get(c.call_id, 0)] += 1
                started_twice += starts.get(c.call_id, 0) > 1
                if c.name == "danger":
                    danger_decisions[first_decisions.get(c.call_id, 0)] += 1
                    danger_events[decided.get(c.call_id, 0)] += 1
    report.add("steps recorded", sum(len(s.steps) for s in sessions))
    report.add("steps numbered 1..n, no gap, no repeat", "yes" if steps_ok else "no", steps_ok)
    report.once("model_called events per step {events: steps}", model_called)
    report.once("observations per finished call {observations: calls}", observations)
    report.once("tool_finished events per call run by a tool {events: calls}", tool_finished)
    report.add("calls started more than once (idempotent re-runs)", started_twice)

    lines = {name: sink_lines(sink, log_name) for name, log_name in SINKS.items()}
    for name in ("idem_effect", "effect", "danger"):
        calls = calls_by_tool.get(name, [])
        known = {key: c for key, c, _ in calls}
        runs = Counter(key for key, _ in lines[name])
        strays = [
            key
            for key, value in lines[name]
            if key not in known or (known[key].arguments or {}).get("value") != value
        ]
        report.add(f"{name}: calls", len(calls))
        report.add(f"{name}: effects at the sink (lines)", len(lines[name]))
        report.add(
            f"{name}: effects under no call's key, or another value", len(strays), not strays
        )
        missing = [
            key
            for key, c, by_tool in calls
            if c.state is CallState.DONE and by_tool and runs.get(key, 0) == 0
        ]
        report.add(
            f"{name}: calls finished by the tool with no effect at the sink",
            len(missing),
            not missing,
        )
        if name == "idem_effect":
            report.add(
                "idem_effect: distinct keys at the sink = calls",
                f"{len(runs)} = {len(calls)}",
                len(runs) == len(calls),
            )
            report.add(
                "idem_effect: duplicate effects (same key, re-run after a crash)",
                len(lines[name]) - len(runs),
            )
        else:
            twice = [key for key, n in runs.items() if n > 1]
            report.add(f"{name}: calls executed more than once", len(twice), not twice)
    danger_calls = len(calls_by_tool.get("danger", []))
    report.once(
        "danger: approvals per call {decisions: calls}", danger_decisions, also=danger_calls > 0
    )
    report.once("danger: approval_decided events per call {events: calls}", danger_events)


def worker_log_figures(
    report: Report, fleet: Fleet, survivor_marks: dict[str, int], survivor_log: Path | None
) -> None:
    text = fleet.log_text()
    republished = sum(int(m) for m in re.findall(r"relay: republished (\d+) ticks", text))
    revived = sum(int(m) for m in re.findall(r"relay: revived (\d+) sessions", text))
    taken = sum(int(m) for m in re.findall(r"relay: took over (\d+) sessions", text))
    outcomes = Counter(re.findall(r"succeeded in [0-9.e-]+s: '(\w+)'", text))
    report.add("ticks saved (one micro-phase each)", outcomes.get("saved", 0))
    report.add("ticks dropped (stale or duplicate message)", outcomes.get("dropped", 0))
    report.add("ticks lost (the session moved on meanwhile)", outcomes.get("lost", 0))
    report.add("relay: ticks republished (lost messages)", republished)
    report.add("relay: sessions revived after an expired lease", revived)
    report.add("relay: sessions taken over (their worker's sign of life gone)", taken)
    report.add(
        "ticks that failed INTERNAL in a worker log",
        len(re.findall(r"tick of session \S+ v\d+ failed", text)),
    )
    report.add("worker log lines with a Traceback", text.count("Traceback"))
    if survivor_log is not None and survivor_log.exists():
        # a figure, not an invariant: a worker that dies on a broker restart loses nothing,
        # but it is worth knowing (see "Findings" in RESULTS.md)
        survivor = survivor_log.read_text(errors="replace")
        for what, offset in survivor_marks.items():
            after = survivor[offset:].count("s: 'saved'")
            report.add(f"first worker (never killed): ticks saved after the {what} restart", after)


def dump(client: Any, ids: list[str], path: Path) -> None:
    """Every session whole, one JSON line each, for looking into a broken invariant."""
    with path.open("w") as out:
        for session_id in ids:
            try:
                out.write(client.load(session_id).model_dump_json() + "\n")
            except TickworkError:
                continue
