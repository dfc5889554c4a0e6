"""Fixtures of the environment tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import cached_wheels
from tickwork.package_index import Index, serving


@pytest.fixture(scope="session")
def build_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """An index of setuptools (77 or newer: it reads PEP 639's `license = "MIT"`),
    setuptools-scm, hatchling (with the `editables` it asks for an editable build) and
    hatch-vcs (fetched once per machine into the tests' wheel cache)."""
    wheels = cached_wheels(
        "vcs",
        *("setuptools>=77", "setuptools-scm>=8", "hatchling", "hatch-vcs", "editables"),
        into=tmp_path_factory.mktemp("vcs-wheels"),
    )
    with serving(wheels) as served:
        yield served
