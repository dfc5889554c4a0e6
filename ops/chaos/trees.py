"""The tree sessions of a chaos run (issue 29): kills aimed at their joins, and the joins'
invariants.

A root spawns `plan.tree_children` children whose script is one file, so they tend to end
at one instant, and joins them `all` (woken once, with every result) or `each` (a result
per delivery, the next ones through `wait_children`). `Aim` turns some of the run's kills
on the trees: the worker running a child's last reply, killed around the moment the reply
returns (before, during or just after the child's last save); the worker that has just
saved a child's end (before or after it publishes the parent's wake-up); the worker
running a parent's tick just after its join woke it. `check_trees` then asks of every
join: one wake-up each (`all`), or one per delivery that waited (`each`); every child's
result delivered exactly once; every child and root completed; the root charged its own
replies plus its children's, once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import subprocess
from collections import Counter
from typing import Any

from sqlalchemy import or_, select
from tickwork.fsm.deliveries import WAIT_CHILDREN
from tickwork.fsm.errors import TickworkError
from tickwork.fsm.trees import SPAWN_AGENTS
from tickwork.fsm.values import EventKind, Session, Status
from tickwork.store.schema import sessions

from .fleet import Fleet
from .plan import TREE_JOINS, TREE_REPLY_COST, Plan
from .report import Report

#: the tree roots' ids start with it; their children's `root_id` is the root's
ROOT_PREFIX = "chaos-tree-"
#: what an aimed kill hit, as the report names it
CHILD_ENDING = "a child's last reply, around its end"
CHILD_SAVED = "the worker that had just saved a child's end"
PARENT_WOKEN = "a parent's tick just after its join woke it"
#: two children's ends this close met at the join's row (the figure of ends at one instant)
MET_S = 0.1


def root_ids(plan: Plan) -> list[str]:
    return [f"{ROOT_PREFIX}{n:04d}" for n in range(plan.trees)]


def join_of(plan: Plan, root_id: str) -> str:
    return TREE_JOINS[int(root_id.removeprefix(ROOT_PREFIX)) % len(TREE_JOINS)]


def _pid(owner: str) -> int | None:
    """The process in a lease owner `host:pid:thread[@sign]`."""
    parts = owner.split(":")
    return int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else None


class Aim:
    """Chooses kills aimed at the trees' joins; `victim` is asked every pass of the chaos
    loop, and kills only when the harness says it may (`ready`): an aimed kill takes the
    next planned kill's place, so the run's kill rate stays near the plan's."""

    def __init__(self, engine: Any, plan: Plan, fleet: Fleet, survivor: Any) -> None:
        self.engine, self.plan, self.fleet, self.survivor = engine, plan, fleet, survivor
        #: (child, version) -> when a lease on its last reply was first seen, and when to kill
        self._ending: dict[tuple[str, int], float] = {}
        #: a child's last lease owner seen while it ran
        self._owner: dict[str, str] = {}
        self._ended: set[str] = set()
        #: a root's status at the last pass: waiting, then executing, is a wake-up
        self._was: dict[str, str] = {}
        self.hits: Counter[str] = Counter()

    def victim(self, now: float, *, ready: bool) -> tuple[subprocess.Popen[bytes], str] | None:
        """A worker to kill now and why, or None; with `ready` false, only watch."""
        if not self.plan.aim_at_trees or not self.plan.trees:
            return None
        try:
            rows = self._rows()
        except Exception:  # the database is being restarted: no aim this pass
            return None
        aims: list[tuple[str, str]] = []
        for r in rows:
            if r.spawn_call is not None:
                if Status(r.status).terminal:
                    if r.id not in self._ended:
                        self._ended.add(r.id)
                        if r.id in self._owner:
                            aims.append((self._owner[r.id], CHILD_SAVED))
                    continue
                if r.lease_owner is None:
                    continue
                self._owner[r.id] = r.lease_owner
                if r.status == Status.READY.value and r.step >= 1:
                    # its last reply takes child_answer_delay_s from about the claim: kill
                    # a little before, at, or a little after it returns and is saved
                    at = self._ending.setdefault(
                        (r.id, r.version),
                        now + self.plan.child_answer_delay_s + random.uniform(-0.15, 0.15),
                    )
                    if now >= at:
                        aims.append((r.lease_owner, CHILD_ENDING))
            else:
                was, self._was[r.id] = self._was.get(r.id), r.status
                woken = was == Status.WAITING_CHILDREN.value and r.status == Status.EXECUTING.value
                if woken and r.lease_owner is None:
                    self._was[r.id] = was  # woken, its tick not claimed yet: look again
                elif woken:
                    aims.append((r.lease_owner, PARENT_WOKEN))
        if not ready:
            return None
        for owner, why in aims:
            proc = self._process(owner)
            if proc is not None:
                self.hits[why] += 1
                return proc, why
        return None

    def _rows(self) -> list[Any]:
        query = select(
            sessions.c.id,
            sessions.c.spawn_call,
            sessions.c.status,
            sessions.c.step,
            sessions.c.version,
            sessions.c.lease_owner,
        ).where(
            or_(sessions.c.id.like(f"{ROOT_PREFIX}%"), sessions.c.root_id.like(f"{ROOT_PREFIX}%"))
        )
        with self.engine.connect() as conn:
            return list(conn.execute(query))

    def _process(self, owner: str) -> subprocess.Popen[bytes] | None:
        pid = _pid(owner)
        return next(
            (
                p
                for p in self.fleet.procs
                if p.pid == pid and p is not self.survivor and p.poll() is None
            ),
            None,
        )


