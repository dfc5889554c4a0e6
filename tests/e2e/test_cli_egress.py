"""A submitter's `egress_allow` narrows the operator's allow-list, never widens it: over the
CLI a wider one is one `error:` line at submit and no session is made."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.conftest import Cli, Deployment


def test_a_submitter_cannot_add_a_host_to_the_allow_list(
    deployment: Deployment, cli: Cli, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("A = 1\n")
    script = deployment.script([{"content": "done"}])
    base = ["submit", "repair", "--workspace", str(project), "--test-cmd", "true"]
    base += ["--model", script]
    before = len(deployment.client.sessions(limit=500))
    for wanted in (["evil.test"], ["pypi.org", "127.0.0.1:5432"], ["*"]):
        given = json.dumps({"network": "all", "egress_allow": wanted})
        refused = cli.inline(*base, "--input", given, ok=False, TICKWORK_EGRESS_ALLOW="pypi.org")
        refused.error(2, "may only narrow this server's allow-list (pypi.org)", wanted[-1])
    assert len(deployment.client.sessions(limit=500)) == before
    given = json.dumps({"network": "all", "egress_allow": ["pypi.org:443"]})
    head = cli.inline(*base, "--input", given, "--json", TICKWORK_EGRESS_ALLOW="pypi.org").json()
    config = deployment.client.get(head["id"]).config
    assert config["egress_allow"] == ["pypi.org:443"] and config["network"] == "all"
