"""The approval of an `adopt_patch` call previews the patch of the child it names, found
as the tool finds it, among the session's own children only (never another session's, nor
one outside its tenant)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import update
from tickwork.fsm.values import Head, Status
from tickwork.store.schema import sessions

from tests.api.conftest import Stack
from tests.tasks.conftest import Deployment
from tickwork.testing import until

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"content": name, "tool_calls": [{"name": name, "arguments": arguments}]}


def planner(deployment: Deployment, folder: Path, replies: list[dict[str, Any]]) -> str:
    """A repair planner on a copy of a buggy calc.py in `folder`; its id."""
    workspace = folder / "project"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "calc.py").write_text(BUGGY)
    head = deployment.client.submit(
        "repair",
        {"workspace": str(workspace), "test_command": "true", "role": "planner"},
        model=deployment.script(replies, name="planner"),
    )
    return head.id


def rested(deployment: Deployment, session_id: str, status: Status) -> Head:
    """The session once it is `status` (an AssertionError if it ended otherwise)."""

    def settled() -> Head | None:
        head = deployment.client.get(session_id)
        return head if head.status is status or head.status.terminal else None

    head: Head = until(settled, timeout=90, what=f"{session_id} to be {status.value}")
    assert head.status is status, head.error_message
    return head


def adopting(deployment: Deployment, folder: Path) -> tuple[str, Head]:
    """A planner waiting to adopt (`s2c0`) the patch of its one explorer, which fixed
    calc.py (its write approved by alice); the planner's id and the explorer's head."""
    explorer = deployment.script(
        [call("write_file", path="calc.py", content=FIXED), {"content": "fixed"}],
        name="explorer",
    )
    spawn = call(
        "spawn_agents",
        children=[{"role": "explorer", "input": {"goal": "fix add"}, "model": explorer}],
    )
    session_id = planner(
        deployment, folder, [spawn, call("adopt_patch", child=0), {"content": "adopted"}]
    )
    rested(deployment, session_id, Status.WAITING_CHILDREN)
    (child,) = deployment.client.store.children(session_id)
    rested(deployment, child.id, Status.WAITING_APPROVAL)
    deployment.client.approve(child.id, "s1c0", approver="alice")
    rested(deployment, session_id, Status.WAITING_APPROVAL)
    return session_id, rested(deployment, child.id, Status.COMPLETED)


def preview(stack: Stack, session_id: str) -> dict[str, Any]:
    card = stack.http("alice").get(f"/api/v1/approvals/{session_id}")
    assert card.status_code == 200, card.text
    (waiting,) = card.json()["calls"]
    assert waiting["name"] == "adopt_patch"
    return dict(waiting["preview"])


def test_the_approval_of_an_adoption_previews_the_childs_patch(
    stack: Stack, tmp_path: Path
) -> None:
    session_id, child = adopting(stack.deployment, tmp_path)
    patch = child.result["patch"]
    assert child.status is Status.COMPLETED and "+    return a + b\n" in patch
    outcome = child.result["outcome"]
    assert preview(stack, session_id) == {
        "type": "diff",
        "path": None,
        "note": f"the patch of child 0 ({child.id}, explorer), outcome {outcome}",
        "diff": patch,
    }
    # a child outside the session's tenant (a row written around the runtime) is not read
    engine = stack.deployment.client.store.engine
    with engine.begin() as conn:
        conn.execute(update(sessions).where(sessions.c.id == child.id).values(tenant="other"))
    try:
        hidden = preview(stack, session_id)
    finally:
        with engine.begin() as conn:
            conn.execute(update(sessions).where(sessions.c.id == child.id).values(tenant="default"))
    assert hidden == {
        "type": "diff",
        "path": None,
        "note": "(no child 0 of this session: the call will say so)",
        "diff": "",
    }

    # another session naming that child by its id is shown none of it
    other = planner(stack.deployment, tmp_path / "other", [call("adopt_patch", child=child.id)])
    rested(stack.deployment, other, Status.WAITING_APPROVAL)
    shown = preview(stack, other)
    assert shown["note"] == f"(no child {child.id!r} of this session: the call will say so)"
    assert shown["diff"] == ""
