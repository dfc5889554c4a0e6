"""Over the HTTP API a repair job's local paths must lie under TICKWORK_WORKSPACE_ROOTS; the
CLI and the Python client are trusted."""

from __future__ import annotations

from pathlib import Path

from tests.api.conftest import Stack


def _repair(stack: Stack, **source: str) -> dict[str, object]:
    return {
        "kind": "repair",
        "input": {**source, "test_command": "true"},
        "model": stack.deployment.script([{"content": "done"}]),
    }


def test_local_paths_outside_the_roots_are_422(stack: Stack, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("A = 1\n")
    settings = stack.deployment.settings
    http = stack.http("sam")

    refused = http.post("/api/v1/sessions", json=_repair(stack, workspace=str(project)))
    assert refused.status_code == 422, refused.text
    assert "does not accept local paths" in refused.json()["message"]
    assert "TICKWORK_WORKSPACE_ROOTS" in refused.json()["message"]
    as_repo = http.post("/api/v1/sessions", json=_repair(stack, repo=f"file://{project}"))
    assert as_repo.status_code == 422 and "local paths" in as_repo.json()["message"]

    settings.workspace_roots = [tmp_path / "elsewhere"]
    try:
        outside = http.post("/api/v1/sessions", json=_repair(stack, workspace="/etc"))
        assert outside.status_code == 422, outside.text
        assert "outside the directories this server accepts" in outside.json()["message"]
        settings.workspace_roots = [tmp_path]
        accepted = http.post("/api/v1/sessions", json=_repair(stack, workspace=str(project)))
        assert accepted.status_code == 201, accepted.text
    finally:
        settings.workspace_roots = []
    # the same directory from the trusted Python client needs no root
    head = stack.deployment.client.submit(
        "repair",
        {"workspace": str(project), "test_command": "true"},
        model=stack.deployment.script([{"content": "done"}]),
    )
    assert head.config["source"]["path"] == str(project.resolve())
