"""Children and the tenant's limits (docs/DESIGN.md section 15, "Children"): a parent
admitted under `max_in_flight` 1 starts its children at once (they are never queued behind
the slot their own waiting parent holds), they count in flight, and the tenant's next
submit waits until the tree is done."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tickwork.fsm.values import Status

from tests.worker.ticking import Ticks


@pytest.fixture
def ticks(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ticks]:
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"default": {"max_in_flight": 1, "max_queued": 5}}))
    monkeypatch.setenv("TICKWORK_TENANTS_FILE", str(tenants))
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def _script(ticks: Ticks, name: str, replies: list[dict[str, object]]) -> str:
    path = ticks.tmp / f"{name}.json"
    path.write_text(json.dumps(replies))
    return f"scripted:{path}"


def test_children_start_at_once_under_a_full_tenant_and_hold_its_slots(ticks: Ticks) -> None:
    child = {"role": "helper", "input": {"task": "look"}}
    children = [{**child, "model": _script(ticks, f"c{i}", [{"content": "seen"}])} for i in (0, 1)]
    spawn = {"name": "spawn_agents", "arguments": {"children": children}}
    parent = ticks.client.submit(
        "tests.jobs:TREE",
        {},
        model=_script(
            ticks, "parent", [{"content": "split", "tool_calls": [spawn]}, {"content": "ok"}]
        ),
    )
    assert parent.status is Status.READY  # the tenant's one slot
    assert ticks.run(parent.id).status is Status.WAITING_CHILDREN
    kids = ticks.store.children(parent.id)
    assert len(kids) == 2 and {k.status for k in kids} == {Status.READY}
    assert {(k.tenant, k.submitted_by) for k in kids} == {(parent.tenant, parent.submitted_by)}
    # the tree holds the tenant's slots: the next submit waits
    other = ticks.client.submit(
        "tests.jobs:TEST", {}, model=_script(ticks, "o", [{"content": "x"}])
    )
    assert other.status is Status.QUEUED
    for kid in kids:
        assert ticks.run(kid.id).status is Status.COMPLETED
    assert ticks.run(parent.id).status is Status.COMPLETED
    assert ticks.store.get(other.id).status is Status.QUEUED  # admitted by the relay, not here
