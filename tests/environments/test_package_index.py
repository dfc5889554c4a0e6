"""Issue 22's done-when test: a repair of a project with a third-party runtime dependency
that uses pytest, its environment built by `--setup auto` from a package index served on
loopback (wheels made at test time, pytest's fetched once with pip into a cache); the patch
then applies to a pristine copy whose tests pass in the same environment."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.values import Status
from tickwork.worker.files.environment_plans import EDITABLE_AGAIN
from tickwork.worker.sandbox.runner import Sandbox, check, run_sandboxed

from tests.environments.projects import deployment, project
from tests.services import IN_CI
from tickwork.package_index import make_wheel, serving
from tickwork.testing import SessionDriver, call, reply, running_worker

pytestmark = pytest.mark.skipif(
    check(Sandbox()) is not None and not IN_CI,
    reason=f"bubblewrap cannot run here: {check(Sandbox())}",
)

BODY = "from tinydep import triple\n\n\ndef add(a, b):\n    return triple(a) - b\n"
FIXED = "from tinydep import triple\n\n\ndef add(a, b):\n    return triple(a) // 3 + b\n"
FIX = "def add(a, b):\n    return a + b\n"
TEST = (
    "import pytest\n\nfrom calcpkg import add\n\n\n"
    "@pytest.mark.parametrize('a,b', [(2, 3), (0, 0)])\n"
    "def test_add(a, b):\n    assert add(a, b) == a + b\n"
)


def test_repair_with_a_third_party_dependency_from_a_loopback_index(
    index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", index.url)
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", index.address)
    source = project(tmp_path / "src", deps=("tinydep",), body=BODY, test=TEST)
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "pytest -q", "setup": "auto"},
            replies=[
                reply("reproduce", call("run_tests")),
                reply("fix", call("write_file", path="calcpkg/__init__.py", content=FIXED)),
                reply("check", call("run_tests")),
                reply("fixed: add used triple(a) without dividing"),
            ],
        )
        session = driver.run(sid, timeout=180)
    head = session.head
    assert head.status is Status.COMPLETED, head.error_message
    env = head.result["environment"]
    assert env["status"] == "ready" and env.get("missing") == [], env
    before, after = session.observations[0].content, session.observations[2].content
    assert "tests FAILED" in before and "1 failed, 1 passed" in before
    assert "tests passed" in after and "2 passed" in after
    assert head.result["tests"]["passed"] is True
    patch = head.result["patch"]
    assert "+    return triple(a) // 3 + b" in patch

    pristine = project(tmp_path / "pristine", deps=("tinydep",), body=BODY, test=TEST)
    subprocess.run(["git", "apply", "-"], input=patch.encode(), cwd=pristine, check=True)
    cached = settings.workspaces_path / "environments" / env["key"]
    ran = run_sandboxed("pytest -q", workdir=pristine, timeout_s=120, environment=cached)
    assert ran.exit_code == 0 and "2 passed" in ran.stdout, ran.describe()


def test_without_egress_auto_says_what_it_could_not_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TICKWORK_EGRESS_ALLOW", raising=False)
    source = project(tmp_path / "src", deps=("tinydep",), body=BODY, test=TEST)
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "pytest -q"},
            replies=[reply("look", call("run_command", command="python -c 'import calcpkg'"))],
        )
        session = driver.run(sid, timeout=120)
    env = session.head.result["environment"]
    assert env["status"] == "ready", env
    assert "tinydep" in env["missing"] and "pytest" in env["missing"]
    assert "calcpkg" not in env["missing"]  # the project itself needed no network
    # and the card says why, and what to set: "not installed: pytest" alone looked like a
    # project that forgot to declare it
    assert "no network" in env["note"] and "TICKWORK_EGRESS_ALLOW=" in env["note"], env
    assert "installed only the project itself" in env["note"], env
    assert "No module named 'tinydep'" in session.observations[0].content


@pytest.mark.parametrize("metadata", [False, True], ids=["bare", "with-egg-info"])
def test_without_egress_a_backend_it_lacks_leaves_the_project_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metadata: bool
) -> None:
    """`with-egg-info`: an sdist ships its metadata at its root (`calcpkg.egg-info`), which
    the check, run from /workspace, took for the installed project."""
    monkeypatch.delenv("TICKWORK_EGRESS_ALLOW", raising=False)
    source = project(tmp_path / "src")
    if metadata:
        (source / "calcpkg.egg-info").mkdir()
        (source / "calcpkg.egg-info" / "PKG-INFO").write_text(
            "Metadata-Version: 2.1\nName: calcpkg\nVersion: 0.1.0\n"
        )
    pyproject = (source / "pyproject.toml").read_text()
    (source / "pyproject.toml").write_text(
        pyproject.replace('"setuptools>=61"', '"nobackend"').replace(
            "setuptools.build_meta", "nobackend.api"
        )
    )
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "python -m pytest -q"},
            replies=[reply("done")],
        )
        head = driver.run_until(sid, timeout=120)
        row = driver.client.store.environments.find()[0]
    env = head.result["environment"]
    assert head.status is Status.COMPLETED, head.error_message
    assert env["status"] == "ready" and "calcpkg" in env["missing"], env
    # `tickwork env show`: the line the failed install echoed, not the logged command
    assert "\ntickwork: the project could not be installed without the network" in row.log
    # the card's note said "so it installed only the project itself" beside the project
    # listed missing (humanize, whose hatchling the system lacks)
    assert "only the project itself" not in env["note"], env
    assert "not even the project" in env["note"] and "build backend" in env["note"], env
    assert "missing or too old" in env["note"], env


def test_without_egress_a_backend_too_old_is_not_said_to_be_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """toolz needs setuptools>=77 (a PEP 639 `license` string); the system's older one is
    installed, and its build fails ("invalid pyproject.toml config: project.license"). The
    card said its build backend "is not installed on the system"."""
    monkeypatch.delenv("TICKWORK_EGRESS_ALLOW", raising=False)
    source = project(tmp_path / "src")
    pyproject = (source / "pyproject.toml").read_text()
    (source / "pyproject.toml").write_text(
        pyproject.replace('"setuptools>=61"', '"setuptools>=999"').replace(
            'version = "0.1.0"', 'version = "0.1.0"\nlicense = "MIT"\nlicense-files = ["NOTICE*"]'
        )
    )
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "python -m pytest -q"},
            replies=[reply("done")],
        )
        head = driver.run_until(sid, timeout=120)
    env = head.result["environment"]
    assert env["status"] == "ready" and "calcpkg" in env["missing"], env
    assert "not installed on the system" not in env["note"], env
    assert "could not be built with the system's tools" in env["note"], env


#: a build backend that, as hatchling does for `editables`, needs for an editable build a
#: package it names only through PEP 660's `get_requires_for_build_editable`
EDIT_BACKEND = """\
from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403


