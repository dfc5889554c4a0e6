"""The store's contract suite: fixtures, and helpers for sessions, replies and real ticks.

A tick here is what the worker does, without the I/O: claim, run the machine, save.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine, func, select
from tickwork.fsm import machine
from tickwork.fsm.approvals import ApprovalRule
from tickwork.fsm.machine import Change, RunTool
from tickwork.fsm.values import (
    Budgets,
    Decision,
    DecisionKind,
    Head,
    ModelReply,
    ProposedCall,
    Session,
    Status,
    ToolCall,
    Usage,
)
from tickwork.store import Claimed, Store, make_engine, open_store
from tickwork.store.migrate import upgrade
from tickwork.store.schema import metadata, sessions

from tests.conftest import Clock

T = TypeVar("T")

#: `danger` always asks a person first; every other tool runs as proposed
RULES = {"danger": ApprovalRule(always=True)}
LEASE_S = 30.0


def new_session(
    session_id: str = "sess-1",
    *,
    now: datetime,
    kind: str = "repair",
    model: str = "gpt-test",
    budgets: Budgets | None = None,
    status: Status = Status.READY,
) -> Session:
    head = Head(
        id=session_id,
        kind=kind,
        status=status,
        created_at=now,
        updated_at=now,
        model=model,
        budgets=budgets or Budgets(),
        input={"task": "fix the bug"},
        config={"system_prompt": "You repair code.", "user_prompt": "fix it"},
    )
    return Session(head=head)


def reply(
    *calls: tuple[str, dict[str, Any] | str],
    content: str = "let me look",
    prompt_tokens: int = 100,
    completion_tokens: int = 20,
) -> ModelReply:
    """A model reply proposing `calls`, each `(tool name, arguments)`."""
    return ModelReply(
        content=content,
        calls=tuple(ProposedCall(name=n, arguments=a) for n, a in calls),
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
        latency_ms=12.5,
    )


def claim(
    store: Store,
    session_id: str,
    *,
    now: datetime,
    owner: str = "worker-1",
    version: int | None = None,
) -> Claimed:
    if version is None:
        version = store.get(session_id).version
    claimed = store.claim(session_id, version, owner=owner, now=now, lease_s=LEASE_S)
    assert claimed is not None, f"claim of {session_id} at v{version} failed"
    return claimed


def think_change(claimed: Claimed, answer: ModelReply, *, now: datetime) -> Change:
    """What a THINK tick saves after claiming: a cancel or spent budget, else the step."""
    started = machine.start_think(claimed.head, now=now)
    if isinstance(started, Change):
        return started
    return machine.think(
        claimed.head,
        answer,
        now=now,
        cost_usd=0.01,
        trace_id=f"trace-{claimed.head.step + 1:04d}",
        recent=claimed.recent,
        rules=RULES,
    )


def think(
    store: Store, session_id: str, answer: ModelReply, *, now: datetime, owner: str = "worker-1"
) -> Head:
    """One THINK tick: claim, start_think + think, save."""
    claimed = claim(store, session_id, now=now, owner=owner)
    return store.save(
        think_change(claimed, answer, now=now), version=claimed.head.version, owner=owner, now=now
    )


def execute_change(
    store: Store, claimed: Claimed, *, now: datetime, output: str = "ok", idempotent: bool = False
) -> Change:
    """What an EXECUTE tick saves after claiming, marking the call started if one runs."""
    todo = machine.start_execute(
        claimed.head, claimed.calls, claimed.decisions, idempotent=idempotent, now=now
    )
    if isinstance(todo, RunTool):
        store.start_call(
            claimed.head.id,
            claimed.head.version,
            todo.call,
            owner=claimed.owner,
            now=now,
            rerun=todo.rerun,
        )
        return machine.tool_finished(
            claimed.head,
            claimed.calls,
            todo.call,
            output=output,
            is_error=False,
            now=now,
            duration_ms=3.0,
        )
    return todo


def execute(
    store: Store,
    session_id: str,
    *,
    now: datetime,
    owner: str = "worker-1",
    output: str = "ok",
    idempotent: bool = False,
) -> Head:
    """One EXECUTE tick: claim, start_execute, start_call + tool_finished, save."""
    claimed = claim(store, session_id, now=now, owner=owner)
    change = execute_change(store, claimed, now=now, output=output, idempotent=idempotent)
    return store.save(change, version=claimed.head.version, owner=owner, now=now)


def run_step(
    store: Store, session_id: str, number: int, *, now: datetime, tool: str = "read_file"
) -> Head:
    """Think with one call whose arguments differ per step (no loop), then execute it."""
    head = think(
        store,
        session_id,
        reply((tool, {"path": f"src/f{number:04d}.py"}), content=f"step {number:04d}"),
        now=now,
    )
    while head.status is Status.EXECUTING:
        head = execute(store, session_id, now=now, output=f"contents of f{number:04d}")
    return head


def decision(
    call: ToolCall,
    kind: DecisionKind = DecisionKind.APPROVE,
    *,
    approver: str = "alice",
    now: datetime,
    **fields: Any,
) -> Decision:
    """A decision bound to the call as the approver saw it."""
    return Decision(
        call_id=call.call_id,
        kind=kind,
        approver=approver,
        at=now,
        fingerprint=call.fingerprint,
        **fields,
    )


def awaiting_calls(store: Store, session_id: str) -> list[ToolCall]:
    session = store.load(session_id)
    found = [session.call(c) for c in session.head.awaiting]
    return [c for c in found if c is not None]


def count_rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in metadata.sorted_tables
        }


def table_rows(engine: Engine, table: Any, *where: Any) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(select(table).where(*where)).mappings()]


def lease(engine: Engine, session_id: str) -> tuple[str | None, datetime | None]:
    with engine.connect() as conn:
        row = conn.execute(
            select(sessions.c.lease_owner, sessions.c.lease_expires_at).where(
                sessions.c.id == session_id
            )
        ).one()
    return row.lease_owner, row.lease_expires_at


def together(tasks: Iterable[Callable[[], T]]) -> list[T | BaseException]:
    """Run `tasks` in threads released at the same moment; each result or its exception."""
    todo = list(tasks)
    barrier = threading.Barrier(len(todo))
    results: list[T | BaseException] = [RuntimeError("did not run")] * len(todo)

    def run(i: int, task: Callable[[], T]) -> None:
        barrier.wait()
        try:
            results[i] = task()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(todo)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return results


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "tickwork.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A copy of a migrated template: the migrations run once per test run, not per test."""
    path = tmp_path / "tickwork.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def postgres_engine(postgres_url: str) -> Iterator[Engine]:
    """One pool for the whole run; commits skip the fsync wait (same locking, faster)."""
    engine = make_engine(postgres_url, connect_args={"options": "-c synchronous_commit=off"})
    yield engine
    engine.dispose()


#: where the contract suite runs: the Core store on SQLite and on Postgres, and the Postgres
#: store (its one-statement tick writes) on Postgres
BACKENDS = ("sqlite", "postgres-core", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test of a store runs on each backend; one that takes only a database, on each
    database."""
    if "backend" in metafunc.fixturenames:
        wanted = BACKENDS if "store" in metafunc.fixturenames else ("sqlite", "postgres")
        metafunc.parametrize("backend", wanted, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> str:
    """Each test runs on SQLite and on Postgres, on an empty schema (rows deleted, which is
    much faster than the shared fixture's TRUNCATE on small tables)."""
    if backend == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    engine: Engine = request.getfixturevalue("postgres_engine")
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(database_url: str, backend: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    if backend == "sqlite":
        engine = make_engine(database_url)
        yield open_store(engine)
        engine.dispose()
    else:
        engine = request.getfixturevalue("postgres_engine")
        yield open_store(engine, core=backend == "postgres-core")


@pytest.fixture
def session_id(store: Store, clock: Clock) -> str:
    """A fresh runnable session at version 0."""
    store.create(new_session("sess-1", now=clock()), now=clock())
    return "sess-1"
