"""Which copy of the project a session's tests import when no environment installs it
(worker/files/imports.py): with TICKWORK_SANDBOX=none, iniconfig's tests imported the copy
pytest itself depends on, so a right patch ended `tests_failing`, every failing test
"failing before too", and nothing said the tests never imported the session's files."""

from __future__ import annotations

import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tickwork.fsm.outcomes import Outcome, repair_outcome
from tickwork.fsm.values import Head
from tickwork.worker.files import imports
from tickwork.worker.jobs.repair.job import run_final_tests

T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: the project, and the distribution of the same name installed where its commands look
SHADOWED = "shadowed_dist"
PYTEST = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider tests"
#: the job's own variables: no plugin of this venv in the inner run, a PYTHONPATH of its own
JOB_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": "elsewhere"}


@pytest.fixture
def site_packages(tmp_path: Path) -> Path:
    """An installed copy of SHADOWED (as pip puts one), whose `parse` fails."""
    installed = tmp_path / "venv" / "lib" / "python3" / "site-packages"
    (installed / SHADOWED).mkdir(parents=True)
    (installed / SHADOWED / "__init__.py").write_text(
        "WHERE = 'an installed copy'\n\n\ndef parse(text):\n"
        "    raise ValueError(f'not well-formed: {text}')\n"
    )
    return installed


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A src-layout project named like an installed distribution, run without a sandbox."""
    monkeypatch.setenv("TICKWORK_SANDBOX", "none")
    root = tmp_path / "project"
    (root / "src" / SHADOWED).mkdir(parents=True)
    (root / "src" / SHADOWED / "__init__.py").write_text("WHERE = 'the working copy'\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_where.py").write_text(
        f"import {SHADOWED}\n\n\ndef test_where():\n"
        f"    assert {SHADOWED}.WHERE == 'the working copy'\n\n\n"
        f"def test_parse():\n    {SHADOWED}.parse('<unclosed')\n"
    )
    (root / "pyproject.toml").write_text(f"[project]\nname = '{SHADOWED}'\nversion = '1'\n")
    return root


def head_for(command: str, env: dict[str, str] = JOB_ENV) -> Head:
    config = {"test_command": command, "env": env}
    return Head(
        id="sess-1", kind="repair", created_at=T0, updated_at=T0, model="scripted", config=config
    )


def test_tests_without_an_environment_import_the_working_copys_src(
    project: Path, site_packages: Path
) -> None:
    """The installed copy is on the job's PYTHONPATH (as the host's site-packages are on
    every Python's path): the working copy's src/ comes before it."""
    (project / "tests" / "test_where.py").write_text(
        f"import {SHADOWED}\n\n\ndef test_where():\n"
        f"    assert {SHADOWED}.WHERE == 'the working copy'\n"
    )
    env = {**JOB_ENV, "PYTHONPATH": str(site_packages)}
    tests = run_final_tests(head_for(PYTEST, env), project)
    assert tests["passed"] is True, tests["output"]
    assert "not_run" not in tests


def test_a_run_through_an_installed_copy_of_the_project_is_not_a_test_of_it(
    project: Path, site_packages: Path
) -> None:
    """A test command that sets a search path of its own imports the installed copy: its
    traceback goes through it, and the run is said not to have tested the session's files."""
    own_path = f"env PYTHONPATH={shlex.quote(str(site_packages))}"
    tests = run_final_tests(head_for(f"{own_path} {PYTEST}"), project)
    assert tests["passed"] is False
    why = tests["not_run"]
    assert f"the tests imported {SHADOWED} from an installed copy (" in why, tests["output"]
    assert f"site-packages/{SHADOWED}/__init__.py" in why and "TICKWORK_SANDBOX=none" in why
    outcome = repair_outcome(patch="diff", tests=tests)
    assert outcome is Outcome.TESTS_NOT_RUN


def test_the_job_given_search_path_comes_after_src(tmp_path: Path) -> None:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    env = imports.search_path(tmp_path, "/workspace", {"PYTHONPATH": "lib", "A": "1"})
    assert env == {"PYTHONPATH": "/workspace/src:lib", "A": "1"}
    assert imports.search_path(tmp_path / "none", "/workspace", {"A": "1"}) == {"A": "1"}


