"""`tickwork ls --tree` and `tickwork show` of a session tree (docs/DESIGN.md section 16)."""

from __future__ import annotations

import json

from tests.e2e.conftest import Cli, Deployment
from tickwork.testing import until


def test_ls_tree_and_show_draw_the_tree_with_each_child_s_status(
    deployment: Deployment, cli: Cli
) -> None:
    sink = str(deployment.sink)
    children = [
        {
            "role": role,
            "input": {"task": role, "sink": sink},
            "model": deployment.script(replies, name=role),
        }
        for role, replies in (
            ("explorer", [{"content": "found it"}]),
            ("reviewer", [{"error": {"transient": False, "message": "no luck"}}]),
        )
    ]
    spawn = {"name": "spawn_agents", "arguments": {"children": children}}
    script = deployment.script([{"content": "split", "tool_calls": [spawn]}, {"content": "done"}])
    root = cli(
        "submit",
        "tests.jobs:TREE",
        "--input",
        json.dumps({"sink": sink}),
        "--model",
        script,
        "--json",
    ).json()["id"]
    with deployment.worker():
        until(lambda: deployment.client.get(root).status.terminal, timeout=90, what="the tree")
    [child_ok, child_failed] = deployment.client.store.children(root)

    drawn = cli("ls", "--tree").stdout
    assert root in drawn and child_ok.id in drawn and child_failed.id in drawn
    assert "explorer" in drawn and "reviewer" in drawn and "MODEL_ERROR" in drawn
    # children are drawn under their root, not listed on their own
    assert drawn.index(root) < drawn.index(child_ok.id)
    [tree] = cli("ls", "--tree", "--json").json()
    assert tree["id"] == root
    assert [(c["id"], c["status"]) for c in tree["children"]] == [
        (child_ok.id, "completed"),
        (child_failed.id, "failed"),
    ]

    shown = cli("show", child_failed.id).stdout
    assert "spawned by" in shown and f"{root} (s1c0) as reviewer" in shown
    assert child_ok.id in shown  # the whole tree, from its root
    view = cli("show", root, "--json").json()
    assert [c["role"] for c in view["tree"]["children"]] == ["explorer", "reviewer"]
    assert view["forks"] == []


def test_watch_left_at_waiting_children_draws_the_tree_and_says_what_to_do(
    deployment: Deployment, cli: Cli
) -> None:
    """`watch` of a parent stopped at `waiting_children` with `session ... is
    waiting_children` alone: it had neither ended nor asked a person, and nothing said the
    children are what to follow (one of them waiting for a person held it)."""
    sink = str(deployment.sink)
    slow = deployment.script([{"content": "slow", "delay_s": 30}], name="slow")
    child = {"role": "explorer", "input": {"task": "x", "sink": sink}, "model": slow}
    spawn = {"name": "spawn_agents", "arguments": {"children": [child]}}
    script = deployment.script([{"content": "split", "tool_calls": [spawn]}, {"content": "done"}])
    root = cli(
        "submit", "tests.jobs:TREE", "--input", json.dumps({"sink": sink}), "--model", script
    ).stdout.strip()
    with deployment.worker():
        watched = cli("watch", root, "--timeout", "60")
        [spawned] = deployment.client.store.children(root)
    said = " ".join(watched.stdout.split())
    assert f"session {root} is waiting_children" in said, said
    assert spawned.id in said and "explorer" in said  # the tree, drawn
    assert "`tickwork watch CHILD` follows one" in said
