"""The `auto` rule and the `setup` input, as pure functions: what setup runs for which
packaging files, with and without egress, what the key depends on, and bad input."""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tickwork.fsm.errors import InvalidInput
from tickwork.store.files import blob_hash, entry
from tickwork.worker.files.environment_plans import (
    AUTO,
    MISSING,
    OFFLINE,
    PIP,
    SETUP_PY_SHIM,
    check_setup,
    dependency_files,
    plan,
    uses_pytest,
)
from tickwork.worker.files.environments import PROBE
from tickwork.worker.jobs.repair.job import prepare

PYPROJECT = b"""
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
[project]
name = "app"
dependencies = ["requests>=2", "tinydep"]
[project.optional-dependencies]
test = ["pytest", "hypothesis"]
docs = ["sphinx"]
"""


def test_a_pyproject_online_installs_the_project_editable_with_its_test_extras() -> None:
    made = plan(AUTO, {"pyproject.toml": PYPROJECT}, uses_pytest=True, online=True)
    joined = "\n".join(made.commands)
    assert made.commands[0] == "python3 -m venv --system-site-packages --without-pip /env"
    assert "--no-build-isolation -e '.[test]' pytest" in joined
    assert "'setuptools>=61'" in joined and "sphinx" not in joined and "--no-index" not in joined
    assert set(made.wanted) == {"requests", "tinydep", "pytest", "hypothesis", "app"}


@pytest.mark.parametrize(
    "pyproject",
    [
        b'[project]\nname = "app"\ndependencies = "requests"\n'
        b'[project.optional-dependencies]\ntest = "pytest"\n',
        b'project = "app"\nbuild-system = 3\n',
        b'[project]\nname = "app"\ndependencies = [1, "tinydep"]\n'
        b'[project.optional-dependencies]\ntest = 7\n[build-system]\nrequires = "setuptools"\n',
    ],
    ids=["strings for arrays", "values for tables", "numbers"],
)
def test_a_pyproject_of_the_wrong_shape_is_planned_not_a_crash(pyproject: bytes) -> None:
    """The submitter's pyproject.toml with a string where an array belongs (`test =
    "pytest"`) was read a character at a time, and a number raised TypeError: setup failed
    INTERNAL. What is not of its shape is left out; pip's build then says what is wrong."""
    made = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=True)
    assert not any(len(w) == 1 for w in made.wanted), made.wanted
    assert "tinydep" in made.wanted or "requests" not in made.wanted
    assert any("-e ." in c for c in made.commands)


def test_without_egress_only_the_project_itself_is_installed() -> None:
    made = plan(AUTO, {"pyproject.toml": PYPROJECT}, uses_pytest=True, online=False)
    installs = [c for c in made.commands if "pip install" in c]
    assert installs == [
        "/env/bin/python -m pip install --no-input --disable-pip-version-check "
        f"--no-index --no-deps --no-build-isolation -e . || echo '{OFFLINE}'"
    ]
    assert "requests" in made.commands[-1]  # checked afterwards, reported as missing


GROUPS = b"""
[project]
name = "app"
[dependency-groups]
dev = ["pytest-xdist>=3", {include-group = "lint"}, {include-group = "dev"}]
lint = ["freezegun"]
docs = ["sphinx"]
"""


def test_test_dependency_groups_are_installed_each_alone_if_need_be_and_checked() -> None:
    """PEP 735 groups (uv's and pdm's place for test tools, which pip 23 cannot install by
    name): a test group's requirements, an included group's too, installed together or
    else one by one; what could not be is listed missing."""
    made = plan(AUTO, {"pyproject.toml": GROUPS}, uses_pytest=True, online=True)
    (install,) = [c for c in made.commands if "pytest-xdist" in c and "pip install" in c]
    assert install.startswith(
        "/env/bin/python -m pip install --no-input --disable-pip-version-check "
        "'pytest-xdist>=3' freezegun || for r in 'pytest-xdist>=3' freezegun; do"
    )
    assert "sphinx" not in "\n".join(made.commands)
    assert set(made.wanted) == {"pytest-xdist", "freezegun", "app", "pytest"}
    assert "dependency groups: dev" in made.detected
    offline = plan(AUTO, {"pyproject.toml": GROUPS}, uses_pytest=True, online=False)
    assert not any("pytest-xdist" in c for c in offline.commands[:-1])
    assert "pytest-xdist" in offline.wanted


def test_pdm_s_older_dev_dependencies_count_as_dependency_groups() -> None:
    pdm = b"""
[project]
name = "app"
[tool.pdm.dev-dependencies]
test = ["pytest-mock>=3", "-e file:///${PROJECT_ROOT}/plugins/local"]
lint = ["ruff"]
"""
    made = plan(AUTO, {"pyproject.toml": pdm}, uses_pytest=True, online=True)
    (install,) = [c for c in made.commands if "pytest-mock" in c and "pip install" in c]
    assert "PROJECT_ROOT" not in install and "ruff" not in install
    assert "pytest-mock" in made.wanted and "dependency groups: test" in made.detected