def test_a_bare_pytest_without_an_environment_imports_a_flat_projects_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tabulate (`tabulate/` at the root, tests in `test/`) with TICKWORK_SANDBOX=none:
    `pytest -q test` failed every test module on `No module named 'tabulate'` (a bare
    pytest puts the tests' folder on the path, not the root), where an environment's
    editable install, or `python -m pytest`, finds it."""
    monkeypatch.setenv("TICKWORK_SANDBOX", "none")
    (tmp_path / "flatpkg").mkdir()
    (tmp_path / "flatpkg" / "__init__.py").write_text("WHERE = 'the working copy'\n")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_flat.py").write_text(
        "import flatpkg\n\n\ndef test_where():\n    assert flatpkg.WHERE\n"
    )
    pytest_bin = Path(sys.executable).parent / "pytest"
    tests = run_final_tests(head_for(f"{shlex.quote(str(pytest_bin))} -q test"), tmp_path)
    assert tests["passed"] is True, tests["output"]


def test_only_the_projects_own_packages_count_as_installed_copies(tmp_path: Path) -> None:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "core.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "setup.py").write_text("")
    own = imports.packages(tmp_path)
    assert own == {"pkg"}
    pytest_frame = "/usr/lib/python3/dist-packages/_pytest/python.py:159: in pytest_pyfunc_call"
    tests_frame = "/venv/lib/python3.11/site-packages/tests/helpers.py:3: in f"
    assert imports.installed_copy(f"{pytest_frame}\n{tests_frame}\n", own) is None
    frame = '  File "../../venv/lib/python3.11/site-packages/pkg/core.py", line 3, in f'
    assert imports.installed_copy(frame, own) == (
        "pkg",
        "../../venv/lib/python3.11/site-packages/pkg/core.py",
    )


def test_a_src_folder_without_python_leaves_a_flat_project_on_its_root(tmp_path: Path) -> None:
    """Python at the root beside C or Rust sources in src/: src/ went first on PYTHONPATH
    and a bare `pytest` could not import the root's package."""
    (tmp_path / "flatpkg").mkdir()
    (tmp_path / "flatpkg" / "__init__.py").write_text("")
    (tmp_path / "src" / "core").mkdir(parents=True)
    (tmp_path / "src" / "core" / "speedups.c").write_text("")
    (tmp_path / "src" / "lib.rs").write_text("")
    assert imports.search_path(tmp_path, "/workspace", {}) == {"PYTHONPATH": "/workspace"}
    assert imports.packages(tmp_path) == {"flatpkg"}
    # a namespace package in src/ (no __init__.py, Python further down) is src/ code
    (tmp_path / "src" / "ns" / "inner").mkdir(parents=True)
    (tmp_path / "src" / "ns" / "inner" / "mod.py").write_text("")
    assert imports.search_path(tmp_path, "/workspace", {}) == {"PYTHONPATH": "/workspace/src"}
    assert imports.packages(tmp_path) == {"flatpkg", "ns"}


def test_a_root_module_named_like_the_standard_librarys_is_not_put_first_on_the_path(
    tmp_path: Path,
) -> None:
    """A root `secrets.py` first on PYTHONPATH would be every process's `secrets` (pip's and
    pytest's too); nor is the `enum` backport an installed distribution holds the copy of a
    project whose root has an `enum.py`."""
    (tmp_path / "flatpkg").mkdir()
    (tmp_path / "flatpkg" / "__init__.py").write_text("")
    (tmp_path / "secrets.py").write_text("")
    (tmp_path / "enum.py").write_text("")
    assert imports.search_path(tmp_path, "/workspace", {"A": "1"}) == {"A": "1"}
    own = imports.packages(tmp_path)
    assert own == {"flatpkg"}
    backport = '  File "/venv/lib/python3.11/site-packages/enum/__init__.py", line 3, in f'
    assert imports.installed_copy(backport, own) is None
