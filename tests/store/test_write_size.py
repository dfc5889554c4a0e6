"""A tick writes O(1) rows and bytes, whatever the session's length (docs/DESIGN.md section 3)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import Engine, event
from tickwork.fsm.values import Budgets, Status
from tickwork.store import Store

from tests.conftest import Clock
from tests.store.conftest import (
    claim,
    count_rows,
    execute_change,
    new_session,
    reply,
    run_step,
    think_change,
)

#: a write, named by its (first) table; on Postgres a tick's write is one statement of
#: data-modifying CTEs (store/postgres.py), named by the table of its first
WRITE = re.compile(
    r'^\s*(?:WITH\s+\w+\s+AS\s*\(\s*)?(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?(\w+)',
    re.IGNORECASE,
)


def _size(value: Any) -> int:
    """Bytes a parameter sends, near enough: text as UTF-8, numbers and times as 8 bytes."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, int | float | datetime):
        return 8
    if isinstance(value, dict):
        return sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sum(_size(v) for v in value)
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    return len(str(value).encode())


@dataclass
class Writes:
    statements: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


@contextmanager
def measured(engine: Engine) -> Iterator[Writes]:
    """Write statements and parameter bytes per table, and each table's net row change."""
    writes = Writes()

    def on_execute(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
    ) -> None:
        match = WRITE.match(statement)
        if match:
            writes.statements[match[1]] += 1
            writes.bytes[match[1]] += _size(parameters)

    before = count_rows(engine)
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield writes
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
    after = count_rows(engine)
    writes.rows.update({t: after[t] - before[t] for t in after})


def _tick_writes(store: Store, session_id: str, clock: Clock, number: int) -> tuple[Writes, Writes]:
    """The writes of the THINK and the EXECUTE tick of step `number` (claim, run, save)."""
    answer = reply(("read_file", {"path": f"src/f{number:04d}.py"}), content=f"step {number:04d}")
    with measured(store.engine) as thinking:
        claimed = claim(store, session_id, now=clock.advance(1))
        head = store.save(
            think_change(claimed, answer, now=clock()),
            version=claimed.head.version,
            owner=claimed.owner,
            now=clock(),
        )
    assert head.status is Status.EXECUTING
    with measured(store.engine) as executing:
        claimed = claim(store, session_id, now=clock.advance(1))
        change = execute_change(store, claimed, now=clock(), output=f"body of f{number:04d}")
        head = store.save(change, version=claimed.head.version, owner=claimed.owner, now=clock())
    assert head.status is Status.READY
    return thinking, executing


def _assert_same(early: Writes, late: Writes) -> None:
    assert late.statements == early.statements
    assert late.rows == early.rows
    for table, size in early.bytes.items():
        assert late.bytes[table] == pytest.approx(size, rel=0.1), table
    assert late.total_bytes == pytest.approx(early.total_bytes, rel=0.1)


def test_a_tick_at_step_60_writes_what_a_tick_at_step_3_writes(store: Store, clock: Clock) -> None:
    store.create(new_session("long", now=clock(), budgets=Budgets(max_steps=100)), now=clock())
    for number in (1, 2):
        run_step(store, "long", number, now=clock.advance(1))
    early = _tick_writes(store, "long", clock, 3)
    for number in range(4, 60):
        run_step(store, "long", number, now=clock.advance(1))
    late = _tick_writes(store, "long", clock, 60)

    assert store.get("long").step == 60
    for early_tick, late_tick in zip(early, late, strict=True):
        assert early_tick.statements and early_tick.total_bytes  # measured, not vacuous
        _assert_same(early_tick, late_tick)
    thinking, executing = early
    assert thinking.rows == {
        "tickwork_sessions": 0,
        "tickwork_steps": 1,
        "tickwork_calls": 1,
        "tickwork_observations": 0,
        "tickwork_decisions": 0,
        "tickwork_events": 2,
        "tickwork_outbox": 0,
        "tickwork_dead_letters": 0,
        "tickwork_dead_letter_counts": 0,
        "tickwork_dead_letter_totals": 0,
        "tickwork_blobs": 0,
        "tickwork_file_changes": 0,
        "tickwork_archived": 0,
        "tickwork_deliveries": 0,
        "tickwork_environments": 0,
        "tickwork_environment_uses": 0,
        "tickwork_joins": 0,
    }
    assert executing.rows == {
        "tickwork_sessions": 0,
        "tickwork_steps": 0,
        "tickwork_calls": 0,
        "tickwork_observations": 1,
        "tickwork_decisions": 0,
        "tickwork_events": 2,
        "tickwork_outbox": 0,
        "tickwork_dead_letters": 0,
        "tickwork_dead_letter_counts": 0,
        "tickwork_dead_letter_totals": 0,
        "tickwork_blobs": 0,
        "tickwork_file_changes": 0,
        "tickwork_archived": 0,
        "tickwork_deliveries": 0,
        "tickwork_environments": 0,
        "tickwork_environment_uses": 0,
        "tickwork_joins": 0,
    }
    assert thinking.total_bytes < 2_000
    assert executing.total_bytes < 2_000


def test_a_save_turns_the_head_into_its_row_once(
    store: Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save built the head's row values (every text cleaned, the result walked) for its
    UPDATE, and again to return the head as stored: each backend's save builds them once,
    and returns the head the row holds."""
    from tickwork.store import rows

    built: list[str] = []
    head_changes = rows.head_changes

    def counting(head: Any) -> dict[str, Any]:
        built.append(head.id)
        return head_changes(head)

    store.create(new_session("once-1", now=clock()), now=clock())
    monkeypatch.setattr(rows, "head_changes", counting)
    claimed = claim(store, "once-1", now=clock())
    change = think_change(claimed, reply(("read_file", {"path": "a\x00b"})), now=clock())
    change = change.model_copy(
        update={"head": change.head.model_copy(update={"result": {"note": "nul \x00 here"}})}
    )
    saved = store.save(change, version=claimed.head.version, owner=claimed.owner, now=clock())
    assert built == ["once-1"]
    assert saved == store.get("once-1")
    assert saved.result == {"note": "nul \ufffd here"}


def test_a_save_writes_every_column_of_the_head_it_changes(store: Store, clock: Clock) -> None:
    """Both backends' saves write the columns named by `rows.MUTABLE_HEAD` (the Core store's
    update is built once from it, Postgres' statement too): a value `head_changes` gives
    that the tuple does not name would be dropped without an error."""
    from tickwork.store import rows

    store.create(new_session("cols-1", now=clock()), now=clock())
    assert set(rows.head_changes(store.get("cols-1"))) == set(rows.MUTABLE_HEAD)
