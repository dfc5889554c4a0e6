"""Over the HTTP API, a repair job's `egress_allow` may only narrow the server's allow-list
(TICKWORK_EGRESS_ALLOW): a wider one is a 422 naming it, and no session is made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Stack


def test_a_submitter_cannot_add_a_host_over_the_api(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", "pypi.org,*.pythonhosted.org")
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("A = 1\n")
    settings = stack.deployment.settings
    http = stack.http("sam")

    def body(**extra: Any) -> dict[str, Any]:
        data = {"workspace": str(project), "test_command": "true", **extra}
        return {
            "kind": "repair",
            "input": data,
            "model": stack.deployment.script([{"content": "done"}]),
        }

    settings.workspace_roots = [tmp_path]
    try:
        before = len(stack.deployment.client.sessions(limit=500))
        for wanted, named in [
            (["evil.test"], "evil.test"),
            (["files.pythonhosted.org", "10.0.0.1:80"], "10.0.0.1:80"),
            (["pythonhosted.org"], "pythonhosted.org"),
            (["*"], "*"),
        ]:
            refused = http.post("/api/v1/sessions", json=body(egress_allow=wanted))
            assert refused.status_code == 422, refused.text
            message = refused.json()["message"]
            assert "may only narrow this server's allow-list" in message and named in message
        bad = http.post("/api/v1/sessions", json=body(network="sometimes"))
        assert bad.status_code == 422 and '"setup"' in bad.json()["message"]
        assert len(stack.deployment.client.sessions(limit=500)) == before
        accepted = http.post(
            "/api/v1/sessions", json=body(network="all", egress_allow=["files.pythonhosted.org"])
        )
        assert accepted.status_code == 201, accepted.text
        config = stack.deployment.client.get(accepted.json()["id"]).config
        assert config["egress_allow"] == ["files.pythonhosted.org"]
    finally:
        settings.workspace_roots = []