def tree_ids(client: Any, plan: Plan) -> list[str]:
    """Every tree session's id: the roots and their children."""
    ids = []
    for root_id in root_ids(plan):
        ids.append(root_id)
        try:
            ids += [c.id for c in client.store.children(root_id)]
        except TickworkError:
            continue
    return ids


def _delivered(session: Session) -> list[tuple[str, list[str]]]:
    """(call id, children's ids) of each observation that delivered children's results,
    in order: the spawn call's and the `wait_children` calls'."""
    out = []
    for step in session.steps:
        for call in step.calls:
            if call.name not in (SPAWN_AGENTS, WAIT_CHILDREN):
                continue
            seen = session.observation(call.call_id)
            if seen is None or seen.is_error:
                continue  # a wait_children after every result came: nothing delivered
            body = json.loads(seen.content)
            out.append((call.call_id, [c["id"] for c in body.get("children", [])]))
    return out


def _joined_events(session: Session) -> list[dict[str, Any]]:
    return [e.data for e in session.events if e.kind is EventKind.CHILDREN_JOINED]


def check_trees(report: Report, client: Any, plan: Plan, say: Any = print) -> None:
    """The trees' invariants, each as a figure."""
    if not plan.trees:
        return
    roots: dict[str, Session] = {}
    for root_id in root_ids(plan):
        with contextlib.suppress(TickworkError):  # lost: "sessions lost" says so
            roots[root_id] = client.load(root_id)
    completed = [r for r in roots.values() if r.head.status is Status.COMPLETED]
    report.add(
        "trees: roots completed (joins all / each)",
        f"{len(completed)}/{plan.trees} "
        f"({sum(join_of(plan, r) == 'all' for r in roots)} / "
        f"{sum(join_of(plan, r) == 'each' for r in roots)})",
        len(completed) == plan.trees,
    )
    children_done = children_all = met = 0
    wakes_all: Counter[int] = Counter()
    delivered_per_child: Counter[int] = Counter()
    each_wakes = each_deliveries = each_at_once = 0
    order_bad: list[str] = []
    cost_bad: list[str] = []
    results_bad: list[str] = []
    for root_id, root in roots.items():
        children = client.store.children(root_id)
        children_all += len(children)
        children_done += sum(c.status is Status.COMPLETED for c in children)
        ends = sorted(c.updated_at for c in children if c.status.terminal)
        met += any((b - a).total_seconds() <= MET_S for a, b in itertools.pairwise(ends))
        ids = [c.id for c in children]
        if len(ids) != plan.tree_children:
            results_bad.append(f"{root_id}: {len(ids)} children")
        delivered = _delivered(root)
        got = Counter(i for _, ids_ in delivered for i in ids_)
        for i in ids:
            delivered_per_child[got.get(i, 0)] += 1
        if set(got) - set(ids):
            results_bad.append(f"{root_id}: results of unknown children")
        events = _joined_events(root)
        woken = [e for e in events if e.get("woken")]
        # a delivery's event (fsm.trees.observed_ends) says how many it completed
        deliveries = [e for e in events if "completed" in e]
        settled = [e for e in events if e.get("charged_after_end")]
        if settled:
            results_bad.append(f"{root_id}: ends charged after the root ended")
        if join_of(plan, root_id) == "all":
            wakes_all[len(woken)] += 1
            if len(delivered) != 1 or len(deliveries) != 1:
                results_bad.append(f"{root_id}: {len(delivered)} observations of the join")
        else:
            # each wake-up is followed by one delivery before any other wake-up; a delivery
            # without one before it took results that were there already (no suspension)
            marks = "".join(
                "W" if e.get("woken") else "D" for e in events if e.get("woken") or "completed" in e
            )
            if marks.count("WW") or marks.endswith("W") or not marks.startswith("W"):
                order_bad.append(f"{root_id}: {marks}")
            each_wakes += len(woken)
            each_deliveries += len(deliveries)
            each_at_once += len(deliveries) - marks.count("WD")
        joined_cost = sum(float(e.get("cost_usd", 0.0)) for e in deliveries)
        children_cost = sum(c.cost_usd for c in children)
        own = sum(s.cost_usd for s in root.steps)
        replies = 2 if join_of(plan, root_id) == "all" else plan.tree_children + 1
        if not (
            _same(joined_cost, children_cost)
            and _same(children_cost, 2 * TREE_REPLY_COST * len(children))
            and _same(own, replies * TREE_REPLY_COST)
            and _same(root.head.cost_usd, own + children_cost)
        ):
            cost_bad.append(
                f"{root_id}: cost {root.head.cost_usd:.6f}, own {own:.6f}, "
                f"children {children_cost:.6f}, at the join {joined_cost:.6f}"
            )
    report.add(
        "trees: children completed",
        f"{children_done}/{children_all}",
        children_done == children_all == plan.trees * plan.tree_children,
    )
    report.add(f"trees: joins where two children ended within {MET_S:g}s of each other", met)
    report.once("trees: join all: wake-ups per join {wake-ups: joins}", wakes_all)
    report.once("trees: results delivered per child {deliveries: children}", delivered_per_child)
    report.add(
        "trees: join each: wake-ups = deliveries that waited (deliveries, taken at once)",
        f"{each_wakes} = {each_deliveries - each_at_once} ({each_deliveries}, {each_at_once})",
        not order_bad and each_wakes == each_deliveries - each_at_once,
    )
    report.add(
        "trees: root's cost = its replies + its children's (charged once, at the join)",
        f"{len(roots) - len(cost_bad)}/{len(roots)}",
        not cost_bad,
    )
    report.add(
        "trees: joins with a missing, extra or unknown result", len(results_bad), not results_bad
    )
    for what in (order_bad + cost_bad + results_bad)[:5]:
        report.add("trees: broken", what)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9


def aimed_figures(report: Report, aim: Aim | None) -> None:
    if aim is None:
        return
    for why in (CHILD_ENDING, CHILD_SAVED, PARENT_WOKEN):
        report.add(f"trees: kills aimed at {why}", aim.hits.get(why, 0))