def test_poetry_s_test_groups_count_with_their_constraints_made_pep_508() -> None:
    poetry = b"""
[tool.poetry]
name = "app"
[tool.poetry.dependencies]
python = "^3.9"
[tool.poetry.group.test.dependencies]
pytest = "^7.2"
pytest-mock = {version = "~3.10", extras = ["x"]}
local = {path = "../local"}
[tool.poetry.dev-dependencies]
freezegun = "*"
[tool.poetry.group.docs.dependencies]
sphinx = "^5"
"""
    made = plan(AUTO, {"pyproject.toml": poetry}, uses_pytest=True, online=True)
    (install,) = [c for c in made.commands if "pytest-mock" in c and "pip install" in c]
    assert install.startswith(
        "/env/bin/python -m pip install --no-input --disable-pip-version-check "
        "'pytest>=7.2,<8' 'pytest-mock>=3.10,<3.11' freezegun ||"
    ), install
    assert "sphinx" not in install and "local" not in install and "python" not in made.wanted


@pytest.mark.parametrize("online", [True, False])
def test_a_setup_cfg_alone_gets_setuptools_own_setup_py_to_be_installed(
    online: bool, tmp_path: Path
) -> None:
    """pip refuses a project without setup.py or pyproject.toml ("does not appear to be a
    Python project"): setup writes setuptools' two-line one first, in its throw-away copy."""
    cfg = b"[metadata]\nname = shout\n[options.extras_require]\ntesting = pytest\n"
    made = plan(AUTO, {"setup.cfg": cfg}, uses_pytest=True, online=online)
    install = next(c for c in made.commands if " -e " in c)
    assert made.commands.index(SETUP_PY_SHIM) < made.commands.index(install)
    subprocess.run(SETUP_PY_SHIM, shell=True, cwd=tmp_path, check=True)
    assert (tmp_path / "setup.py").read_text() == "from setuptools import setup\n\nsetup()\n"
    for present in ("setup.py", "pyproject.toml"):  # the project's own is never replaced
        files = {"setup.cfg": cfg, present: b"from setuptools import setup\nsetup()\n"}
        assert SETUP_PY_SHIM not in plan(AUTO, files, uses_pytest=True, online=online).commands


def test_requirements_files_and_nothing() -> None:
    made = plan(
        AUTO,
        {"requirements.txt": b"# pinned\nflask==3.0\n-r other.txt\n", "requirements-dev.txt": b""},
        uses_pytest=False,
        online=True,
    )
    assert any(c.split(" || ")[0].endswith("-r requirements.txt") for c in made.commands)
    assert any(c.split(" || ")[0].endswith("-r requirements-dev.txt") for c in made.commands)
    # a file that cannot be installed whole: each plain requirement it names, not its options
    (whole,) = [c for c in made.commands if "-r requirements.txt" in c]
    assert "for r in flask==3.0; do" in whole and "other.txt" not in whole.split(" || ", 1)[1]
    assert made.wanted == ("flask",)
    assert plan(AUTO, {}, uses_pytest=True, online=True).commands == ()


def test_the_key_follows_commands_files_egress_and_toolchain() -> None:
    files = {"pyproject.toml": PYPROJECT}
    base = plan(AUTO, files, uses_pytest=True, online=True).key("py 3.11")
    assert base == plan(AUTO, dict(files), uses_pytest=True, online=True).key("py 3.11")
    changed = {"pyproject.toml": PYPROJECT + b"\n# x\n"}
    assert plan(AUTO, changed, uses_pytest=True, online=True).key("py 3.11") != base
    assert plan(AUTO, files, uses_pytest=True, online=False).key("py 3.11") != base
    assert plan(AUTO, files, uses_pytest=True, online=True).key("py 3.12") != base
    assert plan(["make env"], files, uses_pytest=True, online=True).key("py 3.11") != base


def test_the_key_follows_the_whole_source_and_the_allow_list() -> None:
    # setup runs the project's own code: a source that copies another's packaging files
    # must not share (and so cannot poison) that source's environment
    made = plan(AUTO, {"pyproject.toml": PYPROJECT}, uses_pytest=True, online=True)
    base = made.key("py 3.11", source="tree-a", egress="pypi.org")
    assert made.key("py 3.11", source="tree-a", egress="pypi.org") == base
    assert made.key("py 3.11", source="tree-b", egress="pypi.org") != base
    assert made.key("py 3.11", source="tree-a", egress="mirror.example") != base


