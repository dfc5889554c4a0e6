"""Fixtures of the environment tests."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import WHEELS
from tests.services import missing
from tickwork.package_index import Index, fetch_wheels, serving


@pytest.fixture(scope="session")
def build_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """An index of setuptools (77 or newer: it reads PEP 639's `license = "MIT"`),
    setuptools-scm, hatchling (with the `editables` it asks for an editable build) and
    hatch-vcs (fetched once per machine into the tests' wheel cache)."""
    try:
        WHEELS.mkdir(parents=True, exist_ok=True)
        with (WHEELS / "vcs.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            fetch_wheels(
                WHEELS / "vcs",
                *("setuptools>=77", "setuptools-scm>=8", "hatchling", "hatch-vcs", "editables"),
            )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        said = getattr(exc, "stderr", b"") or b""
        missing("the package registry (pip download setuptools-scm)", said.decode()[-300:] or exc)
    folder = tmp_path_factory.mktemp("vcs-wheels")
    for wheel in (WHEELS / "vcs").glob("*.whl"):
        shutil.copy(wheel, folder)
    with serving(folder) as served:
        yield served
