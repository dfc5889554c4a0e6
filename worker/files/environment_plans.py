"""What a repair job's environment is built by (docs/DESIGN.md section 13): the `setup`
input, the `auto` rule over the source's packaging files, and the key
(worker/files/environments.py builds it).

`auto`, from the files at the source's root: `pyproject.toml`, `setup.py` or `setup.cfg`
give a venv at /env (the interpreter's own packages visible) with the project installed
editable from /workspace with its `test`/`tests`/`dev`/`testing` extras (and those tox.ini's
`[testenv]` installs it with, `extras =`) and pytest when its tests use it, and what its
dependency groups (and hatch's test environments) of those names hold (what fails to install
is listed missing);
`requirements*.txt` and the test ones of a `requirements/` folder are installed, and the
plain requirements of tox.ini's `[testenv]` `deps` (the project is installed editable
again if one of these replaced it), and the well-known pytest plugins the options of
pytest's `addopts` need where nothing else names them (a venv with pytest and them where
only pytest.ini is found); none of these, an empty environment.
Without egress only what needs no network: the venv and the project (`--no-index
--no-deps`); a last command lists what the environment does not hold (MISSING lines).
"""

from __future__ import annotations

import configparser
import hashlib
import json
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tickwork.fsm.outcomes import PLUGIN_OPTIONS
from tickwork.store.files import Manifest, parse_entry
from tickwork.worker.files import versions
from tickwork.worker.files.sources import project_name

#: what `--setup` takes besides commands
AUTO, NONE = "auto", "none"
#: packaging files `auto` reads, at the source's root; also `requirements*.txt`, the test
#: requirements of a `requirements/` folder (REQUIREMENTS_FOLDER) and tox.ini
PACKAGING = ("pyproject.toml", "setup.py", "setup.cfg")
#: `requirements/test.txt`, `requirements/dev.txt`, `requirements/requirements-tests.txt`:
#: where a project keeps its test tools when its packaging does not name them
REQUIREMENTS_FOLDER = re.compile(
    r"requirements/(?:requirements[-_.]?)?(?:test|tests|testing|dev)(?:[-_.][^/]*)?\.txt"
)
#: a root `requirements-*.txt` named for another purpose than the tests, left out by `auto`:
#: wcwidth's `requirements-update.txt` and `requirements-wheels.txt` pin release tools (and
#: older versions of what the tests use); `requirements-docs.txt`, `requirements-lint.txt`
NOT_FOR_TESTS = re.compile(
    r"requirements[-_.](?:[^/]*[-_.])?(?:docs?|release|publish|deploy|wheels?|update|upgrade"
    r"|lint|linters?|style|format|pre-?commit|bench|benchmarks?)"
    r"(?:[-_.][^/]*)?\.txt"
)
#: a `requirements/` folder's dev file: beside a tests one, the developer's superset of
#: every tox environment's pins (itsdangerous's sphinx, mypy, pyright, tox: 51 MB)
FOLDER_DEV = re.compile(r"requirements/(?:requirements[-_.]?)?dev(?:[-_.][^/]*)?\.txt")
TOX = "tox.ini"
#: pytest's own configuration file, read (with the others) for the options `addopts` gives
PYTEST_INI = "pytest.ini"
#: optional-dependency groups `auto` installs when the project declares them
TEST_EXTRAS = ("test", "tests", "dev", "testing")
#: what a `dev` group or extra holds besides test tools that no test imports: linters,
#: formatters, tox and nox (which need a network the tests do not have), packaging, release
#: and docs tools; click's `dev` (ruff, tox, tox-uv) took 27 s and 40 MB of its environment's
#: build, sqlparse's `hatch` and `build` 38 MB
DEV_TOOLS = re.compile(
    r"(?:ruff|black|isort|flake8|pylint|pycodestyle|pydocstyle|autopep8|yapf|codespell"
    r"|pre-commit|prek|tox|nox|uv|build|hatch|flit|pdm|poetry"
    r"|twine|bump2version|bump-my-version|towncrier"
    r"|sphinx|sphinxcontrib|furo|mkdocs)(?:[-_.][a-z0-9_.-]*)?",
    re.IGNORECASE,
)
#: setup commands a job may give, and the longest one
MAX_SETUP_COMMANDS, MAX_SETUP_CHARS = 32, 8_000
#: a line setup's last command prints per distribution it could not find installed
MISSING = "tickwork-missing: "
#: what the log says when `auto` could not install the project itself without egress
OFFLINE = "tickwork: the project could not be installed without the network (see above)"
PIP = "/env/bin/python -m pip install --no-input --disable-pip-version-check"
#: what the log says when the project's test extras could not be installed together
EXTRAS_APART = (
    "tickwork: the project with its test extras could not be installed at once; "
    "now the project, then each requirement of the extras"
)
#: what lets pip install a project whose only packaging file is setup.cfg
SETUP_PY_SHIM = "printf 'from setuptools import setup\\n\\nsetup()\\n' > setup.py"