@pytest.mark.parametrize(
    ("value", "wanted"),
    [
        (None, "auto"),
        ("auto", "auto"),
        (["none"], "none"),
        ("make env", ["make env"]),
        ([" a ", "b"], ["a", "b"]),
        # not shell commands the shell would fail to find (exit 127, ENV_SETUP)
        (" none ", "none"),
        ("AUTO", "auto"),
        (["None"], "none"),
    ],
)
def test_setup_input(value: object, wanted: object) -> None:
    assert check_setup(value) == wanted


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ([], "must be"),
        (3, "must be"),
        (["ok", ""], "command 2 must be a non-empty"),
        (["ok", 7], "command 2 must be a non-empty"),
        (["auto", "x"], "give it alone"),
        (["x", " None"], "command 2 is ' None': give it alone"),
        (["x" * 8001], "longer than 8000"),
        (["echo \x00"], "NUL"),
        (["\ud800"], "lone surrogate"),
        (["true"] * 33, "at most 32"),
    ],
)
def test_bad_setup_input_is_refused_by_name(value: object, said: str, tmp_path) -> None:
    with pytest.raises(ValueError, match=said):
        check_setup(value)
    (tmp_path / "a.py").write_text("x = 1\n")
    with pytest.raises(InvalidInput, match="repair input: `setup`"):
        prepare(
            {"workspace": str(tmp_path), "test_command": "true", "setup": value},
            state_dir=tmp_path / "state",
            trusted=False,
            workspace_roots=[tmp_path],
        )


def test_the_toolchain_probe_tells_the_interpreter_s_distributions_apart(tmp_path: Path) -> None:
    """`auto`'s venv sees the interpreter's own packages: a host that lacks one of them has
    another toolchain, so it builds its own environment instead of reusing one that relied
    on it."""

    def probed(*paths: Path) -> str:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
        done = subprocess.run(["sh", "-c", PROBE], capture_output=True, text=True, env=env)
        return done.stdout

    extra = tmp_path / "site"
    (extra / "attrs_like-22.2.0.dist-info").mkdir(parents=True)
    (extra / "attrs_like-22.2.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: attrs-like\nVersion: 22.2.0\n"
    )
    without, held = probed(), probed(extra)
    assert "distributions: " in without
    assert without != held
    assert held == probed(extra)


def test_tox_ini_s_pytest_section_says_the_tests_use_pytest() -> None:
    """Plain-assert tests configured in tox.ini's `[pytest]` (testpaths, markers) and run
    by a command that does not name pytest (`tox`, `make test`) still get pytest."""
    files = {
        "tox.ini": b"[pytest]\ntestpaths = tests\n\n[tox]\nenvlist = py3\n",
        "tests/test_a.py": b"def test_a():\n    assert True\n",
    }
    manifest = {p: entry("100644", blob_hash(c)) for p, c in files.items()}
    contents = {blob_hash(c): c for c in files.values()}

    def blobs(keys):
        return {k: contents[k] for k in keys}

    assert uses_pytest(manifest, blobs, "make test")
    files["tox.ini"] = b"[tox]\nenvlist = py3\n\n[testenv]\ncommands = make test\n"
    manifest = {p: entry("100644", blob_hash(c)) for p, c in files.items()}
    contents = {blob_hash(c): c for c in files.values()}
    assert not uses_pytest(manifest, blobs, "make test")


def test_auto_reads_tox_ini_deps_common_to_every_environment() -> None:
    tox = (
        b"[testenv]\ndeps =\n    pytest-mock>=3\n    -r{toxinidir}/requirements/test.txt\n"
        b"    py312: ipython\n    {env:EXTRA:}\n    -cconstraints.txt\n    .[test]\n"
        b"    -e .\n    libs/helper\n"
        b"commands = pytest\n[testenv:docs]\ndeps = sphinx\n"
    )
    made = plan(AUTO, {"setup.py": b"", "tox.ini": tox}, uses_pytest=True, online=True)
    joined = "\n".join(made.commands)
    assert "'pytest-mock>=3' -rrequirements/test.txt ||" in joined
    assert "ipython" not in joined and "sphinx" not in joined and "EXTRA" not in joined
    # a path would install a copy of the project over the editable one
    assert ".[test]" not in joined and "libs/helper" not in joined
    assert "pytest-mock" in made.wanted
    assert "tox.ini deps: pytest-mock>=3,-rrequirements/test.txt" in made.detected
    offline = plan(AUTO, {"tox.ini": tox}, uses_pytest=False, online=False)
    assert "pytest-mock" in offline.commands[-1]  # listed missing, not installed


def test_auto_installs_the_extras_tox_ini_installs_the_project_with() -> None:
    """A project whose tests need an extra of another name than `test` (`extras = full` in
    tox.ini's `[testenv]`) gets it installed with the test ones; a factor's line, one the
    project does not declare and a `[testenv:NAME]`'s are left out."""
    pyproject = (
        b'[project]\nname = "demo"\n[project.optional-dependencies]\n'
        b'test = ["pytest"]\nFull = ["lxml"]\ncrypto = ["cryptography"]\ndocs = ["sphinx"]\n'
    )
    tox = (
        b"[testenv]\nextras =\n    full, crypto  # both\n    py312: docs\n    nosuch\n"
        b"commands = pytest\n[testenv:docs]\nextras = docs\n"
    )
    made = plan(AUTO, {"pyproject.toml": pyproject, "tox.ini": tox}, uses_pytest=True, online=True)
    joined = "\n".join(made.commands)
    assert "-e '.[test,Full,crypto]' pytest" in joined
    assert "sphinx" not in joined and "nosuch" not in joined
    assert "lxml" in made.wanted and "cryptography" in made.wanted
    assert "tox.ini extras: Full,crypto" in made.detected
    assert "extras: test,Full,crypto" in made.detected
    # without tox.ini the extras are the test ones only, and the key differs
    alone = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=True)
    assert "-e '.[test]' pytest" in "\n".join(alone.commands)
    assert "lxml" not in alone.wanted
    assert alone.key("py3") != made.key("py3")