def get_requires_for_build_editable(config_settings=None):
    return [*_setuptools.get_requires_for_build_editable(config_settings), "editdep"]


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    import editdep  # noqa: F401
    return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    import editdep  # noqa: F401
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
"""


def test_auto_installs_what_the_build_backend_asks_for_an_editable_build(
    index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without build isolation pip installs only `[build-system] requires`; a backend's own
    extra needs (hatchling's `editables`) failed every such project's setup as ENV_SETUP."""
    monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", index.url)
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", index.address)
    source = project(tmp_path / "src")
    pyproject = (source / "pyproject.toml").read_text()
    (source / "pyproject.toml").write_text(
        pyproject.replace(
            'build-backend = "setuptools.build_meta"',
            'build-backend = "editbackend"\nbackend-path = ["_build"]',
        )
    )
    (source / "_build").mkdir()
    (source / "_build" / "editbackend.py").write_text(EDIT_BACKEND)
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "python3 -m unittest -q"},
            replies=[
                reply("look", call("run_command", command="python -c 'import editdep'")),
                reply("done"),
            ],
        )
        session = driver.run(sid, timeout=180)
    head = session.head
    env = head.result["environment"]
    assert head.status is Status.COMPLETED, head.error_message
    assert env["status"] == "ready" and env.get("missing") == [], env
    assert "exit code: 0" in session.observations[0].content