def check_setup(value: Any) -> str | list[str]:
    """The job's `setup` input checked: "auto" (also for None), "none", or a list of shell
    commands; raises ValueError naming what is wrong."""
    if value is None:
        return AUTO
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(
            '`setup` must be "auto", "none" or a list of shell commands (`--setup CMD`, '
            f"repeatable), got {value!r}"
        )
    if len(value) == 1 and (word := _keyword(value[0])) is not None:
        return word
    if len(value) > MAX_SETUP_COMMANDS:
        raise ValueError(f"`setup` takes at most {MAX_SETUP_COMMANDS} commands, got {len(value)}")
    commands = []
    for index, command in enumerate(value):
        where = f"`setup` command {index + 1}"
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"{where} must be a non-empty shell command, got {command!r}")
        if _keyword(command) is not None:
            raise ValueError(f"{where} is {command!r}: give it alone, not among commands")
        if len(command) > MAX_SETUP_CHARS:
            raise ValueError(f"{where} is longer than {MAX_SETUP_CHARS} characters")
        if "\x00" in command or any(0xD800 <= ord(c) <= 0xDFFF for c in command):
            raise ValueError(f"{where} holds a NUL or a lone surrogate character")
        commands.append(command.strip())
    return commands


def _keyword(value: Any) -> str | None:
    """ "auto" or "none" for `value` if it is one of them in any case or spacing (`--setup
    " none "` ran a command `none` that the shell could not find), else None."""
    word = value.strip().lower() if isinstance(value, str) else None
    return word if word in (AUTO, NONE) else None


@dataclass(frozen=True)
class Plan:
    """What setup runs for a source, and what makes its key."""

    setup: str | tuple[str, ...]
    commands: tuple[str, ...]
    #: dependency files at the source's root -> SHA-256 of their content
    files: Mapping[str, str]
    online: bool
    index_url: str
    #: distributions `auto` expects installed (those missing are listed on the card)
    wanted: tuple[str, ...] = ()
    #: what `auto` found, for the card
    detected: tuple[str, ...] = ()
    #: the variables setup runs with besides tickwork's own (a VCS version plugin's)
    variables: tuple[tuple[str, str], ...] = ()
    #: the version given to a VCS version plugin, and where it came from, for the card
    version: Mapping[str, str] | None = None
    #: (distribution, extra) of what only extras `auto` does not install declare (idna's
    #: `all` holds its hypothesis): a test run stopped on one says which extra to install
    elsewhere: tuple[tuple[str, str], ...] = ()

    def key(self, toolchain: str, *, source: str = "", egress: str = "") -> str:
        """The environment's key. `source`: the identity of the whole source tree, since
        setup runs in it (`pip install -e .` runs the project's own build code, a custom
        command may run any script of it), so two sources that only share their packaging
        files never share an environment; `egress`: the allow-list setup ran with. The
        variables only when there are some, so that other projects' keys stay as they were."""
        material: dict[str, Any] = {
            "commands": list(self.commands),
            "files": dict(sorted(self.files.items())),
            "online": self.online,
            "index": self.index_url,
            "toolchain": toolchain,
            "source": source,
            "egress": egress,
        }
        if self.variables:
            material["variables"] = dict(self.variables)
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def dependency_files(manifest: Manifest) -> list[str]:
    """The packaging and requirements files at the source's root, the test requirements of
    its `requirements/` folder, tox.ini and pytest.ini."""
    return sorted(
        p
        for p in manifest
        if p in PACKAGING
        or p in (TOX, PYTEST_INI)
        or re.fullmatch(r"requirements[^/]*\.txt", p)
        or REQUIREMENTS_FOLDER.fullmatch(p)
    )


def _name(requirement: str) -> str | None:
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return found.group(1) if found else None


def _wanted(requirement: str) -> str | None:
    """What the last setup command checks for `requirement`: its name, and its environment
    marker after a `;` when it has one (`pytest-run-parallel; python_full_version >=
    '3.13'`), which that command evaluates with the environment's interpreter: a
    requirement for other interpreters is not missing."""
    name = _name(requirement)
    if name is None:
        return None
    marker = requirement.split(" #", 1)[0].partition(";")[2].strip()
    return f"{name}; {marker}" if marker else name


def _table(value: Any) -> dict[str, Any]:
    """A TOML table the project wrote, or an empty one where it wrote something else (the
    submitter's file: a string where a table belongs fails pip's build, not our plan)."""
    return value if isinstance(value, dict) else {}


def _strings(value: Any) -> list[str]:
    """The requirement strings of a TOML array; none from anything else (`test = "pytest"`
    would otherwise be read a character at a time)."""
    return [r for r in value if isinstance(r, str)] if isinstance(value, list) else []