def test_an_extra_tox_ini_names_twice_is_installed_once() -> None:
    """tox.ini may spell one extra two ways (`full`, `Full`): pip's and the card's list name
    it once, as the project declares it."""
    pyproject = (
        b'[project]\nname = "demo"\n[project.optional-dependencies]\n'
        b'test = ["pytest"]\nFull = ["lxml"]\n'
    )
    tox = b"[testenv]\nextras =\n    full\n    Full, test\n"
    made = plan(AUTO, {"pyproject.toml": pyproject, "tox.ini": tox}, uses_pytest=True, online=True)
    assert "-e '.[test,Full]' pytest" in "\n".join(made.commands)
    assert "extras: test,Full" in made.detected
    assert "tox.ini extras: Full,test" in made.detected


def test_root_requirements_for_other_purposes_than_the_tests_are_left_out() -> None:
    """wcwidth keeps release tools' pins at its root (`requirements-update.txt`,
    `requirements-wheels.txt`): installing them cost two minutes and downgraded what the
    tests use. Files named for docs, releases, wheels, updates, linting or benchmarks are
    left out, and the plan says so; the others are installed as before."""
    files = {
        "pyproject.toml": PYPROJECT,
        "requirements.txt": b"attrs\n",
        "requirements-dev.txt": b"pytest-mock\n",
        "requirements-tests-py3.txt": b"hypothesis\n",
        "requirements-mypy.txt": b"mypy==1.0\n",
        "requirements-update.txt": b"packaging==21.0\n",
        "requirements-wheels.txt": b"cibuildwheel\n",
        "requirements_docs.txt": b"sphinx\n",
        "requirements-release.txt": b"twine\n",
        "requirements-pre-commit.txt": b"pre-commit\n",
    }
    made = plan(AUTO, files, uses_pytest=True, online=True)
    installed = {c.split(" || ")[0].rsplit("-r ", 1)[-1] for c in made.commands if "-r " in c}
    assert installed == {
        "requirements.txt",
        "requirements-dev.txt",
        "requirements-tests-py3.txt",
        "requirements-mypy.txt",
    }
    assert not {"packaging", "cibuildwheel", "sphinx", "twine"} & set(made.wanted)
    (said,) = [d for d in made.detected if d.startswith("left out")]
    assert said == (
        "left out, not for the tests: requirements-pre-commit.txt,requirements-release.txt,"
        "requirements-update.txt,requirements-wheels.txt,requirements_docs.txt"
    )


def test_auto_reads_the_test_requirements_of_a_requirements_folder() -> None:
    names = [
        "requirements/test.txt",
        "requirements/requirements-tests.txt",
        "requirements/dev.txt",
        "requirements/docs.txt",
        "requirements/base.txt",
        "requirements-dev.txt",
        "tox.ini",
        "src/requirements/test.txt",
    ]
    manifest = {n: entry("100644", blob_hash(b"x")) for n in names}
    assert dependency_files(manifest) == [
        "requirements-dev.txt",
        "requirements/dev.txt",
        "requirements/requirements-tests.txt",
        "requirements/test.txt",
        "tox.ini",
    ]
    made = plan(AUTO, {"requirements/test.txt": b"pytest-asyncio\n"}, uses_pytest=True, online=True)
    assert any(c.split(" || ")[0].endswith("-r requirements/test.txt") for c in made.commands)
    assert "pytest-asyncio" in made.wanted


def test_a_requirements_line_installing_the_project_is_followed_by_the_editable_install() -> None:
    """`requirements-dev.txt` holding `.[test]` (or `.`) installed a copy of the project over
    its editable install: the tests imported that copy, and no edit of the session ever
    reached them."""
    files = {"pyproject.toml": PYPROJECT, "requirements-dev.txt": b"pytest-mock\n.[test]\n"}
    made = plan(AUTO, files, uses_pytest=True, online=True)
    installs = [c for c in made.commands if "pip install" in c]
    assert installs[-2].split(" || ")[0].endswith("-r requirements-dev.txt")
    assert installs[-1].endswith("--no-deps --no-build-isolation -e .")
    plain = {"pyproject.toml": PYPROJECT, "requirements-dev.txt": b"pytest-mock\n-e .\n"}
    made = plan(AUTO, plain, uses_pytest=True, online=True)
    assert not any(c.endswith("--no-deps --no-build-isolation -e .") for c in made.commands)


