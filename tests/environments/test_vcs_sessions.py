"""A repair of a project whose version comes from git (setuptools-scm, hatch-vcs), through
real ticks in the sandbox, its build tools from a package index on loopback: setup used to
fail with "unable to detect version" (the packed source has no .git), and the package's
`from ._version import version` failed (the .gitignore left the file out)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.fsm.values import Status
from tickwork.worker.sandbox.runner import Sandbox, check

from tests.environments.projects import deployment, git, vcs_project
from tests.services import IN_CI
from tickwork.package_index import Index
from tickwork.testing import SessionDriver, call, reply, running_worker

pytestmark = pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)

FIXED = "from ._version import version\n\n\ndef add(a, b):\n    return a + b\n"
SHOW = (
    "python -c 'import importlib.metadata as m, scmpkg; "
    'print("installed", m.version("scmpkg"), "imported", scmpkg.version)\''
)


@pytest.mark.parametrize(
    ("plugin", "after", "expected", "via"),
    [
        ("setuptools-scm", 0, "1.2.3", "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SCMPKG"),
        ("hatch-vcs", 1, "1.2.4.dev1+g", "SETUPTOOLS_SCM_PRETEND_VERSION"),
    ],
)
def test_a_project_versioned_by_git_installs_with_its_checkout_s_version(
    build_index: Index,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    plugin: str,
    after: int,
    expected: str,
    via: str,
) -> None:
    monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", build_index.url)
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", build_index.address)
    source = vcs_project(tmp_path / "src", plugin, tag="v1.2.3", after=after)
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "python -m unittest discover -s tests"},
            replies=[
                reply("which version", call("run_command", command=SHOW)),
                reply("fix", call("write_file", path="scmpkg/__init__.py", content=FIXED)),
                reply("done"),
            ],
        )
        session = driver.run(sid, timeout=240)
    head = session.head
    assert head.status is Status.COMPLETED, head.error_message
    env = head.result["environment"]
    assert env["status"] == "ready" and env.get("missing") == [], env
    version = env["version"]
    assert version["value"].startswith(expected), version
    assert version["via"] == via
    if after:
        assert version["value"].endswith(git(source, "rev-parse", "--short=7", "HEAD"))
    seen = session.observations[0].content
    assert f"installed {version['value']} imported {version['value']}" in seen, seen
    assert head.result["tests"]["passed"] is True
    patch = head.result["patch"]
    assert "+    return a + b" in patch and "_version.py" not in patch