def _pyproject(content: bytes) -> dict[str, Any]:
    try:
        return tomllib.loads(content.decode("utf-8", "replace"))
    except (tomllib.TOMLDecodeError, RecursionError):  # nested too deeply to read: the same
        return {}


def _setup_cfg_extras(content: bytes) -> dict[str, list[str]]:
    """The extras of setup.cfg, read as written: no `%(name)s` interpolation, which a file of
    ten values each naming the next eight times expands to 8^9 characters."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(content.decode("utf-8", "replace"))
    except configparser.Error:
        return {}
    if not parser.has_section("options.extras_require"):
        return {}
    return {
        name: [line for line in value.splitlines() if line.strip()]
        for name, value in parser.items("options.extras_require")
    }


def _testenv(content: bytes, key: str) -> list[str]:
    """The lines of tox.ini's `[testenv]` `key` that hold for every environment: a line for
    some factors only (`py312: ipython`) or with a substitution is left out; comments and
    blank lines dropped."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(content.decode("utf-8", "replace"))
        value = parser.get("testenv", key, fallback="")
    except configparser.Error:
        return []
    kept = []
    for line in value.splitlines():
        line = line.split(" #", 1)[0].strip().replace("{toxinidir}/", "")
        if not line or line.startswith("#") or "{" in line or re.match(r"[\w,!.-]+:\s", line):
            continue
        kept.append(line)
    return kept


def _tox_extras(content: bytes) -> list[str]:
    """The extras tox.ini's `[testenv]` installs the project with in every environment
    (`extras = testing` or one per line, comma-separated too): where a project whose extra
    has another name than TEST_EXTRAS' says what its tests need (`extras = full`)."""
    names = (name.strip() for line in _testenv(content, "extras") for name in line.split(","))
    return list(dict.fromkeys(name for name in names if re.fullmatch(r"[\w.-]+", name)))


def _tox_deps(content: bytes) -> list[str]:
    """The `deps` of tox.ini's `[testenv]` that hold for every environment, where many
    projects name their test plugins (pytest-mock, pytest-cov) and nowhere else: plain
    requirements and `-r FILE` lines (`{toxinidir}/` dropped); a line for some factors only
    (`py312: ipython`), with another substitution, an option or a path is left out."""
    deps = []
    for line in _testenv(content, "deps"):
        if found := re.fullmatch(r"-r\s*(\S+)", line):
            deps.append(f"-r{found.group(1)}")
        elif _name(line) and not re.match(r"[\w.-]+/", line):
            # not a path (`.`, `.[test]`, `src/x`): a copy of the project installed over
            # the editable one would hide the session's edits from its tests
            deps.append(line)
    return deps


def _addopts(files: Mapping[str, bytes]) -> list[str]:
    """The words of `addopts` in the configuration file pytest reads (the first of
    pytest.ini, pyproject.toml's `[tool.pytest.ini_options]` or `[tool.pytest]`, tox.ini's
    `[pytest]`, setup.cfg's `[tool:pytest]` that has its section), or none."""
    for path, section in ((PYTEST_INI, "pytest"), ("pyproject.toml", ""), (TOX, "pytest")):
        if path not in files:
            continue
        if path == PYTEST_INI:
            # pytest reads pytest.ini first, even an empty one or one without [pytest]
            return _split(_ini_value(files[path], section, "addopts") or "")
        if not section:
            tool = _table(_pyproject(files[path]).get("tool"))
            table = _table(tool.get("pytest"))
            if not table:
                continue
            value = _table(table.get("ini_options")).get("addopts", table.get("addopts"))
            words = _strings(value) if isinstance(value, list) else [str(value or "")]
            return [w for v in words for w in _split(v)]
        if (found := _ini_value(files[path], section, "addopts")) is not None:
            return _split(found)
    found = _ini_value(files.get("setup.cfg", b""), "tool:pytest", "addopts")
    return _split(found or "")