@pytest.mark.parametrize(
    "packaging",
    [
        {"pyproject.toml": b'[project]\nname = "python-dateutil"\n'},
        {"setup.cfg": b"[metadata]\nname = python-dateutil\n", "setup.py": b"setup()\n"},
    ],
    ids=["pyproject", "setup.cfg"],
)
def test_a_requirements_file_installed_after_the_project_is_followed_by_a_check_of_it(
    packaging: dict[str, bytes],
) -> None:
    """python-dateutil 2.x names its project in setup.cfg, and its requirements-dev.txt holds
    freezegun, which needs python-dateutil>=2.7: a checkout without tags (0.1.dev1) had its
    editable install replaced by the index's release, and the tests imported that."""
    files = {**packaging, "requirements-dev.txt": b"freezegun\npytest\n"}
    made = plan(AUTO, files, uses_pytest=True, online=True)
    last = [c for c in made.commands if "pip install" in c][-1]
    assert "python-dateutil" in last and last.endswith("--no-deps --no-build-isolation -e .; }")


def test_a_requirement_for_other_interpreters_is_not_listed_missing(tmp_path: Path) -> None:
    """markupsafe's `tests` group holds `pytest-run-parallel; python_full_version >=
    '3.13'`: pip rightly skipped it on 3.11, and the card still listed it as missing. The
    last command evaluates a requirement's marker with the environment's interpreter."""
    pyproject = (
        b'[project]\nname = "app"\n[dependency-groups]\ntests = [\n'
        b'  "pytest",\n  "far-future-tool; python_version >= \'99\'",\n'
        b"  \"absent-tool; python_version >= '3'\",\n]\n"
    )
    made = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=True)
    check = made.commands[-1].replace("/env/bin/python", shlex.quote(sys.executable), 1)
    # the project under repair may be `packaging` itself, broken: pip's own copy is read
    broken = tmp_path / "packaging"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise SyntaxError('the bug being repaired')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        ["sh", "-c", check.replace(" -I ", " ", 1)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    missing = [line for line in done.stdout.splitlines() if line.startswith(MISSING)]
    assert f"{MISSING}absent-tool" in missing
    assert not any("far-future-tool" in line for line in missing), missing


DEEP = "[".join([""] * 20_001) + "]" * 20_000
NESTED = [
    f'[project]\nname = "app"\nversion = {DEEP}\n'.encode(),
    ("[tool.setuptools_scm]\nx = " + "{a = " * 20_000 + "1" + "}" * 20_000 + "\n").encode(),
]


@pytest.mark.parametrize("pyproject", NESTED, ids=["arrays", "inline tables"])
def test_a_pyproject_nested_too_deeply_to_read_is_planned_not_a_crash(
    pyproject: bytes, tmp_path: Path
) -> None:
    """A pyproject.toml of arrays (or inline tables) nested 20,000 deep: Python's TOML
    reader recurses, and its RecursionError went up through the submit ("its configure
    raised RecursionError", naming no file) and the worker's plan. It reads as a
    pyproject.toml that does not parse: its packaging metadata is left out, pip's build
    says what is wrong."""
    made = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=True)
    assert any("-e ." in c for c in made.commands)
    from tickwork.worker.files import versions

    assert versions.scm({"pyproject.toml": pyproject}) is None
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_bytes(pyproject)
    from tickwork.store.artifacts import DirectoryArtifacts

    config = prepare(
        {"workspace": str(project), "test_command": "true"},
        state_dir=tmp_path / "state",
        artifacts=DirectoryArtifacts(tmp_path / "blobs"),
        trusted=False,
        workspace_roots=[tmp_path],
    )
    assert config["source"]["path"] == str(project)


def test_a_setup_cfg_s_interpolations_are_not_expanded() -> None:
    """setup.cfg's extras were read with configparser's `%(name)s` interpolation: ten
    values each naming the next eight times expand to 8^9 characters (a "billion laughs"),
    which held the worker's plan of the environment, and its memory, for as long as it
    took. Its values are read as written, as tox.ini's already are."""
    lines = ["[metadata]", "name = app", "[options.extras_require]"]
    lines.append("test = " + "%(v1)s" * 4)
    lines += [f"v{i} = " + f"%(v{i + 1})s" * 4 for i in range(1, 9)]
    lines.append("v9 = pytest")
    made = plan(AUTO, {"setup.cfg": "\n".join(lines).encode()}, uses_pytest=True, online=True)
    assert max(len(c) for c in made.commands) < 10_000
    assert max(len(w) for w in made.wanted) < 10_000


def _groups(names: list[str], fan: int) -> bytes:
    """A pyproject.toml whose `test` dependency group includes each of `names` in turn,
    each group `fan` times the next, the last requiring pytest."""
    chain = ["test", *names]
    lines = ['[project]\nname = "app"\n[dependency-groups]']
    for here, after in itertools.pairwise(chain):
        lines.append(f"{here} = [" + ", ".join([f'{{include-group = "{after}"}}'] * fan) + "]")
    lines.append(f'{chain[-1]} = ["pytest"]')
    return "\n".join(lines).encode()


