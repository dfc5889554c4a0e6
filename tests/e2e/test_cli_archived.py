"""Archived repair sessions: `ls --archived` lists them, `patch` prints their patch, and a fork
runs on workers that do not know the archive's URL (the client that forks puts the blobs
back into the artifact store)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.fsm.errors import SessionArchived, SessionNotFound
from tickwork.fsm.values import Status

from tests.e2e.conftest import Cli, Deployment
from tickwork.cli_demo import DEMO_SCRIPT, demo_input, prepare_demo_workspace
from tickwork.testing import running_worker

WRITE = "s3c0"
FIX = "-    return sum(numbers) / (len(numbers) + 1)\n+    return sum(numbers) / len(numbers)\n"


def archived_demo(deployment: Deployment, cli: Cli, archive: Path) -> tuple[str, str]:
    """A completed demo session, archived by `tickwork gc` to `archive` with the blobs only
    it used; its id and patch."""
    workspace = prepare_demo_workspace(deployment.settings.state_dir)
    with deployment.worker():
        head = deployment.client.submit(
            "repair", demo_input(workspace), model=f"scripted:{DEMO_SCRIPT}"
        )
        assert deployment.client.wait(head.id, timeout=60).status is Status.WAITING_APPROVAL
        deployment.client.approve(head.id, WRITE, approver="alice")
        done = deployment.client.wait(head.id, timeout=60)
    assert done.status is Status.COMPLETED, done.error_message
    assert FIX in done.result["patch"]
    report = cli.inline(
        "gc",
        "--json",
        TICKWORK_RETENTION_COMPLETED_S="0",
        TICKWORK_RETENTION_ARCHIVE_URL=archive.as_uri(),
    ).json()
    assert report["archived"] == 1 and report["blobs_moved"] > 0, report
    return head.id, done.result["patch"]


def test_an_archived_session_is_listed_patched_and_forked(
    deployment: Deployment, cli: Cli, tmp_path: Path
) -> None:
    archive = tmp_path / "elsewhere"  # not the state dir's archive, the workers' default
    session_id, patch = archived_demo(deployment, cli, archive)
    env = {"TICKWORK_RETENTION_ARCHIVE_URL": archive.as_uri()}

    listed = cli.inline("ls", "--archived", "--json", **env).json()
    assert [(e["id"], e["status"], e["kind"], e["tenant"]) for e in listed] == [
        (session_id, "completed", "repair", "default")
    ]
    assert session_id in cli.inline("ls", "--archived", **env).stdout
    assert cli.inline("ls", "--archived", "--status", "failed", **env).stdout.startswith(
        "no archived sessions match"
    )
    cli.inline("ls", "--archived", "--error-code", "LOOP", ok=False).error(2, "--archived")
    assert cli.inline("ls", "--json").json() == []  # no longer live
    # what works on live sessions only said "no session ...; list sessions with `tickwork
    # ls`", though `show` reads it back: it says the session is archived and what reads it
    for command in (("cancel", session_id), ("approve", session_id[:8], WRITE, "--as", "al")):
        cli.inline(*command, ok=False, **env).error(
            1, f"session {session_id} is archived", f"`tickwork show {session_id}` reads it"
        )
    with pytest.raises(SessionArchived, match=r"is archived .*`archived\("):
        deployment.client.cancel(session_id[:8], by="al")
    with pytest.raises(SessionNotFound) as missing:
        deployment.client.cancel("nosuch-session", by="al")
    assert not isinstance(missing.value, SessionArchived)
    assert cli.inline("patch", session_id, **env).stdout == patch
    shown = cli.inline("show", session_id, "--json", **env).json()
    # who submitted it, as a live session's row says, and its dates as the rest's: `...Z`
    # (the archive's rows and `archived.at` gave `+00:00`)
    assert listed[0]["submitted_by"] == shown["head"]["submitted_by"]
    for key in ("created_at", "finished_at", "archived_at"):
        assert listed[0][key].endswith("Z"), listed[0]
    assert shown["archived"]["at"] == listed[0]["archived_at"]

    fork = cli.inline(
        "fork", session_id, "--from-step", "3", "--id", "revived", "--json", **env
    ).json()
    assert fork["parent_id"] == session_id
    # a worker of another host (nothing in its cache) without the archive's URL: the blobs
    # must be back in the artifact store
    other = deployment.settings.model_copy(update={"workspaces_dir": tmp_path / "host-b"})
    with running_worker(other, queues=[other.queue]):
        head = deployment.client.wait("revived", timeout=60)

    assert head.status is Status.COMPLETED, head.error_message
    assert head.result["patch"] == patch
    assert head.result["tests"]["passed"] is True
    revived = cli.inline("show", "revived", "--json", **env).json()
    assert revived["forked_from"]["at"].endswith("Z"), revived["forked_from"]
    forks = cli.inline("show", session_id, "--json", **env).json()["forks"]
    assert [f["id"] for f in forks] == ["revived"] and forks[0]["created_at"].endswith("Z")


def test_an_archived_session_looked_for_in_another_archive_names_the_setting(
    deployment: Deployment, cli: Cli, tmp_path: Path
) -> None:
    session_id, _ = archived_demo(deployment, cli, tmp_path / "elsewhere")
    # without the URL it was archived under, the state dir's archive is read: it said only
    # "archive object day=.../X.jsonl.gz is not under .../archive"
    for command in (("show", session_id), ("patch", session_id)):
        cli.inline(*command, ok=False).error(
            1, f"session {session_id} was archived to day=", "TICKWORK_RETENTION_ARCHIVE_URL"
        )


def test_an_archived_listing_of_several_tenants_says_whose_each_session_is() -> None:
    # before, `ls --archived --tenant '*'` listed every tenant's sessions without saying
    # whose (`ls --tenant '*'` has a TENANT column), and --json had no tenant
    from rich.console import Console

    from tickwork.render import archived_table

    def entry(session_id: str, tenant: str) -> dict[str, object]:
        at = "2026-12-06T00:30:00+00:00"
        return {
            "id": session_id,
            "status": "completed",
            "kind": "repair",
            "tenant": tenant,
            "parent_id": None,
            "fork_step": None,
            "created_at": at,
            "finished_at": at,
            "archived_at": at,
            "location": "day=2026-12-06/x",
        }

    def shown(*entries: dict[str, object]) -> str:
        console = Console(width=200, record=True)
        console.print(archived_table(entries))
        return console.export_text()

    several = shown(entry("s-a", "team-a"), entry("s-b", "team-b"))
    assert "TENANT" in several
    assert [line.split()[-1] for line in several.splitlines() if line.strip().startswith("s-")] == [
        "team-a",
        "team-b",
    ]
    assert "TENANT" not in shown(entry("s-a", "team-a"))