def _ini_value(content: bytes, section: str, key: str) -> str | None:
    """`key` of an ini file's `section`: "" where the section has no such key, None where
    the file has no such section (pytest then reads the next file)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(content.decode("utf-8", "replace"))
    except configparser.Error:
        return None
    return parser.get(section, key, fallback="") if parser.has_section(section) else None


def _split(value: str) -> list[str]:
    try:
        return shlex.split(value, comments=True)
    except ValueError:  # an unclosed quote: pytest's own error, not our plan's
        return value.split()


def _addopts_plugins(files: Mapping[str, bytes]) -> list[str]:
    """The well-known pytest plugins whose options the project's `addopts` gives (parse's
    `--cov=parse` needs pytest-cov, which parse declares nowhere): without the plugin pytest
    refuses the option and no test runs."""
    return list(
        dict.fromkeys(
            plugin
            for word in _addopts(files)
            for option, plugin in PLUGIN_OPTIONS
            if option.match(word)
        )
    )


_END = object()


def _dependency_groups(meta: Mapping[str, Any]) -> dict[str, list[str]]:
    """The requirements of those of TEST_EXTRAS the project declares as dependency groups
    (PEP 735 `[dependency-groups]`, where uv and pdm keep test tools), an
    `{include-group = NAME}` entry expanded, pdm's older `[tool.pdm.dev-dependencies]`
    (its editable `-e` entries left out) and Poetry's `[tool.poetry.group.NAME.dependencies]`
    (`[tool.poetry.dev-dependencies]` for `dev`); pip before 25.1 has no `--group`, so `auto`
    installs them by name."""
    groups = meta.get("dependency-groups")
    groups = groups if isinstance(groups, Mapping) else {}
    tool = meta.get("tool")
    pdm = tool.get("pdm") if isinstance(tool, Mapping) else None
    legacy = pdm.get("dev-dependencies") if isinstance(pdm, Mapping) else None
    legacy = legacy if isinstance(legacy, Mapping) else {}

    def entries_of(name: str) -> Iterator[Any]:
        entries = groups.get(name)
        return iter(entries if isinstance(entries, list) else [])

    def expand(name: str) -> list[str]:
        """The group's requirements, an included group's in its place, each group taken
        at its first mention only (a cycle adds nothing more; twenty groups each including
        the next twice are not 2^20 copies), without recursing (a chain of thousands)."""
        found: list[str] = []
        seen, stack = {name}, [entries_of(name)]
        while stack:
            entry = next(stack[-1], _END)
            if entry is _END:
                stack.pop()
            elif isinstance(entry, str):
                found.append(entry)
            elif isinstance(entry, Mapping) and isinstance(entry.get("include-group"), str):
                included = entry["include-group"]
                if included not in seen:
                    seen.add(included)
                    stack.append(entries_of(included))
        return found

    found = {g: expand(g) for g in TEST_EXTRAS if g in groups}
    for group in TEST_EXTRAS:
        entries = legacy.get(group)
        if isinstance(entries, list):
            found.setdefault(group, []).extend(
                e for e in entries if isinstance(e, str) and not e.lstrip().startswith("-")
            )
    poetry = tool.get("poetry") if isinstance(tool, Mapping) else None
    poetry = poetry if isinstance(poetry, Mapping) else {}
    tables = (
        {
            g: t.get("dependencies")
            for g, t in (poetry.get("group") or {}).items()
            if isinstance(t, Mapping)
        }
        if isinstance(poetry.get("group"), Mapping)
        else {}
    )
    if "dev" not in tables and isinstance(poetry.get("dev-dependencies"), Mapping):
        tables["dev"] = poetry["dev-dependencies"]
    for group in TEST_EXTRAS:
        if isinstance(table := tables.get(group), Mapping):
            found.setdefault(group, []).extend(
                r for n, c in table.items() if (r := _poetry_requirement(n, c))
            )
    return found


def _hatch_envs(meta: Mapping[str, Any]) -> dict[str, list[str]]:
    """The `dependencies` and `extra-dependencies` of hatch's environments the tests run in
    (`default`, `hatch-test`, those of TEST_EXTRAS' names), where a hatch project names its
    test tools and plugins (pytest-mock) and nowhere else; one with a context field
    (`{root:uri}/lib`) is left out, as are hatch's own defaults."""
    tool = _table(meta.get("tool"))
    envs = _table(_table(tool.get("hatch")).get("envs"))
    found = {}
    for env in ("default", "hatch-test", *TEST_EXTRAS):
        table = _table(envs.get(env))
        listed = [*_strings(table.get("dependencies")), *_strings(table.get("extra-dependencies"))]
        if kept := [r for r in listed if "{" not in r and _name(r)]:
            found[env] = kept
    return found


def _poetry_requirement(name: str, constraint: Any) -> str | None:
    """A PEP 508 requirement for a Poetry dependency (`pytest = "^7.2"`, a table with
    `version`); None for `python`, a path, git or URL dependency. Poetry's `^` and `~`
    become their ranges; what is not understood installs the name alone."""
    if name == "python" or not _name(name) or _name(name) != name:
        return None
    if isinstance(constraint, Mapping):
        if any(k in constraint for k in ("path", "git", "url")):
            return None
        constraint = constraint.get("version", "*")
    spec = str(constraint).strip() if isinstance(constraint, str) else "*"
    if spec.startswith(("^", "~")) and not spec.startswith("~="):
        op, version = spec[0], spec.lstrip("^~").strip()
        parts = version.split(".")
        if not all(p.isdigit() for p in parts):
            return name
        numbers = [int(p) for p in parts]
        if op == "^":  # the leftmost non-zero part may not change
            at = next((i for i, n in enumerate(numbers) if n), len(numbers) - 1)
        else:  # ~1.2.3 and ~1.2: the minor may not change; ~1: the major
            at = min(1, len(numbers) - 1)
        upper = [*numbers[:at], numbers[at] + 1]
        return f"{name}>={version},<{'.'.join(map(str, upper))}"
    if spec in ("", "*"):
        return name
    if re.fullmatch(r"[0-9][0-9A-Za-z.+!*-]*", spec):
        return f"{name}=={spec}"
    if re.fullmatch(r"(?:[<>=!~]=?\s*[0-9][0-9A-Za-z.+!*-]*\s*,?\s*)+", spec):
        return f"{name}{spec.replace(' ', '')}"
    return name


def plan(
    setup: str | list[str] | tuple[str, ...],
    files: Mapping[str, bytes],
    *,
    uses_pytest: bool,
    online: bool,
    index_url: str = "",
    version: Any = None,
) -> Plan:
    """The setup for `setup` over the source's dependency `files` (path -> content);
    `version`: what the source recorded of its checkout's version (`versions.of_checkout`)."""
    hashes = {p: hashlib.sha256(c).hexdigest() for p, c in files.items()}
    scm = versions.scm(files)
    variables: dict[str, str] = {}
    said: dict[str, str] | None = None
    keep = None
    if scm is not None:
        variables, said = versions.pretend(scm, version)
        keep = versions.keep_command(scm)
    pretended = tuple(sorted(variables.items()))
    if setup != AUTO:
        given = tuple(setup) if not isinstance(setup, str) else ()
        commands = (*given, keep) if given and keep else given
        return Plan(given, commands, hashes, online, index_url, variables=pretended, version=said)
    project = any(p in files for p in PACKAGING)
    requirements = sorted(
        p for p in files if p.startswith("requirements") and not NOT_FOR_TESTS.fullmatch(p)
    )
    other_purposes = sorted(p for p in files if NOT_FOR_TESTS.fullmatch(p))
    if any(REQUIREMENTS_FOLDER.fullmatch(p) and not FOLDER_DEV.fullmatch(p) for p in files):
        other_purposes += [p for p in requirements if FOLDER_DEV.fullmatch(p)]
        requirements = [p for p in requirements if not FOLDER_DEV.fullmatch(p)]
    tox = _tox_deps(files.get(TOX, b""))
    # a folder of tests with only pytest.ini, whose addopts needs a plugin (`-n auto`): a
    # venv with pytest and it, else pytest refuses the option and no test runs
    addopts_plugins = _addopts_plugins(files) if uses_pytest else []
    if not (project or requirements or tox or addopts_plugins):
        return Plan(AUTO, (), hashes, online, index_url)
    venv = "python3 -m venv --system-site-packages --without-pip /env"
    commands = [
        venv,
        # the interpreter's own pip serves the venv; one of its own if it has none
        "/env/bin/python -m pip --version >/dev/null 2>&1 || /env/bin/python -m ensurepip",
        # so that `pip install` in a command means this environment's pip
        "printf '#!/bin/sh\\nexec /env/bin/python -m pip \"$@\"\\n' > /env/bin/pip"
        " && chmod 755 /env/bin/pip",
    ]
    wanted: list[str] = []
    elsewhere: dict[str, str] = {}
    # the project's own distribution, and whether setup installs anything after it
    own, more_after = None, bool(requirements or tox)
    detected = [*sorted(p for p in files if p in PACKAGING), *requirements]
    if not (project or requirements or tox) and PYTEST_INI in files:
        detected.append(PYTEST_INI)
    if other_purposes:
        detected.append(f"left out, not for the tests: {','.join(other_purposes)}")
    if project:
        meta = _pyproject(files.get("pyproject.toml", b""))
        table = _table(meta.get("project"))
        declared = {k: _strings(v) for k, v in _table(table.get("optional-dependencies")).items()}
        declared.update(_setup_cfg_extras(files.get("setup.cfg", b"")))
        extras = [e for e in TEST_EXTRAS if e in declared]
        # those tox installs the project with, under the name the project declares them
        by_normal = {_normal(e): e for e in declared}
        from_tox = list(
            dict.fromkeys(  # `full` and `Full` are one extra: installed and said once
                by_normal[n]
                for e in _tox_extras(files.get(TOX, b""))
                if (n := _normal(e)) in by_normal
            )
        )
        extras += [e for e in from_tox if e not in extras]
        groups = _dependency_groups(meta)
        tools = list(
            dict.fromkeys(
                n
                for r in [*(declared["dev"] if "dev" in extras else ()), *groups.get("dev", ())]
                if (n := _name(r)) and DEV_TOOLS.fullmatch(n)
            )
        )
        if tools:
            if "dev" in extras:  # pip installs an extra whole: its other requirements apart
                extras.remove("dev")
                groups["dev"] = [*declared["dev"], *groups.get("dev", ())]
            if not (kept := [r for r in groups["dev"] if _name(r) not in tools]):
                del groups["dev"]
            else:
                groups["dev"] = kept
            detected.append(
                f"left out of dev, tools no test imports: {','.join(dict.fromkeys(tools))}"
            )
        hatch = _hatch_envs(meta)
        hatch_tools = list(
            dict.fromkeys(
                n for g in hatch.values() for r in g if DEV_TOOLS.fullmatch(n := _name(r) or "")
            )
        )
        if hatch_tools:
            hatch = {
                e: k
                for e, r in hatch.items()
                if (k := [x for x in r if _name(x) not in hatch_tools])
            }
            detected.append(
                f"left out of hatch's environments, tools no test imports: {','.join(hatch_tools)}"
            )
        grouped = list(dict.fromkeys(r for g in [*groups.values(), *hatch.values()] for r in g))
        installed = {_normal(n) for r in grouped if (n := _name(r))}
        installed |= {_normal(n) for e in extras for r in declared[e] if (n := _name(r))}
        installed |= {"pytest"} if uses_pytest else set()
        for extra, listed in declared.items():
            for n in (_name(r) for r in listed if extra not in extras):
                if n and _normal(n) not in installed and _normal(n) not in elsewhere:
                    elsewhere[_normal(n)] = extra
        name = table.get("name")
        wanted += [n for r in _strings(table.get("dependencies")) if (n := _wanted(r))]
        wanted += [n for e in extras for r in declared[e] if (n := _wanted(r))]
        wanted += [n for r in grouped if (n := _wanted(r))]
        target = "." + (f"[{','.join(extras)}]" if extras else "")
        if "setup.cfg" in files and not {"setup.py", "pyproject.toml"} & files.keys():
            # pip installs no project without setup.py or pyproject.toml ("does not appear
            # to be a Python project"): setuptools' own two-line setup.py, written into
            # setup's throw-away copy of the source, lets it read the setup.cfg
            commands.append(SETUP_PY_SHIM)
        if online:
            requires = _strings(_table(meta.get("build-system")).get("requires"))
            if requires:
                # the newest that satisfy them, as pip's build isolation takes: the system's
                # older setuptools 66 satisfies wrapt's `setuptools>=62` but cannot read its
                # `license = "BSD-2-Clause"` (77 can)
                quoted = " ".join(shlex.quote(r) for r in requires)
                commands.append(f"{PIP} --upgrade {quoted}")
            # without build isolation pip installs none of what the backend asks for besides
            # (hatchling's `editables`, a setup.py's setup_requires): ask it, install those
            commands.append(_backend_requires_command())
            more = " pytest" if uses_pytest else ""
            install = f"{PIP} --no-build-isolation -e {shlex.quote(target)}{more}"
            if extras:
                # a requirement of an extra the index lacks (a benchmark plugin in `tests`)
                # must not cost the project and the others: the project alone, then each
                # requirement it can; the last command lists the others missing
                needed = [r for e in extras for r in declared[e]]
                install = (
                    f"{install} || {{ echo '{EXTRAS_APART}'; "
                    f"{PIP} --no-build-isolation -e .{more} && "
                    f"{_each(list(dict.fromkeys(needed)), 'test extra')}; }}"
                )
            commands.append(install)
            if grouped:
                commands.append(_groups_command(grouped))
        else:
            # a build backend the interpreter lacks (hatchling, poetry-core) needs the
            # network: then the project is listed as missing, the session goes on
            commands.append(
                f"{PIP} --no-index --no-deps --no-build-isolation -e . || echo '{OFFLINE}'"
            )
        if keep:
            commands.append(keep)
        if "setup.py" in files:
            # setuptools builds a setup.py's extension modules in place, in setup's copy of
            # the source: kept in the environment, put into each session's working copy
            commands.append(versions.keep_built_command())
        if isinstance(name, str) and _name(name):
            wanted.append(name)
        # pyproject.toml's name, else setup.cfg's (python-dateutil 2.x, whose freezegun in
        # requirements-dev.txt needs python-dateutil>=2.7)
        own, more_after = project_name(None, files) or None, more_after or bool(grouped or extras)
        if extras:
            detected.append(f"extras: {','.join(extras)}")
        if from_tox:
            detected.append(f"tox.ini extras: {','.join(from_tox)}")
        if groups:
            detected.append(f"dependency groups: {','.join(groups)}")
        if hatch:
            detected.append(f"hatch environments: {','.join(hatch)}")
    for path in requirements:
        wanted += [
            n
            for line in files[path].decode("utf-8", "replace").splitlines()
            if not line.strip().startswith(("#", "-")) and (n := _wanted(line))
        ]
        if online:
            commands.append(_requirements_command(path, files[path]))
    copies = [
        path
        for path in requirements
        if re.search(r"^\s*(?:\.|file:)", files[path].decode("utf-8", "replace"), re.M)
    ]
    if tox:
        # tox installs them itself; what the index lacks is listed missing, as a group's
        wanted += [n for r in tox if not r.startswith("-") and (n := _wanted(r))]
        detected.append(f"tox.ini deps: {','.join(tox)}")
        if online:
            commands.append(_groups_command(tox, "tox.ini deps"))
    known = {_normal(w.split(";", 1)[0]) for w in wanted}
    plugins = [p for p in addopts_plugins if _normal(p) not in known]
    if uses_pytest and plugins:
        # before the check of the editable install: a plugin may depend on the project
        # (pytest-cov on coverage) and replace it with the index's copy
        wanted += plugins
        detected.append(f"pytest plugins addopts needs: {','.join(plugins)}")
        if online:
            commands.append(_groups_command(plugins, "pytest plugin"))
            more_after = True
    if copies and project and online:
        # a requirements line `.` or `.[test]` installed a copy of the project over the
        # editable one: the tests would import that copy, never the session's edits
        commands.append(f"{PIP} --no-deps --no-build-isolation -e .")
    elif own and more_after and online:
        commands.append(_editable_again_command(own))
    if uses_pytest:
        wanted.append("pytest")
        if online and not project:
            commands.append(f"{PIP} pytest")
    wanted = list(dict.fromkeys(wanted))
    if wanted:
        commands.append(_check_command(wanted))
    return Plan(
        AUTO,
        tuple(commands),
        hashes,
        online,
        index_url,
        tuple(wanted),
        tuple(detected),
        variables=pretended,
        version=said,
        elsewhere=tuple(elsewhere.items()),
    )


def _normal(name: str) -> str:
    """A distribution's name as compared (`Pytest_Cov`: `pytest-cov`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


#: asks the project's build backend what an editable build needs beside `requires`
#: (PEP 660's hook, else PEP 517's for a wheel) and installs it; a backend it cannot load
#: or ask is left to the install that follows, which says why in pip's words
_BACKEND_REQUIRES = """\
import importlib, os, subprocess, sys
try:
    import tomllib
except ImportError:
    from pip._vendor import tomli as tomllib
system = {}
if os.path.exists("pyproject.toml"):
    with open("pyproject.toml", "rb") as f:
        system = tomllib.load(f).get("build-system", {})
sys.path[:0] = [os.path.abspath(p) for p in system.get("backend-path", [])]
module, _, attrs = system.get("build-backend", "setuptools.build_meta:__legacy__").partition(":")
try:
    backend = importlib.import_module(module)
    for attr in filter(None, attrs.split(".")):
        backend = getattr(backend, attr)
    hook = getattr(backend, "get_requires_for_build_editable", None) or getattr(
        backend, "get_requires_for_build_wheel", None
    )
    wanted = list(hook()) if hook else []
except Exception as exc:
    print(f"tickwork: the build backend {module} could not be asked what it needs: {exc!r}")
    sys.exit(0)
if wanted:
    print("tickwork: the build backend also needs " + " ".join(wanted), flush=True)
    sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "--no-input",
                              "--disable-pip-version-check", *wanted]))
