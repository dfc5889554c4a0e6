"""Small projects for the environment tests: a package with a test, and its pieces."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tickwork.worker.config.settings import Settings

from tickwork.testing import embedded_settings

#: the lease of these tests' sessions: none kills a worker, and on a loaded CI machine a
#: setup's pip beside SQLite's other writers may keep a renewal waiting past the 3 s lease
#: `embedded_settings` gives tests of recovery (the setup is then killed as fenced)
SETUP_LEASE_S = 20.0


def deployment(folder: Path, **overrides: Any) -> Settings:
    """`embedded_settings` for sessions that build environments, with a longer lease."""
    return embedded_settings(folder, **{"lease_s": SETUP_LEASE_S, **overrides})


PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"
dependencies = [{deps}]

[project.optional-dependencies]
test = ["pytest"]

[tool.setuptools]
packages = ["{package}"]
"""


def project(
    folder: Path,
    *,
    name: str = "calcpkg",
    deps: tuple[str, ...] = (),
    body: str = "def add(a, b):\n    return a - b\n",
    test: str | None = None,
) -> Path:
    """A package `name` (module `<name>/__init__.py` holding `body`) with a pyproject and
    a test file (default: a unittest of `add`)."""
    package = name.replace("-", "_")
    folder.mkdir(parents=True, exist_ok=True)
    quoted = ", ".join(f'"{d}"' for d in deps)
    (folder / "pyproject.toml").write_text(
        PYPROJECT.format(name=name, deps=quoted, package=package)
    )
    (folder / package).mkdir(exist_ok=True)
    (folder / package / "__init__.py").write_text(body)
    tests = folder / "tests"
    tests.mkdir(exist_ok=True)
    (tests / f"test_{package}.py").write_text(
        test
        or (
            "import unittest\n\n"
            f"from {package} import add\n\n\n"
            "class T(unittest.TestCase):\n"
            "    def test_add(self):\n"
            "        self.assertEqual(add(2, 3), 5)\n"
        )
    )
    return folder


#: the build configuration of a project whose version comes from git, per plugin
VCS_BUILDS = {
    "setuptools-scm": """\
[build-system]
requires = ["setuptools>=64", "setuptools-scm>=8"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
dynamic = ["version"]

[tool.setuptools]
packages = ["{name}"]

[tool.setuptools_scm]
version_file = "{name}/_version.py"
""",
    "hatch-vcs": """\
[build-system]
requires = ["hatchling", "hatch-vcs"]
build-backend = "hatchling.build"

[project]
name = "{name}"
dynamic = ["version"]

[tool.hatch.version]
source = "vcs"

[tool.hatch.build.hooks.vcs]
version-file = "{name}/_version.py"
""",
}


def git(folder: Path, *args: str) -> str:
    """Run git in `folder` as a user with no configuration of their own would."""
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder), "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return done.stdout.strip()


def vcs_project(
    folder: Path, plugin: str, *, name: str = "scmpkg", tag: str | None = None, after: int = 0
) -> Path:
    """A package whose version `plugin` takes from git: its `_version.py` written by the
    build and named by its .gitignore, imported by the package; a git repository with a
    commit, `tag` on it if given, then `after` more commits."""
    project(
        folder,
        name=name,
        body="from ._version import version\n\n\ndef add(a, b):\n    return a - b\n",
    )
    (folder / "pyproject.toml").write_text(VCS_BUILDS[plugin].format(name=name))
    (folder / ".gitignore").write_text(f"__pycache__/\n{name}/_version.py\n")
    git(folder, "init", "-q")
    git(folder, "add", "-A")
    git(folder, "commit", "-qm", "first")
    if tag:
        git(folder, "tag", tag)
    for n in range(after):
        (folder / f"CHANGES{n}.txt").write_text(f"{n}\n")
        git(folder, "add", "-A")
        git(folder, "commit", "-qm", f"change {n}")
    return folder
