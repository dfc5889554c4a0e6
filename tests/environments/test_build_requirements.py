"""A project's build requirements, as `--setup auto` installs them: the newest the index
has that satisfy them, as pip's build isolation would, not an older one the sandbox's
Python happens to hold (its venv sees the system's packages)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.fsm.values import Status
from tickwork.worker.sandbox.runner import Sandbox, check

from tests.environments.projects import deployment, project
from tests.services import IN_CI
from tickwork.package_index import Index
from tickwork.testing import SessionDriver, call, reply, running_worker

pytestmark = pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)

SHOW = "python -c 'import setuptools; print(\"built with\", setuptools.__file__)'"


def test_a_build_requirement_the_system_satisfies_is_still_the_newest(
    build_index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wrapt requires `setuptools>=62` and declares `license = "BSD-2-Clause"`, which only
    setuptools 77 reads: Debian's setuptools 66 satisfied the range, so setup kept it and
    every wrapt session ended ENV_SETUP ("`project.license` must be valid")."""
    monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", build_index.url)
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", build_index.address)
    source = project(tmp_path / "src")
    pyproject = (source / "pyproject.toml").read_text()
    (source / "pyproject.toml").write_text(
        pyproject.replace('version = "0.1.0"', 'version = "0.1.0"\nlicense = "MIT"')
    )
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "python -m unittest discover -s tests"},
            replies=[reply("which setuptools", call("run_command", command=SHOW)), reply("done")],
        )
        session = driver.run(sid, timeout=240)
    head = session.head
    assert head.status is Status.COMPLETED, head.error_message
    env = head.result["environment"]
    assert env["status"] == "ready" and "calcpkg" not in env["missing"], env
    assert "built with /env/lib/" in session.observations[0].content
    tests = head.result["tests"]  # they ran: add() still subtracts
    assert tests["passed"] is False and "FAILED (failures=1)" in tests["output"], tests