"""


def _backend_requires_command() -> str:
    """A setup command installing what the build backend asks for beside its `requires`."""
    return f"/env/bin/python -c {shlex.quote(_BACKEND_REQUIRES)}"


#: exits 1 when the distribution argv[1] is installed but not editable: a later install
#: replaced the project's editable install with the index's copy. An old-style `setup.py
#: develop` install (a project pinning setuptools < 64) has no direct_url.json: its metadata
#: lies in the working copy (the current folder), found through an .egg-link's path entry
_EDITABLE = """\
import importlib.metadata as m, json, os, sys
try:
    found = m.distribution(sys.argv[1])
    url = json.loads(found.read_text("direct_url.json") or "{}")
    here, where = os.path.realpath("."), os.path.realpath(found.locate_file(""))
except Exception:
    sys.exit(0)
ours = os.path.commonpath([here, where]) == here
sys.exit(0 if url.get("dir_info", {}).get("editable") or ours else 1)
"""
#: what the log says when setup installs the project editable again
EDITABLE_AGAIN = (
    "tickwork: a later install replaced the project's editable install with the index's "
    "copy (a test tool depends on it); installing the project editable again"
)


def _editable_again_command(name: str) -> str:
    """A setup command installing the project `name` editable again if what setup installed
    after it replaced it (iniconfig's `pytest>=8.4.2` needs `iniconfig>=2`, and a checkout
    without tags builds 0.1.dev1): else every test run imports the index's copy, never the
    session's files, and a broken project's tests pass."""
    check = f"/env/bin/python -I -c {shlex.quote(_EDITABLE)} {shlex.quote(name)}"
    again = f"{PIP} --no-deps --no-build-isolation -e ."
    return f"{check} || {{ echo {shlex.quote(EDITABLE_AGAIN)}; {again}; }}"


def _groups_command(requirements: list[str], what: str = "dependency group") -> str:
    """A setup command installing a dependency group's `requirements`, else each one it can
    (a dev group's docs or lint tool the index lacks must not cost the tests theirs): what
    it could not install the last command lists as missing, and the session goes on."""
    quoted = " ".join(map(shlex.quote, requirements))
    return f"{PIP} {quoted} || {_each(requirements, what)}"


def _requirements_command(path: str, content: bytes) -> str:
    """A setup command installing the requirements file `path`, else each of its plain
    requirements it can: a lint or docs file's tool the index lacks (humanize's
    `requirements-mypy.txt`) must not cost the tests their environment; what could not be
    installed the last command lists as missing, and the session goes on."""
    whole = f"{PIP} -r {shlex.quote(path)}"
    text = content.decode("utf-8", "replace").replace("\\\n", " ")
    plain = [
        # a line's options (`--hash=...`) are pip's, not the requirement's
        line.split(" #", 1)[0].split(" -", 1)[0].strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith(("#", "-", "."))
    ]
    if not plain:
        return whole
    said = f"tickwork: {path} could not be installed whole; now each of its requirements"
    return f"{whole} || {{ echo {shlex.quote(said)}; {_each(plain, path)}; }}"


def _each(requirements: list[str], what: str) -> str:
    """A shell loop installing each of `requirements` it can, saying which it could not."""
    quoted = " ".join(map(shlex.quote, requirements))
    return (
        f'for r in {quoted}; do {PIP} "$r" || '
        f'echo "tickwork: {what} requirement $r could not be installed"; done'
    )


def _check_command(names: list[str]) -> str:
    """A last setup command printing MISSING and the name of each of `names` (`_wanted`'s:
    a name, or a name and its marker) the environment does not hold, leaving out those
    whose marker does not hold for its interpreter (without failing: the card says what it
    could not install)."""
    script = (
        "import importlib.metadata as m, sys\n"
        "for n in sys.argv[1:]:\n"
        "    try: m.version(n)\n"
        f"    except m.PackageNotFoundError: print({MISSING!r} + n)\n"
    )
    if any(";" in n for n in names):
        # only then: the plain script, and so the key, of other projects stays as it was
        script = (
            "import importlib.metadata as m, sys\n"
            # pip's own copy first: `packaging` may be the project itself, broken
            "try:\n"
            "    from pip._vendor.packaging.markers import Marker\n"
            "except Exception:\n"
            "    try: from packaging.markers import Marker\n"
            "    except Exception: Marker = None\n"
            "said = set()\n"
            "for w in sys.argv[1:]:\n"
            "    n, _, marker = w.partition(';')\n"
            "    n = n.strip()\n"
            "    if marker and Marker is not None:\n"
            "        try:\n"
            "            if not Marker(marker).evaluate({'extra': ''}): continue\n"
            "        except Exception: pass\n"
            "    try: m.version(n)\n"
            "    except m.PackageNotFoundError:\n"
            f"        if n not in said: said.add(n); print({MISSING!r} + n)\n"
        )
    # -I: not from /workspace, whose own metadata (an sdist's `*.egg-info`) is not installed
    return f"/env/bin/python -I -c {shlex.quote(script)} " + " ".join(map(shlex.quote, names))


_PYTEST_HINTS = (b"import pytest", b"from pytest", b"[tool.pytest", b"[tool:pytest]")
#: tox.ini's section of pytest's configuration
_PYTEST_SECTION = re.compile(rb"^\[pytest\][ \t]*\r?$", re.MULTILINE)


def uses_pytest(manifest: Manifest, blobs: Any, test_command: str) -> bool:
    """Whether the project's tests use pytest: the test command says so, it has pytest's
    configuration, or its test files import it (the first 50 of them are read)."""
    if "pytest" in test_command or "py.test" in test_command:
        return True
    names = {p.rsplit("/", 1)[-1] for p in manifest}
    if names & {"conftest.py", "pytest.ini"}:
        return True
    tests = [
        p
        for p in sorted(manifest)
        if re.search(r"(^|/)(test_[^/]*|[^/]*_test)\.py$", p)
        or p in ("pyproject.toml", "setup.cfg", "tox.ini")
    ][:50]
    keys = {parse_entry(manifest[p])[1] for p in tests}
    contents = blobs(keys) if keys else {}
    return any(
        any(hint in text for hint in _PYTEST_HINTS) or _PYTEST_SECTION.search(text)
        for text in map(contents.__getitem__, keys)
    )
