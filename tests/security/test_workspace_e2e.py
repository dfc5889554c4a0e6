"""The repair toolkit's confinement, end to end: through real ticks, a path that leaves the
workspace is refused with an observation, and a destructive command hidden in shell syntax
waits for a person. The session works on its own copy of the files: symlinks of the source
are not part of it, so the symlinks here are made by the session's first command, and the
submitted directory never changes. (The rules themselves are tested in tests/worker/tools.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import CallState, Status

from tests.security.conftest import Env, observations

SECRET = "TOP SECRET: the launch codes"


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace with a file and symlinks that lead out of it, and the outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("inside\n")
    (workspace / "victim.txt").write_text("keep me\n")
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    (workspace / "linkdir").symlink_to(outside)
    return workspace, outside


def links(outside: Path) -> dict[str, Any]:
    """A command making, in the session's copy, the symlinks that lead out of it."""
    command = f"ln -s {outside}/secret.txt link.txt && ln -s {outside} linkdir"
    return {"name": "run_command", "arguments": {"command": command}}


def repair(env: Env, workspace: Path, calls: list[dict[str, Any]]) -> str:
    replies = [{"content": f"step {i}", "tool_calls": [c]} for i, c in enumerate(calls)]
    return env.submit(
        [*replies, {"content": "done"}],
        kind="repair",
        data={"workspace": str(workspace), "test_command": "true"},
    )


ESCAPES = [
    pytest.param("read_file", {"path": "../outside/secret.txt"}, "'..'", id="dotdot"),
    pytest.param("read_file", {"path": "a/../../outside/secret.txt"}, "'..'", id="dotdot-deep"),
    pytest.param("read_file", {"path": "{outside}/secret.txt"}, "absolute", id="absolute"),
    pytest.param("read_file", {"path": "~/secret.txt"}, "home-relative", id="home"),
    pytest.param("read_file", {"path": "link.txt"}, "symlink", id="symlink-file"),
    pytest.param("read_file", {"path": "linkdir/secret.txt"}, "symlink", id="symlink-dir"),
    pytest.param("list_files", {"path": ".."}, "'..'", id="list-dotdot"),
    pytest.param("list_files", {"path": "linkdir"}, "symlink", id="list-symlink"),
    pytest.param(
        "search", {"pattern": "SECRET", "path": "linkdir"}, "symlink", id="search-symlink"
    ),
]


@pytest.mark.parametrize(("tool", "arguments", "fragment"), ESCAPES)
def test_a_path_out_of_the_workspace_is_refused_through_a_tick(
    env: Env, places: tuple[Path, Path], tool: str, arguments: dict[str, Any], fragment: str
) -> None:
    workspace, outside = places
    arguments = {
        k: v.replace("{outside}", str(outside)) if isinstance(v, str) else v
        for k, v in arguments.items()
    }
    calls = [links(outside), {"name": tool, "arguments": arguments}]
    session_id = repair(env, workspace, calls)
    head = env.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    session = env.load(session_id)
    assert not observations(session)["s1c0"][1]
    text, is_error = observations(session)["s2c0"]
    assert is_error and fragment in text, text
    assert SECRET not in session.model_dump_json()


def test_symlinks_of_the_source_are_not_part_of_the_sessions_files(
    env: Env, places: tuple[Path, Path]
) -> None:
    workspace, _ = places
    session_id = repair(env, workspace, [{"name": "list_files", "arguments": {}}])
    assert env.run(session_id).status is Status.COMPLETED
    listed, _ = observations(env.load(session_id))["s1c0"]
    assert listed.split() == ["a.txt", "victim.txt"]


def test_search_of_the_workspace_skips_symlinks_that_lead_out(
    env: Env, places: tuple[Path, Path]
) -> None:
    workspace, outside = places
    session_id = repair(
        env,
        workspace,
        [
            links(outside),
            {"name": "search", "arguments": {"pattern": "SECRET"}},
            {"name": "list_files", "arguments": {}},
        ],
    )
    assert env.run(session_id).status is Status.COMPLETED
    session = env.load(session_id)
    assert SECRET not in session.model_dump_json()
    listed, _ = observations(session)["s3c0"]
    assert "a.txt" in listed and "secret.txt" not in listed


def test_a_path_with_a_nul_byte_is_refused_on_sqlite(
    sqlite_env: Env, places: tuple[Path, Path]
) -> None:
    workspace, _ = places
    session_id = repair(
        sqlite_env, workspace, [{"name": "read_file", "arguments": {"path": "a.txt\x00"}}]
    )
    assert sqlite_env.run(session_id).status is Status.COMPLETED
    text, is_error = observations(sqlite_env.load(session_id))["s1c0"]
    # refused for its NUL, or (once NUL is replaced when stored) as a file that is not there
    assert is_error and ("NUL" in text or "does not exist" in text), text


