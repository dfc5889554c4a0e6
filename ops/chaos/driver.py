"""The people of a chaos run: who submits sessions, who approves every call that asks, and
the operator who decides in-doubt calls afterwards."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tickwork.fsm.errors import AlreadyDecided, StoreConflict, StoreError, TickworkError
from tickwork.fsm.values import CallState, Session, Status, idempotency_key

from .fleet import Fleet
from .plan import (
    BUGGY,
    FILES_KIND,
    KIND,
    SINKS,
    TREE_JOINS,
    TREE_KIND,
    TREE_PRICE,
    Plan,
    child_script,
    files_script,
    script,
    tree_script,
)

APPROVER = "chaos-approver"

log = logging.getLogger("tickwork.chaos")


class PublishFailures(logging.Handler):
    """Counts the client's "could not publish" warnings (the relay publishes those later)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "could not publish" in record.getMessage():
            self.count += 1


class Driver:
    """Submits sessions over time and approves every call that asks, through the client."""

    def __init__(self, client: Any, plan: Plan, sink: Path, scripts: Path) -> None:
        self.client, self.plan, self.sink, self.scripts = client, plan, sink, scripts
        self.submitted: list[str] = []
        self.submit_retries = 0
        self.approvals = 0
        self.already_decided = 0
        self.approver_errors = 0
        self.stopped = threading.Event()
        self.approving = threading.Event()
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._submit_all, name="chaos-submit", daemon=True),
            threading.Thread(target=self._approve_loop, name="chaos-approve", daemon=True),
        ]

    def start(self) -> None:
        self.approving.set()
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self.stopped.set()
        for t in self._threads:
            t.join(60)

    @property
    def submitting(self) -> bool:
        return self._threads[0].is_alive()

    def _submit_all(self) -> None:
        gap = self.plan.submit_over_s / max(1, self.plan.sessions)
        start = time.monotonic()
        for n in range(self.plan.sessions):
            session_id = f"chaos-{n:04d}"
            path = self.scripts / f"{session_id}.json"
            path.write_text(json.dumps(script(session_id, self.plan)))
            self._submit(session_id, f"scripted:{path}")
            self.submitted.append(session_id)
            wait = start + (n + 1) * gap - time.monotonic()
            if wait > 0 and self.stopped.wait(wait):
                return
            spread = max(1, self.plan.sessions // max(1, self.plan.file_sessions))
            if n % spread == 0 and n // spread < self.plan.file_sessions:
                self._submit_files(n // spread)  # spread over the run: before and after rot
            spread = max(1, self.plan.sessions // max(1, self.plan.trees))
            if n % spread == spread // 2 and n // spread < self.plan.trees:
                self._submit_tree(n // spread)  # spread over the run: across both restarts

    def _submit_files(self, n: int) -> None:
        """One file session on the shared project (its blobs are put once, then reused)."""
        session_id = f"chaos-files-{n:04d}"
        project = self.scripts.parent / "project"
        if not project.exists():
            project.mkdir()
            (project / "calc.py").write_text(BUGGY)
        path = self.scripts / f"{session_id}.json"
        path.write_text(json.dumps(files_script(self.plan)))
        data = {"workspace": str(project), "test_command": "true"}
        while True:
            try:
                self.client.submit(
                    FILES_KIND, data, model=f"scripted:{path}", session_id=session_id
                )
                break
            except StoreConflict:
                break
            except StoreError:
                self.submit_retries += 1
                time.sleep(0.5)
        self.submitted.append(session_id)

    def _submit_tree(self, n: int) -> None:
        """One tree root: it spawns `plan.tree_children` children whose scripts are one
        file (in the root's folder, where a scripted child's must be), joined in turn `all`
        and `each`."""
        session_id = f"chaos-tree-{n:04d}"
        folder = self.scripts.resolve()
        child = folder / f"{session_id}-child.json"
        child.write_text(json.dumps(child_script(self.plan)))
        entry = {
            "role": "worker",
            "input": {"task": "do the work", "sink": str(self.sink)},
            "model": f"scripted:{child}",
        }
        join = TREE_JOINS[n % len(TREE_JOINS)]
        path = folder / f"{session_id}.json"
        path.write_text(json.dumps(tree_script(self.plan, join=join, child=entry)))
        self._submit(session_id, f"scripted:{path}", kind=TREE_KIND, price=TREE_PRICE)
        self.submitted.append(session_id)

    def _submit(
        self,
        session_id: str,
        model: str,
        *,
        kind: str = KIND,
        price: tuple[float, float] | None = None,
    ) -> None:
        """Submit until the store has it; a database that is down is retried."""
        while True:
            try:
                self.client.submit(
                    kind, {"sink": str(self.sink)}, model=model, session_id=session_id, price=price
                )
                return
            except StoreConflict:
                return  # an earlier attempt committed before its connection dropped
            except StoreError as exc:
                self.submit_retries += 1
                log.info("submit of %s failed (%s); retrying", session_id, type(exc).__name__)
                time.sleep(0.5)

    def _approve_loop(self) -> None:
        while not self.stopped.wait(0.1):
            if not self.approving.is_set():
                continue
            try:
                self.approve_waiting()
            except StoreError:
                self.approver_errors += 1
                time.sleep(0.3)
            except Exception as exc:
                self.errors.append(f"approver: {type(exc).__name__}: {exc}")
                time.sleep(0.3)

    def approve_waiting(self) -> None:
        for head in self.client.store.list_sessions(
            status=[Status.WAITING_APPROVAL.value], limit=10_000
        ):
            session = self.client.load(head.id)
            for call_id in head.awaiting:
                call = session.call(call_id)
                if call is None or call.state is not CallState.AWAITING_APPROVAL:
                    continue  # in doubt: a person decides after the chaos
                try:
                    self.client.approve(head.id, call_id, approver=APPROVER, comment="chaos")
                    self.approvals += 1
                except AlreadyDecided:
                    self.already_decided += 1  # our retry after a commit whose reply was lost
                except StoreError:
                    raise  # the database is away: the loop counts it and tries again
                except TickworkError as exc:
                    self.errors.append(f"approve {head.id} {call_id}: {exc}")


def sink_lines(sink: Path, log_name: str) -> list[tuple[str, str]]:
    path = sink / log_name
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        out.append((key, value))
    return out


def resolve_in_doubt(client: Any, sessions: list[Session], sink: Path) -> dict[str, int]:
    """What an operator does with each in-doubt call: look in the sink; if the effect is
    there, give its output by hand; if not, approve it to run again."""
    ran = {k for log_name in SINKS.values() for k, _ in sink_lines(sink, log_name)}
    done = Counter[str]()
    for session in sessions:
        head = session.head
        for call_id in head.awaiting:
            call = session.call(call_id)
            if call is None or call.state is not CallState.IN_DOUBT:
                continue
            key = idempotency_key(head.id, call.step, call.call_id)
            if key in ran:
                client.provide_output(
                    head.id,
                    call_id,
                    "ran (the operator found it in the sink)",
                    approver="chaos-operator",
                )
                done["output given"] += 1
            else:
                client.approve(
                    head.id, call_id, approver="chaos-operator", comment="not in the sink: run it"
                )
                done["retried"] += 1
    return dict(done)


def settle(
    client: Any, ids: list[str], *, timeout: float, driver: Driver | None, fleet: Fleet
) -> bool:
    """Wait until every session is finished or waits only on in-doubt calls."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fleet.replace_exited()
        try:
            if driver is None or not driver.submitting:
                heads = {h.id: h for h in client.store.list_sessions(limit=100_000)}
                if all(i in heads and _settled(client, heads[i]) for i in ids):
                    return True
        except StoreError:
            pass
        time.sleep(0.5)
    return False


def _settled(client: Any, head: Any) -> bool:
    if head.status.terminal:
        return True
    if head.status is not Status.WAITING_APPROVAL:
        return False
    session = client.load(head.id)
    return all(
        (c := session.call(a)) is not None and c.state is CallState.IN_DOUBT for a in head.awaiting
    )
