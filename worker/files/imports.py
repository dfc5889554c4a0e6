"""Where a session's commands import the project from when no environment installs it.

An environment (`environments.py`) installs the project editable, so its tests import the
working copy. Without one (TICKWORK_SANDBOX=none builds none, nor does `--setup none`)
nothing does: the tests of a src-layout project import whatever copy of it the Python that
runs them holds (iniconfig, which pytest itself depends on, for one), never the session's
edits, and a bare `pytest` those of a flat one. `search_path` puts the working copy's src/,
or its root, first on PYTHONPATH for them; `installed_copy` finds a run whose tracebacks
went through an installed copy of one of the project's own packages all the same, which the
final test run and `run_tests` report as a run that did not test the session's files.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

#: the folder a src-layout project keeps its importable code in
SRC = "src"
#: names at a project's root that are not its code, even where they are packages
_NOT_CODE = frozenset(
    {"test", "tests", "testing", "doc", "docs", "example", "examples", "scripts", "benchmarks"}
)
#: modules at a project's root that are its tooling, not its code
_TOOLING = frozenset({"setup", "conftest", "noxfile", "tasks", "fabfile", "versioneer"})
#: the standard library's modules: never the project's, and a root that holds one (a
#: `secrets.py`, a `calendar/`) does not go first on the path of every process it runs
STDLIB = frozenset(sys.stdlib_module_names)
#: the most entries `_holds_python` reads of a src/ folder before it says it holds none
_PYTHON_SCAN = 5_000
#: a file in an installed distribution, as a traceback or an ImportError names it
_INSTALLED = re.compile(
    r"""(?P<path>[^\s"'(),]*(?:site|dist)-packages/(?P<name>[A-Za-z_]\w*)(?:/[^\s"'(),:]+|\.py))"""
)


def packages(root: Path) -> frozenset[str]:
    """The project's top-level importable names: the packages (folders with `__init__.py`)
    and modules at its root, and the modules and folders holding Python in its src/; not
    the standard library's names (a root `enum.py` is not the `enum` backport an installed
    distribution holds)."""
    return (_names(root, src=False) | _names(root / SRC, src=True)) - STDLIB


def _names(folder: Path, *, src: bool) -> frozenset[str]:
    try:
        entries = list(folder.iterdir())
    except OSError:
        return frozenset()
    names: set[str] = set()
    for path in entries:
        name = path.name.split(".")[0]
        if not name.isidentifier() or name in _NOT_CODE or name.startswith("test_"):
            continue
        module = path.suffix == ".py" and path.is_file() and (src or name not in _TOOLING)
        package = path.is_dir() and (
            (path / "__init__.py").is_file() or (src and _holds_python(path))
        )
        if module or package:
            names.add(name)
    return frozenset(names)


def _holds_python(folder: Path) -> bool:
    """Whether `folder` (in src/) holds a `.py` file, in it or below: a namespace package,
    not the C or Rust sources a project keeps in src/ beside Python at its root."""
    seen = 0
    for _here, dirs, files in os.walk(folder):
        if any(f.endswith(".py") for f in files):
            return True
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        seen += len(dirs) + len(files)
        if seen >= _PYTHON_SCAN:
            return False
    return False


def search_path(root: Path, seen_as: str, env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the folder the project's code is imported from first on PYTHONPATH, as an
    editable install would put it, for a command of a session without an environment: the
    working copy's src/ where it holds Python (`seen_as`: the working copy as the command
    sees it), else its root where it holds packages or modules of the project (a bare
    `pytest`, unlike `python -m pytest`, does not put the current folder on the path);
    `env` unchanged for a project with neither, or whose root holds a module or package
    named like one of the standard library's, which would shadow it for every process the
    session runs (pip and pytest too). A PYTHONPATH the job gives comes after."""
    at_root = _names(root, src=False)
    if _names(root / SRC, src=True):
        first = f"{seen_as.rstrip('/')}/{SRC}"
    elif at_root and not at_root & STDLIB:
        first = seen_as
    else:
        return dict(env)
    given = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": f"{first}:{given}" if given else first}


def installed_copy(output: str, own: frozenset[str]) -> tuple[str, str] | None:
    """(package, file) of the first file of an installed copy of one of the project's own
    packages (`own`: `packages`) that `output` names (a traceback's frame, an ImportError's
    `from`), or None: a run that shows one imported that copy, not the working copy's."""
    if not own:
        return None
    for found in _INSTALLED.finditer(output):
        if found["name"] in own:
            return found["name"], found["path"]
    return None


def installed_copy_note(name: str, path: str, *, environment: bool) -> str:
    """Why a run that imported an installed copy of the project (`installed_copy`) did not
    test the session's files; `environment`: whether the session has one (mounted at /env)."""
    said = (
        f"the tests imported {name} from an installed copy ({path}), not from the session's "
        f"files, so they did not test its changes to {name}"
    )
    if environment:
        return (
            f"{said}: the environment holds a copy of the project that is not the working "
            "copy; install the project editable in setup (`/env/bin/pip install -e .`)"
        )
    return (
        f"{said}: the session has no environment to install the project in "
        "(TICKWORK_SANDBOX=none builds none, nor does `--setup none`), so its tests import "
        "what the Python running them holds; give a test command that imports the working "
        "copy (e.g. `python3 -m pytest` from the project's root), or run the workers with "
        "a sandbox, where `--setup auto` installs the project editable"
    )
