"""`tickwork --version`: the installed package's version, the one pyproject.toml gives."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_project_version() -> None:
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    done = subprocess.run(
        [sys.executable, "-m", "tickwork", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tickwork {wanted}\n"


def test_an_unreleased_build_is_a_pre_release_of_the_next() -> None:
    """While the CHANGELOG's first section is "Unreleased", the version is a pre-release
    above every release the CHANGELOG lists. A build of main said 0.2.0 while it ran
    runtime level 2: an operator reading `tickwork --version` (or a worker's start line)
    took it for 0.2.0, which ops/RUNBOOK.md "Upgrades" says is level 1."""
    from packaging.version import Version

    version = Version(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])
    headings = [
        line[3:].split()[0]
        for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
        if line.startswith("## ")
    ]
    released = [Version(h) for h in headings if h[0].isdigit()]
    if headings[0] == "Unreleased":
        assert version.is_prerelease and version > max(released), version
    else:
        assert version == Version(headings[0]), version
