"""Small projects for the environment tests: a package with a test, and its pieces."""

from __future__ import annotations

from pathlib import Path

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
