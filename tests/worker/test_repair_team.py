"""A repair planner's ticks in-process: it may call only its role's tools, an unknown role
or an adoption without children is an error observation, and a spawned explorer starts on
the planner's files at the spawn step with its role's prompt, tools and budgets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Status
from tickwork.worker.jobs.repair import team
from tickwork.worker.sandbox.runner import DEMO_UNCONFINED
from tickwork.worker.tick.advance import advance

from tests.worker.ticking import Ticks


@pytest.fixture
def ticks(sqlite_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(sqlite_url, tmp_path)
    yield found
    found.close()


def planner(ticks: Ticks, replies: list[dict[str, Any]]) -> str:
    project = ticks.tmp / "project"
    project.mkdir(exist_ok=True)
    (project / "calc.py").write_text("X = 1\n")
    script = ticks.tmp / "planner.json"
    script.write_text(json.dumps(replies))
    data = {"workspace": str(project), "test_command": "true", "role": "planner"}
    head = ticks.client.submit(
        "repair", data, model=f"scripted:{script}", own_config={DEMO_UNCONFINED: True}
    )
    return head.id


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"content": name, "tool_calls": [{"name": name, "arguments": arguments}]}


def test_a_planner_is_told_what_it_cannot_do(ticks: Ticks) -> None:
    explorer = {"role": "explorer", "input": {"goal": "fix it"}}
    session = planner(
        ticks,
        [
            call("write_file", path="calc.py", content="X = 2\n"),  # not a planner's tool
            call("spawn_agents", children=[{"role": "wizard", "input": {"goal": "x"}}]),
            call("spawn_agents", children=[{**explorer, "input": {"goal": "x", "budget": 1}}]),
            call("adopt_patch", child=0),
            {"content": "giving up"},
        ],
    )
    head = ticks.run(session)
    # adopt_patch asks a person first, as write_file does; write_file itself asked nobody
    assert head.status is Status.WAITING_APPROVAL and head.awaiting == ("s4c0",)
    ticks.client.approve(session, "s4c0", approver="alice")
    head = ticks.run(session)
    assert head.status is Status.COMPLETED
    seen = list(ticks.store.load(session).observations)
    assert [o.is_error for o in seen] == [True, True, True, True]
    assert "unknown tool 'write_file'; the tools are: list_files" in seen[0].content
    assert "spawn_agents" in seen[0].content and "adopt_patch" in seen[0].content
    assert (
        "unknown role 'wizard'" in seen[1].content
        and "explorer, planner, reviewer" in seen[1].content
    )
    assert "unknown key(s) budget" in seen[2].content
    assert "started no children" in seen[3].content
    assert ticks.store.children(session) == []
    assert (ticks.tmp / "project" / "calc.py").read_text() == "X = 1\n"


def test_an_explorer_starts_on_the_planners_files_in_its_role(ticks: Ticks) -> None:
    session = planner(
        ticks,
        [
            call("run_tests"),
            call(
                "spawn_agents",
                children=[{"role": "explorer", "input": {"goal": "fix X", "notes": "try 2"}}],
            ),
        ],
    )
    root = ticks.store.get(session)
    for _ in range(4):  # think, run the tests, think, spawn
        advance(ticks.rt, session, ticks.store.get(session).version)
    assert ticks.store.get(session).status is Status.WAITING_CHILDREN
    (child,) = ticks.store.children(session)
    assert child.role == "explorer" and child.parent_id == session
    # the planner's files at the spawn step are the source's: the same manifest blob
    assert child.config["files"] == {"base": root.config["files"]["base"]}
    assert child.config["test_command"] == "true" and child.config[DEMO_UNCONFINED] is True
    assert child.config["system_prompt"] == team.EXPLORER_PROMPT
    assert "write_file" in child.config["tools"] and "spawn_agents" not in child.config["tools"]
    assert child.budgets.max_steps == 30  # the explorer role's
    assert "fix X" in child.config["user_prompt"] and "try 2" in child.config["user_prompt"]


def test_a_root_in_a_role_takes_it_as_configured_as_a_child_would(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TICKWORK_ROLES_FILE's roles hold for a root too: its prompt, tools, model and
    budget defaults (what the submit names itself first); an unknown role is refused."""
    roles = tmp_path / "roles.json"
    roles.write_text(
        json.dumps(
            {
                "repair": {
                    "planner": {
                        "system_prompt": "Plan from the file.",
                        "model": "openai:gpt-4o-mini",
                        "budgets": {"max_steps": 7, "max_cost_usd": 0.5},
                    },
                    "lead": {"system_prompt": "Lead.", "tools": ["list_files", "spawn_agents"]},
                }
            }
        )
    )
    monkeypatch.setenv("TICKWORK_ROLES_FILE", str(roles))
    ticks = Ticks(sqlite_url, tmp_path)
    try:
        project = tmp_path / "project"
        project.mkdir()
        data = {"workspace": str(project), "test_command": "true"}
        client = ticks.client

        planned = client.submit("repair", {**data, "role": "planner"})
        assert planned.config["system_prompt"] == "Plan from the file."
        assert planned.config["role"] == "planner" and "spawn_agents" in planned.config["tools"]
        assert planned.model == "openai:gpt-4o-mini"
        assert (planned.budgets.max_steps, planned.budgets.max_cost_usd) == (7, 0.5)

        named = client.submit(
            "repair", {**data, "role": "planner"}, model="openai:gpt-4o", budgets={"max_steps": 3}
        )
        assert named.model == "openai:gpt-4o" and named.budgets.max_steps == 3
        assert named.budgets.max_cost_usd == 0.5  # the role's, where the submit named none

        led = client.submit("repair", {**data, "role": "lead"}, model="openai:gpt-4o")
        assert led.config["tools"] == ["list_files", "spawn_agents"]
        assert led.config["system_prompt"] == "Lead."

        with pytest.raises(InvalidInput) as caught:
            client.submit("repair", {**data, "role": "boss"}, model="openai:gpt-4o")
        said = str(caught.value)
        assert "unknown role 'boss'" in said and "explorer, lead, planner, reviewer" in said
    finally:
        ticks.close()


def test_an_unknown_tool_is_told_with_recall_among_the_tools(ticks: Ticks) -> None:
    """Under a context policy every session is offered `recall` and it answers; the list
    an unknown tool is told left it out (found by an outside run)."""
    project = ticks.tmp / "project"
    project.mkdir()
    script = ticks.tmp / "script.json"
    script.write_text(json.dumps([call("nosuch"), {"content": "done"}]))
    data = {"workspace": str(project), "test_command": "true"}
    session = ticks.client.submit(
        "repair", data, model=f"scripted:{script}", own_config={DEMO_UNCONFINED: True}
    ).id
    assert ticks.run(session).status is Status.COMPLETED
    (seen,) = ticks.store.load(session).observations
    assert seen.is_error and "unknown tool 'nosuch'; the tools are: list_files" in seen.content
    assert seen.content.endswith(", recall"), seen.content