def test_a_write_out_of_the_workspace_is_refused_even_when_approved(
    env: Env, places: tuple[Path, Path]
) -> None:
    workspace, outside = places
    targets = ["../outside/pwned.txt", "linkdir/pwned.txt", str(outside / "pwned.txt")]
    writes = [{"name": "write_file", "arguments": {"path": p, "content": "pwned"}} for p in targets]
    session_id = repair(env, workspace, [links(outside), *writes])
    for step in range(2, len(targets) + 2):
        head = env.run(session_id)
        assert head.status is Status.WAITING_APPROVAL and head.awaiting == (f"s{step}c0",)
        env.client.approve(session_id, f"s{step}c0", approver="careless")
    assert env.run(session_id).status is Status.COMPLETED
    seen = observations(env.load(session_id))
    for step in range(2, len(targets) + 2):
        text, is_error = seen[f"s{step}c0"]
        assert is_error, text
        assert any(f in text for f in ("leads outside the workspace", "'..'", "absolute")), text
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


HIDDEN_RM = [
    "sh -c 'rm -f victim.txt'",
    "bash -lc 'rm -f victim.txt'",
    "true; rm -f victim.txt",
    "true && rm -f victim.txt",
    "false || rm -f victim.txt",
    "echo `rm -f victim.txt`",
    "echo $(rm -f victim.txt)",
    "FOO=1 rm -f victim.txt",
    "env rm -f victim.txt",
    "/bin/rm -f victim.txt",
    "ls victim.txt | xargs rm -f",
    "find . -name victim.txt -delete",
    "echo keep > victim.txt",
]


@pytest.mark.parametrize("command", HIDDEN_RM)
def test_a_hidden_destructive_command_waits_for_a_person_and_a_reject_runs_nothing(
    sqlite_env: Env, places: tuple[Path, Path], command: str
) -> None:
    workspace, _ = places
    session_id = repair(
        sqlite_env, workspace, [{"name": "run_command", "arguments": {"command": command}}]
    )
    head = sqlite_env.run(session_id)
    assert head.status is Status.WAITING_APPROVAL and head.awaiting == ("s1c0",)
    call = sqlite_env.load(session_id).call("s1c0")
    assert call is not None and call.state is CallState.AWAITING_APPROVAL
    sqlite_env.client.reject(session_id, "s1c0", "not on my watch", approver="ops")
    assert sqlite_env.run(session_id).status is Status.COMPLETED
    text, is_error = observations(sqlite_env.load(session_id))["s1c0"]
    assert is_error and text == "rejected by ops: not on my watch"
    assert sqlite_env.client.read_file(session_id, "victim.txt") == b"keep me\n"
    assert (workspace / "victim.txt").read_text() == "keep me\n"


def test_an_approved_destructive_command_runs_once_and_a_safe_one_needs_no_approval(
    env: Env, places: tuple[Path, Path]
) -> None:
    workspace, _ = places
    session_id = repair(
        env,
        workspace,
        [
            {"name": "run_command", "arguments": {"command": "cat a.txt"}},
            {"name": "run_command", "arguments": {"command": "true && rm victim.txt"}},
        ],
    )
    head = env.run(session_id)
    assert head.status is Status.WAITING_APPROVAL and head.awaiting == ("s2c0",)
    assert observations(env.load(session_id))["s1c0"][0].startswith("exit code: 0")
    assert env.client.read_file(session_id, "victim.txt") == b"keep me\n"
    env.client.approve(session_id, "s2c0", approver="ops")
    assert env.run(session_id).status is Status.COMPLETED
    assert env.client.read_file(session_id, "victim.txt") is None  # gone from its files
    assert (workspace / "victim.txt").exists()  # the submitted directory is never changed
    text, is_error = observations(env.load(session_id))["s2c0"]
    assert not is_error and text.startswith("exit code: 0"), json.dumps(text)


def test_a_refused_write_through_a_link_does_not_take_the_file_it_names(
    sqlite_env: Env, places: tuple[Path, Path]
) -> None:
    """The session's command makes `linkdir` a link to a folder outside; a write (and a
    patch) of `linkdir/secret.txt`, approved by someone careless, is refused. The tick then
    looked at the paths the call named for what it changed, through the link: the outside
    file became one of the session's files, in its patch and in its copy for the next
    command to read. The files of the session are those of its copy alone."""
    workspace, outside = places
    patch = "--- a/linkdir/secret.txt\n+++ b/linkdir/secret.txt\n@@ -1 +1 @@\n-x\n+y\n"
    calls = [
        links(outside),
        {"name": "write_file", "arguments": {"path": "linkdir/secret.txt", "content": "x"}},
        {"name": "apply_patch", "arguments": {"patch": patch}},
    ]
    session_id = repair(sqlite_env, workspace, calls)
    for step in (2, 3):
        head = sqlite_env.run(session_id)
        assert head.status is Status.WAITING_APPROVAL and head.awaiting == (f"s{step}c0",)
        sqlite_env.client.approve(session_id, f"s{step}c0", approver="careless")
    head = sqlite_env.run(session_id)
    assert head.status is Status.COMPLETED, head.error_message
    seen = observations(sqlite_env.load(session_id))
    assert seen["s2c0"][1] and seen["s3c0"][1], seen
    files, _ = sqlite_env.client.files.manifest(head)
    assert not any(p.startswith("linkdir") for p in files), files
    assert SECRET not in json.dumps(head.result)
    assert (outside / "secret.txt").read_text() == SECRET