@pytest.mark.parametrize(
    ("names", "fan"),
    [([f"g{i}" for i in range(20)], 2), ([f"g{i}" for i in range(3000)], 1)],
    ids=["diamonds", "a long chain"],
)
def test_included_dependency_groups_are_expanded_once_each(names: list[str], fan: int) -> None:
    """PEP 735's `{include-group = NAME}` was expanded anew at each mention: twenty groups
    each including the next twice are 2^20 copies of one requirement (forty: a worker that
    never ends its plan), and a chain of 3,000 groups raised RecursionError. Each group's
    requirements are taken once."""
    import tomllib

    from tickwork.worker.files.environment_plans import _dependency_groups

    pyproject = _groups(names, fan)
    assert _dependency_groups(tomllib.loads(pyproject.decode())) == {"test": ["pytest"]}
    made = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=True)
    assert "pytest" in made.wanted


#: click's: a `tests` group for the tests, a `dev` group for the developer's tools
CLICK = b"""
[build-system]
requires = ["flit_core>=3.11,<4"]
build-backend = "flit_core.buildapi"
[project]
name = "click"
[dependency-groups]
dev = ["ruff", "tox", "tox-uv", "pytest-cov", "freezegun"]
docs = ["sphinx"]
tests = ["pytest"]
"""


@pytest.mark.parametrize("where", ["group", "extra", "tools alone"])
def test_dev_s_tools_that_no_test_imports_are_left_out(where: str) -> None:
    """click's `dev` group (ruff, tox, tox-uv) took 27 s and 40 MB of the environment's
    build (tox-uv backtracked through ten versions for uv's 18 MB wheel) that no test
    imports, and put tox in /env, which cannot build its environments without the network.
    Linters, tox, nox, release and docs tools of `dev` are left out and `detected` says so;
    what a test may import or an `addopts` name (freezegun, pytest-cov) is installed."""
    pyproject = CLICK
    if where == "extra":
        pyproject = pyproject.split(b"[dependency-groups]")[0] + (
            b'[project.optional-dependencies]\ntests = ["pytest"]\n'
            b'dev = ["ruff", "tox", "tox-uv", "pytest-cov", "freezegun"]\n'
        )
    elif where == "tools alone":
        pyproject = pyproject.replace(b', "pytest-cov", "freezegun"', b"")
    made = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=True)
    joined = "\n".join(made.commands)
    assert "ruff" not in joined and "tox" not in joined and "[dev" not in joined, joined
    assert "-e '.[tests]' pytest" in joined or "-e . pytest" in joined, joined
    assert not {"ruff", "tox", "tox-uv"} & set(made.wanted), made.wanted
    assert "left out of dev, tools no test imports: ruff,tox,tox-uv" in made.detected
    if where != "tools alone":
        assert "pytest-cov" in joined and "freezegun" in joined
        assert {"pytest-cov", "freezegun"} <= set(made.wanted)
    else:
        assert "dependency groups: tests" in made.detected, made.detected


def test_dev_s_packaging_tools_are_left_out() -> None:
    """sqlparse's `dev` group holds pytest and coverage beside `build` and `hatch>=1.18`
    (which brings uv, virtualenv and httpx): its environment took 38 MB and 37 s for tools
    that build and publish the project, which no test imports."""
    sqlparse = b"""
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
[project]
name = "sqlparse"
[dependency-groups]
dev = ["pytest", "coverage", "ruff", "build", "sphinx", "furo", "hatch>=1.18.0", "flit"]
"""
    made = plan(AUTO, {"pyproject.toml": sqlparse}, uses_pytest=True, online=True)
    (install,) = [c for c in made.commands if "pip install" in c and "coverage" in c]
    assert install.startswith(f"{PIP} pytest coverage ||"), install
    assert "hatch" not in install and "build" not in install and "flit" not in install
    assert set(made.wanted) == {"pytest", "coverage", "sqlparse"}, made.wanted
    assert "left out of dev, tools no test imports: ruff,build,sphinx,furo,hatch,flit" in (
        made.detected
    ), made.detected


def test_the_requirements_of_extras_auto_does_not_install_are_recorded_by_extra() -> None:
    """idna's tests need hypothesis, which only its `all` extra names: the plan keeps where,
    so a test run stopped on it says which extra to install."""
    idna = b"""
[project]
name = "idna"
[project.optional-dependencies]
all = ["ruff >= 0.16.0", "pytest >= 8.3.2", "hypothesis >= 6.141.1"]
test = ["pytest"]
"""
    made = plan(AUTO, {"pyproject.toml": idna}, uses_pytest=True, online=True)
    assert dict(made.elsewhere) == {"ruff": "all", "hypothesis": "all"}


