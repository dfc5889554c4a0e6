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

import re
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
#: a file in an installed distribution, as a traceback or an ImportError names it
_INSTALLED = re.compile(
    r"""(?P<path>[^\s"'(),]*(?:site|dist)-packages/(?P<name>[A-Za-z_]\w*)(?:/[^\s"'(),:]+|\.py))"""
)


def packages(root: Path) -> frozenset[str]:
    """The project's top-level importable names: the packages (folders with `__init__.py`)
    and modules at its root, and every folder and module in its src/."""
    return _names(root, src=False) | _names(root / SRC, src=True)


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
        package = path.is_dir() and (src or (path / "__init__.py").is_file())
        if module or package:
            names.add(name)
    return frozenset(names)


def search_path(root: Path, seen_as: str, env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the folder the project's code is imported from first on PYTHONPATH, as an
    editable install would put it, for a command of a session without an environment: the
    working copy's src/ (`seen_as`: the working copy as the command sees it), else its root
    where it holds packages or modules of the project (a bare `pytest`, unlike
    `python -m pytest`, does not put the current folder on the path); `env` unchanged for a
    project with neither. A PYTHONPATH the job gives comes after."""
    if _names(root / SRC, src=True):
        first = f"{seen_as.rstrip('/')}/{SRC}"
    elif _names(root, src=False):
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