TOX_INI = """\
[tox]
envlist = py311,lint

[testenv]
deps =
    pytest
    tinydep  # the project names it here and nowhere else
    py311: nosuchdep-for-one-factor
    {env:EXTRA_DEP:}
commands = pytest {posargs}

[testenv:lint]
deps = nosuchlinter
"""


@pytest.mark.parametrize("where", ["tox.ini", "requirements/test.txt"])
def test_auto_installs_test_tools_named_only_in_tox_ini_or_a_requirements_folder(
    index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Many projects name their pytest plugins only in tox.ini's `deps` or in
    `requirements/test.txt`: `auto` read neither, so every test run failed on a missing
    import or fixture, and the card listed nothing missing."""
    monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", index.url)
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", index.address)
    source = project(tmp_path / "src", body=BODY, test=TEST)
    if where == "tox.ini":
        (source / "tox.ini").write_text(TOX_INI)
    else:
        (source / "requirements").mkdir()
        (source / "requirements" / "test.txt").write_text("-r base.txt\ntinydep\n")
        (source / "requirements" / "base.txt").write_text("pytest\n")
        (source / "requirements" / "docs.txt").write_text("nosuchdocstool\n")
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "pytest -q"},
            replies=[reply("look", call("run_tests")), reply("done")],
        )
        session = driver.run(sid, timeout=180)
    head = session.head
    env = head.result["environment"]
    assert head.status is Status.COMPLETED, head.error_message
    assert env["status"] == "ready" and env.get("missing") == [], env
    assert any(where.split("/")[0] in d for d in env["detected"]), env
    ran = session.observations[0].content
    assert "1 failed, 1 passed" in ran and "No module named" not in ran, ran


def _tests_run_once(source: Path, tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """A repair of `source` whose model runs the tests once: the session, and its
    environment's record (the session completed)."""
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "pytest -q"},
            replies=[reply("reproduce", call("run_tests")), reply("done")],
        )
        session = driver.run(sid, timeout=180)
    head = session.head
    assert head.status is Status.COMPLETED, head.error_message
    return session, head.result["environment"]