def test_a_requirements_folder_s_dev_file_is_left_out_beside_its_tests_file() -> None:
    """itsdangerous's requirements/dev.txt pins what every tox environment uses (sphinx,
    mypy, pyright, pre-commit, tox: 51 MB of its environment) beside requirements/tests.txt,
    which holds what the tests need; alone, a dev.txt is the test requirements."""
    files = {
        "pyproject.toml": PYPROJECT,
        "requirements/dev.txt": b"sphinx==7.2.6\nmypy==1.9.0\nfreezegun==1.4.0\n",
        "requirements/tests.txt": b"freezegun==1.4.0\npytest==8.1.1\n",
    }
    made = plan(AUTO, files, uses_pytest=True, online=True)
    joined = "\n".join(made.commands)
    assert "-r requirements/tests.txt" in joined and "requirements/dev.txt" not in joined
    assert "sphinx" not in made.wanted and "mypy" not in made.wanted
    assert "left out, not for the tests: requirements/dev.txt" in made.detected, made.detected
    del files["requirements/tests.txt"]
    alone = plan(AUTO, files, uses_pytest=True, online=True)
    assert "-r requirements/dev.txt" in "\n".join(alone.commands)


def _editable_check(tmp_path: Path, site: Path, project: Path) -> int:
    """The exit code of setup's editable-again check for calcpkg, run in `project` by an
    interpreter whose site-packages is `site` (1: replaced; installed editable again)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    found = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    Path(found.stdout.strip()).rmdir()
    Path(found.stdout.strip()).symlink_to(site)
    pyproject = b'[project]\nname = "calcpkg"\n[dependency-groups]\ntest = ["calctool"]\n'
    made = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=True)
    (again,) = [c for c in made.commands if "direct_url.json" in c]
    check = again.split(" || ")[0].replace("/env/bin/python", shlex.quote(str(python)))
    return subprocess.run(["sh", "-c", check], cwd=project, check=False).returncode


def test_an_old_style_develop_install_is_not_taken_for_a_replaced_one(tmp_path: Path) -> None:
    """A project pinning setuptools < 64 is installed by `setup.py develop`: an .egg-link
    and a path entry to the working copy, whose .egg-info has no direct_url.json. The check
    took it for the index's copy, installed it once more and said it had been replaced."""
    project, site = tmp_path / "src", tmp_path / "site"
    (project / "calcpkg.egg-info").mkdir(parents=True)
    (project / "calcpkg.egg-info" / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: calcpkg\nVersion: 0.1.0\n"
    )
    site.mkdir()
    (site / "calcpkg.egg-link").write_text(f"{project}\n.")
    (site / "easy-install.pth").write_text(f"{project}\n")
    assert _editable_check(tmp_path, site, project) == 0


def test_the_index_s_copy_over_the_editable_install_is_still_taken_for_a_replaced_one(
    tmp_path: Path,
) -> None:
    project, site = tmp_path / "src", tmp_path / "site"
    project.mkdir()
    (site / "calcpkg-2.0.0.dist-info").mkdir(parents=True)
    (site / "calcpkg-2.0.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: calcpkg\nVersion: 2.0.0\n"
    )
    assert _editable_check(tmp_path, site, project) == 1


def test_auto_installs_the_pytest_plugins_addopts_needs() -> None:
    """parse's pyproject says `addopts = "--cov=parse ..."` and declares pytest-cov nowhere:
    without it pytest refuses the option and no test runs, so `auto` installs it (each
    requirement alone if need be, listed missing if the index lacks it), before the check
    that the project is still installed editable."""
    pyproject = (
        b'[build-system]\nrequires = ["setuptools>=61.2"]\n[project]\nname = "parse"\n'
        b'[tool.pytest.ini_options]\naddopts = "--cov=parse --cov-branch -n 4 --doctest-modules"\n'
    )
    made = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=True)
    joined = "\n".join(made.commands)
    assert f"{PIP} pytest-cov pytest-xdist ||" in joined
    assert joined.index("pytest-cov pytest-xdist") < joined.index("installing the project editable")
    assert {"pytest-cov", "pytest-xdist"} <= set(made.wanted)
    assert "pytest plugins addopts needs: pytest-cov,pytest-xdist" in made.detected
    offline = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=False)
    assert "pytest-cov" in offline.commands[-1]  # listed missing, not installed
    # not where the tests do not use pytest, nor again where the project declares it
    assert (
        "pytest-cov"
        not in plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=False, online=True).wanted
    )
    declared = pyproject + b'[project.optional-dependencies]\ntest = ["pytest-cov>=4"]\n'
    again = plan(AUTO, {"pyproject.toml": declared}, uses_pytest=True, online=True)
    assert f"{PIP} pytest-xdist ||" in "\n".join(again.commands)
    assert "pytest plugins addopts needs: pytest-xdist" in again.detected


@pytest.mark.parametrize(
    ("files", "plugins"),
    [
        ({"setup.cfg": b"[tool:pytest]\naddopts = --timeout=30\n"}, ["pytest-timeout"]),
        (
            {"setup.py": b"", "tox.ini": b"[pytest]\naddopts =\n    --reruns 2\n"},
            ["pytest-rerunfailures"],
        ),
        (
            {
                "setup.py": b"",
                "pytest.ini": b"[pytest]\naddopts = --cov\n",
                "tox.ini": b"[pytest]\naddopts = --timeout=3\n",
            },
            ["pytest-cov"],
        ),
        (
            {"pyproject.toml": b'[project]\nname = "a"\n[tool.pytest]\naddopts = ["--cov=a"]\n'},
            ["pytest-cov"],
        ),
        (
            {
                "pyproject.toml": b'[project]\nname = "a"\n',
                "tox.ini": b"[pytest]\naddopts = -ra  # --cov\n",
            },
            [],
        ),
        ({"setup.cfg": b"[tool:pytest]\naddopts = --cov 'unclosed\n"}, ["pytest-cov"]),
        # pytest.ini is pytest's even when empty: the other files' addopts are not read
        ({"setup.cfg": b"[tool:pytest]\naddopts = --timeout=3\n", "pytest.ini": b""}, []),
        ({"pytest.ini": b"[pytest]\naddopts = -n auto\n"}, ["pytest-xdist"]),
    ],
    ids=[
        "setup.cfg",
        "tox.ini",
        "pytest.ini first",
        "tool.pytest",
        "a comment",
        "a quote",
        "an empty pytest.ini",
        "only pytest.ini",
    ],
)
def test_addopts_is_read_where_pytest_reads_it(files: dict[str, bytes], plugins: list) -> None:
    """pytest reads the first of pytest.ini, pyproject.toml, tox.ini and setup.cfg that has
    its section; so does `auto`, and pytest.ini is one of the files it is given."""
    made = plan(AUTO, files, uses_pytest=True, online=True)
    found = [d for d in made.detected if d.startswith("pytest plugins addopts needs: ")]
    assert found == ([f"pytest plugins addopts needs: {','.join(plugins)}"] if plugins else [])
    manifest = {p: entry("100644", blob_hash(c)) for p, c in files.items()}
    assert dependency_files(manifest) == sorted(files)


def test_a_folder_with_only_pytest_ini_gets_the_plugins_its_addopts_needs() -> None:
    """A plain folder of tests whose pytest.ini says `addopts = -n auto` got an empty
    environment: pytest refused `-n` ("unrecognized arguments") and no test ran. It gets a
    venv with pytest and pytest-xdist now, listed missing where setup has no network."""
    files = {"pytest.ini": b"[pytest]\naddopts = -n auto\n"}
    made = plan(AUTO, files, uses_pytest=True, online=True)
    joined = "\n".join(made.commands)
    assert f"{PIP} pytest-xdist ||" in joined and f"{PIP} pytest" in made.commands
    assert set(made.wanted) == {"pytest-xdist", "pytest"}
    assert made.detected == ("pytest.ini", "pytest plugins addopts needs: pytest-xdist")
    offline = plan(AUTO, files, uses_pytest=True, online=False)
    assert "pytest-xdist" in offline.commands[-1] and PIP not in "\n".join(offline.commands)
    # nothing to install: still an empty environment
    assert plan(AUTO, {"pytest.ini": b""}, uses_pytest=True, online=True).commands == ()
    assert plan(AUTO, {"pytest.ini": b"[pytest]\n"}, uses_pytest=True, online=True).commands == ()


def test_auto_installs_what_hatch_s_test_environments_add() -> None:
    """A hatch project names its test plugins in its environments (`[tool.hatch.envs.default]
    dependencies`, `hatch-test`'s `extra-dependencies`) and nowhere else: without them a test
    using `mocker` errors "fixture 'mocker' not found". Their linters are left out, and so
    are a context field's path and another environment's tools."""
    pyproject = (
        b'[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        b'[project]\nname = "hatchy"\nversion = "1"\n'
        b'[tool.hatch.envs.default]\ndependencies = ["pytest", "pytest-mock>=3", "ruff"]\n'
        b"[tool.hatch.envs.hatch-test]\n"
        b'extra-dependencies = ["freezegun", "lib @ {root:uri}/lib"]\n'
        b'[tool.hatch.envs.docs]\ndependencies = ["sphinx"]\n'
    )
    made = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=True)
    joined = "\n".join(made.commands)
    assert f"{PIP} pytest 'pytest-mock>=3' freezegun ||" in joined
    assert "ruff" not in joined and "sphinx" not in joined and "root:uri" not in joined
    assert {"pytest-mock", "freezegun"} <= set(made.wanted)
    assert "hatch environments: default,hatch-test" in made.detected
    assert "left out of hatch's environments, tools no test imports: ruff" in made.detected
    offline = plan(AUTO, {"pyproject.toml": pyproject}, uses_pytest=True, online=False)
    assert "pytest-mock" in offline.commands[-1]  # listed missing, not installed