def test_a_test_extra_requirement_the_index_lacks_is_listed_missing_not_fatal(
    index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """humanize's `tests` extra names pytest-codspeed and four more: one of them missing
    from the index failed the whole setup as ENV_SETUP (dependency groups already went on
    without theirs)."""
    monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", index.url)
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", index.address)
    source = project(tmp_path / "src", deps=("tinydep",), body=BODY, test=TEST)
    pyproject = (source / "pyproject.toml").read_text()
    (source / "pyproject.toml").write_text(
        pyproject.replace('test = ["pytest"]', 'test = ["pytest", "nosuchplugin>=1"]')
    )
    session, env = _tests_run_once(source, tmp_path)
    assert env["status"] == "ready" and env["missing"] == ["nosuchplugin"], env
    assert "test extra requirement nosuchplugin>=1 could not be installed" in env["log"]
    # the project, its dependency and pytest are there: the tests run (and fail: not fixed)
    assert "1 failed, 1 passed" in session.observations[0].content


def test_a_requirements_file_whose_tool_the_index_lacks_is_listed_missing_not_fatal(
    index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """humanize keeps mypy's pins in `requirements-mypy.txt`: an index without that mypy
    failed the whole setup as ENV_SETUP, though the tests need none of it. The file is
    installed whole, else each requirement it can; the rest are listed missing."""
    monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", index.url)
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", index.address)
    source = project(tmp_path / "src", body=BODY, test=TEST)
    (source / "requirements.txt").write_text("tinydep\n")
    (source / "requirements-mypy.txt").write_text("# typing\nnosuchlinter==9.1\ntinydep\n")
    session, env = _tests_run_once(source, tmp_path)
    assert env["status"] == "ready" and env["missing"] == ["nosuchlinter"], env
    log = env["log"]
    assert "requirements-mypy.txt requirement nosuchlinter==9.1 could not be installed" in log
    # the project, tinydep and pytest are there: the tests run (and fail: not fixed)
    assert "1 failed, 1 passed" in session.observations[0].content


def test_a_module_only_an_extra_auto_skips_declares_is_named_with_that_extra(
    index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """idna keeps its test tools in an `all` extra, which `auto` does not install: the final
    tests said "add it to the project's test requirements", which hold it already."""
    monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", index.url)
    monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", index.address)
    source = project(tmp_path / "src", body=BODY, test=TEST)
    pyproject = (source / "pyproject.toml").read_text()
    (source / "pyproject.toml").write_text(
        pyproject.replace('test = ["pytest"]', 'all = ["tinydep"]')
    )
    settings = deployment(tmp_path / "deploy")
    with running_worker(settings), SessionDriver(settings) as driver:
        sid = driver.submit(
            "repair",
            {"workspace": str(source), "test_command": "python3 -m pytest -q"},
            replies=[reply("done")],
        )
        head = driver.run(sid, timeout=180).head
    assert head.status is Status.COMPLETED, head.error_message
    assert head.result["environment"]["elsewhere"] == {"tinydep": "all"}
    why = head.result["tests"]["not_run"]
    assert "its `all` extra" in why and "pip install -e '.[all]'" in why, why


def test_a_test_tool_that_depends_on_the_project_does_not_replace_its_editable_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iniconfig's `dev` group needs `pytest>=8.4.2`, which needs `iniconfig>=2`; a checkout
    without tags builds 0.1.dev2, so pip replaced the project's editable install with the
    index's iniconfig: every test run imported that copy, a broken project's tests passed
    and the session ended `repaired` with "tests passed before any change too"."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "calcpkg", "2.0.0", modules={"calcpkg/__init__.py": FIX})
    make_wheel(wheels, "calctool", requires=["calcpkg>=1"])
    source = project(tmp_path / "src")  # calcpkg 0.1.0, whose add() subtracts
    (source / "src").mkdir()
    (source / "calcpkg").rename(source / "src" / "calcpkg")  # imported only as installed
    pyproject = (source / "pyproject.toml").read_text()
    (source / "pyproject.toml").write_text(
        pyproject.replace('test = ["pytest"]', "")
        .replace("[tool.setuptools]", '[tool.setuptools]\npackage-dir = {"" = "src"}')
        .replace("[project.optional", '[dependency-groups]\ntest = ["calctool"]\n[project.optional')
    )
    where = "python -c 'import calcpkg; print(calcpkg.__file__)'"
    with serving(wheels) as served:
        monkeypatch.setenv("TICKWORK_PIP_INDEX_URL", served.url)
        monkeypatch.setenv("TICKWORK_EGRESS_ALLOW", served.address)
        settings = deployment(tmp_path / "deploy")
        with running_worker(settings), SessionDriver(settings) as driver:
            sid = driver.submit(
                "repair",
                {"workspace": str(source), "test_command": "python -m unittest discover -s tests"},
                replies=[reply("where", call("run_command", command=where)), reply("done")],
            )
            session = driver.run(sid, timeout=180)
    head = session.head
    assert head.status is Status.COMPLETED, head.error_message
    assert "/workspace/src/calcpkg/__init__.py" in session.observations[0].content
    env = head.result["environment"]
    assert env["status"] == "ready" and EDITABLE_AGAIN in env["log"], env
    assert head.result["tests"]["passed"] is False  # the session's add() still subtracts
    assert head.result["outcome"] == "no_changes"
