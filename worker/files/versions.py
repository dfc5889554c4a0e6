"""A project's version when its build takes it from git (setuptools-scm, hatch-vcs,
pdm-backend's `scm` source, poetry-dynamic-versioning; docs/ENVIRONMENTS.md).

A packed source has no `.git`, and its `.gitignore` usually leaves out the version file the
plugin writes (`src/pkg/_version.py`), so the plugin cannot find a version in setup's copy:

- at submit, `of_checkout` reads the version the user's checkout has: its commit's
  `git describe`, as setuptools-scm reads it, else the version file the `.gitignore`
  left out, else an unpacked sdist's `PKG-INFO` (for hatch-vcs that first: hatchling
  builds an sdist from its `PKG-INFO`'s version); it is recorded with the source;
- setup gets it through the plugins' own override (`pretend`: SETUPTOOLS_SCM_PRETEND_VERSION,
  PDM_BUILD_SCM_VERSION, ...), the project's `fallback_version` or `0+unknown` without one;
- the version file the build then wrote in setup's copy is kept in the environment
  (`keep_command`) and put into each session's working copy, where its `.gitignore` leaves
  it out of the session's files and the patch (`restore`); so is an extension module an
  editable install built in place (`keep_built_command`), which the working copy leaves
  out as it leaves out every compiled object.
"""

from __future__ import annotations

import filecmp
import os
import re
import shlex
import stat
import subprocess
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tickwork.worker.files.filetree import Ignore, built_object, walk

#: the packaging files a plugin is found in, at the project's root
PACKAGING = ("pyproject.toml", "setup.py", "setup.cfg")
#: where the environment keeps the version files its build wrote (under /env)
GENERATED = ".tickwork/generated"
#: what a session is given when its version is not known and the project names no fallback
UNKNOWN = "0+unknown"
#: a version file larger than this is no version file; at most this many are kept
MAX_VERSION_FILE_BYTES, MAX_VERSION_FILES = 65_536, 8
#: an extension module setup built in place: at most this large, at most this many kept
MAX_BUILT_FILE_BYTES, MAX_BUILT_FILES = 50_000_000, 64
GIT_TIMEOUT_S = 30.0
#: the hex digits that name the commit, in the version (`+gabc1234`) and in the `git
#: describe` it came from alike (more only where 7 are ambiguous): git's `--short` for a
#: repository of any size, not its abbreviation that grows with the repository or follows
#: its core.abbrev
SHORT_NODE = 7
#: the variable each plugin takes its version from instead of git
PRETEND = {
    "setuptools-scm": "SETUPTOOLS_SCM_PRETEND_VERSION",
    "hatch-vcs": "SETUPTOOLS_SCM_PRETEND_VERSION",
    "pdm-backend": "PDM_BUILD_SCM_VERSION",
    "poetry-dynamic-versioning": "POETRY_DYNAMIC_VERSIONING_BYPASS",
}
#: PEP 440 (packaging's VERSION_PATTERN)
_PEP440 = re.compile(
    r"""v?(?:(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*
    (?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?
    (?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?
    (?:[-_.]?dev[-_.]?[0-9]*)?)
    (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?""",
    re.VERBOSE | re.IGNORECASE,
)
#: setuptools-scm's default reading of a tag (a `name-` prefix, a `v`, a `+local` dropped)
_TAG = re.compile(r"^(?:[\w-]+-)?[vV]?(?P<version>\d+(?:\.\d+){0,2}[^+]*)(?:\+.*)?$")
#: `__version__ = version = '1.2.3'`, as setuptools-scm's and hatch-vcs's templates write it
_ASSIGNED = re.compile(
    r"^(?:__version__|version|VERSION)\s*(?::\s*str\s*)?=\s*(?:\w+\s*=\s*)*['\"]([^'\"]+)['\"]",
    re.MULTILINE,
)
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*$")


def valid(version: str) -> bool:
    return bool(_PEP440.fullmatch(version))


@dataclass(frozen=True)
class Scm:
    """How a project's build takes its version from its VCS."""

    #: the plugins found (keys of PRETEND)
    plugins: tuple[str, ...]
    #: the version files they write, relative to the project's root
    version_files: tuple[str, ...] = ()
    #: the project's own version for a tree without git data
    fallback: str | None = None

    #: the distribution's name, if the pyproject gives it
    name: str | None = None

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables the version goes in: setuptools-scm's for this distribution only
        when its name is known (the plain one would stamp every other package setup builds
        from source with it too); hatch-vcs gives setuptools-scm no name, so the plain one."""
        found = []
        for plugin in self.plugins:
            if plugin == "setuptools-scm" and self.name:
                normal = re.sub(r"[-_.]+", "_", self.name).upper()
                found.append(f"{PRETEND[plugin]}_FOR_{normal}")
            else:
                found.append(PRETEND[plugin])
        return tuple(dict.fromkeys(found))


def _names(requirements: Any) -> set[str]:
    found = set()
    for requirement in requirements if isinstance(requirements, list) else []:
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", str(requirement))
        if name:
            found.add(re.sub(r"[-_.]+", "-", name.group(1)).lower())
    return found


def _table(data: Any, *path: str) -> Mapping[str, Any]:
    for name in path:
        data = data.get(name) if isinstance(data, Mapping) else None
    return data if isinstance(data, Mapping) else {}


def scm(files: Mapping[str, bytes]) -> Scm | None:
    """The VCS version plugins the project's packaging files (path -> content, at its root)
    use, None if none."""
    try:
        meta = tomllib.loads(files.get("pyproject.toml", b"").decode("utf-8", "replace"))
    except (tomllib.TOMLDecodeError, RecursionError):  # nested too deeply to read: the same
        meta = {}
    requires = _names(_table(meta, "build-system").get("requires"))
    scm_table = _table(meta, "tool", "setuptools_scm")
    hatch_version = _table(meta, "tool", "hatch", "version")
    pdm_version = _table(meta, "tool", "pdm", "version")
    plugins = []
    legacy = files.get("setup.py", b"") + files.get("setup.cfg", b"")
    # a `[tool.setuptools_scm]` table or setup.py's `use_scm_version=True` ask for it; a
    # build requirement (or setup.cfg's `setup_requires = setuptools_scm`) alone acts only
    # on a version the pyproject gives no other way (cachetools: an `attr` of its own)
    asked = "setuptools_scm" in _table(meta, "tool") or b"use_scm_version" in legacy
    required = "setuptools-scm" in requires or b"setuptools_scm" in legacy
    if asked or (required and not _version_given(meta)):
        plugins.append("setuptools-scm")
    if "hatch-vcs" in requires:
        plugins.append("hatch-vcs")
    if "pdm-backend" in requires and pdm_version.get("source") == "scm":
        plugins.append("pdm-backend")
    if "poetry-dynamic-versioning" in requires:
        plugins.append("poetry-dynamic-versioning")
    if not plugins:
        return None
    written = [
        scm_table.get("version_file"),
        scm_table.get("write_to"),
        _table(meta, "tool", "hatch", "build", "hooks", "vcs").get("version-file"),
    ]
    raw = _table(hatch_version, "raw-options")
    fallbacks = [
        scm_table.get("fallback_version"),
        hatch_version.get("fallback-version"),
        raw.get("fallback_version"),
        pdm_version.get("fallback_version"),
    ]
    name = _table(meta, "project").get("name")
    return Scm(
        tuple(plugins),
        tuple(dict.fromkeys(p for p in written if isinstance(p, str) and _relative(p))),
        next((f for f in fallbacks if isinstance(f, str) and valid(f)), None),
        name if isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9._-]+", name) else None,
    )


def _version_given(meta: Mapping[str, Any]) -> bool:
    """Whether the pyproject gives its version other than through a plugin: a static
    `[project] version`, or setuptools' own `[tool.setuptools.dynamic] version` (`attr`,
    `file`)."""
    return "version" in _table(meta, "project") or bool(
        _table(meta, "tool", "setuptools", "dynamic", "version")
    )


def _relative(path: str) -> bool:
    return bool(_SAFE_PATH.match(path)) and ".." not in path.split("/")


def from_tag(tag: str) -> str | None:
    """The version a tag names (`v1.2.3`, `pkg-1.2.3`), None if it names none."""
    found = _TAG.match(tag)
    version = found.group("version") if found else ""
    return version if version and valid(version) else None


def after_tag(version: str, distance: int, node: str) -> str:
    """setuptools-scm's default (`guess-next-dev`) for a commit `distance` after a tag of
    `version`: the next version (a pre-release's number raised, else the release's last
    part), `.devN`, and the commit (`+gabc1234`)."""
    if distance == 0:
        return version
    pre = re.fullmatch(r"(.*?(?:a|b|rc))(\d+)", version)
    if pre:
        nxt = f"{pre.group(1)}{int(pre.group(2)) + 1}"
    else:
        parts = re.match(r"\d+(?:\.\d+)*", version).group(0).split(".")  # type: ignore[union-attr]
        nxt = ".".join([*parts[:-1], str(int(parts[-1]) + 1)])
    found = f"{nxt}.dev{distance}+{node}"
    return found if valid(found) else f"{version}+{node}"


def _git(root: Path, *args: str, parents: bool = True) -> str:
    # neither the user's nor the system's configuration, and nothing the repository's own
    # could make git run: these commands read refs and objects only
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "LC_ALL": "C",
    }
    if not parents:  # this folder's own repository only, not one it lies in
        env["GIT_CEILING_DIRECTORIES"] = str(root.resolve().parent)
    done = subprocess.run(
        ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done.stdout.strip()


def of_git(root: Path, *, parents: bool = True) -> dict[str, str] | None:
    """The version of the commit checked out at `root` as setuptools-scm reads it (its last
    tag that names a version, how far behind, the commit), None if `root` is no git work
    tree with a commit (`parents`: or lies in one), {"value": "", "from": why} if git
    refused to read it (another user's repository). Uncommitted changes do not change it
    (setuptools-scm would add the day's date: the environment's key would change daily)."""
    try:
        node = "g" + _git(root, "rev-parse", f"--short={SHORT_NODE}", "HEAD", parents=parents)
    except subprocess.CalledProcessError as exc:
        why = refused(str(exc.stderr or ""))
        return {"value": "", "from": why} if why else None
    except (subprocess.TimeoutExpired, OSError):
        return None
    try:
        described = _git(
            root,
            *("describe", "--tags", "--long", f"--abbrev={SHORT_NODE}", "--match", "*[0-9]*"),
            "HEAD",
            parents=parents,
        )
        tag, distance, _ = described.rsplit("-", 2)
        version = from_tag(tag)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, ValueError):
        described, version = "", None
    if described and version:
        return {
            "value": after_tag(version, int(distance), node),
            "from": f"git describe: {described}",
        }
    try:
        count = int(_git(root, "rev-list", "--count", "HEAD", parents=parents))
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, ValueError):
        return None
    return {
        "value": f"0.1.dev{count}+{node}",
        "from": f"git: no tag names a version; commit {node[1:]}, {count} in its history",
    }


def refused(stderr: str) -> str | None:
    """Why git refused a repository, from what it printed, if for its owner: git reads no
    repository another user owns ("dubious ownership"), lest its configuration run
    commands; tickwork gives git no configuration, so `safe.directory` does not let it in."""
    found = re.search(r"dubious ownership in repository at '([^'\n]*)'", stderr)
    if found is None:
        return None
    return (
        f"git refused the git data at {found.group(1)}: another user owns it (git's "
        '"dubious ownership"); submit a clone of it that you own (git clone), or submit '
        "as its owner"
    )


def from_file(root: Path, scm_: Scm) -> dict[str, str] | None:
    """The version in the first of the project's version files found at `root` (a regular
    file inside it, not a link)."""
    for rel in scm_.version_files:
        path = root / rel
        try:
            if path.parent.resolve() != (root.resolve() / rel).parent:
                continue  # a folder on the way is a link
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_VERSION_FILE_BYTES:
                continue
            text = os.read(fd, MAX_VERSION_FILE_BYTES).decode("utf-8", "replace")
        finally:
            os.close(fd)
        found = _ASSIGNED.search(text)
        if found and valid(found.group(1)):
            return {"value": found.group(1), "from": f"{rel} (left out by the .gitignore)"}
    return None


def from_pkg_info(root: Path) -> dict[str, str] | None:
    """The `Version:` of the `PKG-INFO` at `root` (an unpacked sdist's; a regular file, not
    a link), which setuptools-scm itself reads when it finds no git data; None if none."""
    try:
        fd = os.open(root / "PKG-INFO", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        # the headers come first; the long description after them may be large
        head = os.read(fd, MAX_VERSION_FILE_BYTES).decode("utf-8", "replace")
    finally:
        os.close(fd)
    found = re.search(r"^Version:[ \t]*(\S+)[ \t]*\r?$", head.split("\n\n", 1)[0], re.MULTILINE)
    if found and valid(found.group(1)):
        return {"value": found.group(1), "from": "PKG-INFO (an sdist's metadata)"}
    return None


def of_checkout(
    root: Path, files: Mapping[str, bytes], *, git: bool, parents: bool = True
) -> dict[str, str] | None:
    """The version the checkout at `root` has, for a project whose build takes it from git
    (None for another): its commit's (`git`: its git data may be read; `parents`: a
    repository it lies in counts), else its version file's, else an unpacked sdist's
    `PKG-INFO`'s (as setuptools-scm falls back to it), else {"value": "", "from": why
    not}. For hatch-vcs the `PKG-INFO`'s comes first: hatchling builds an unpacked sdist
    from its `PKG-INFO`'s version whatever git or the override says (setuptools-scm reads
    git first, `PKG-INFO` only without it)."""
    found = scm(files)
    if found is None:
        return None
    sdist = from_pkg_info(root) if "hatch-vcs" in found.plugins else None
    if sdist is not None:
        return sdist
    read = of_git(root, parents=parents) if git else None
    if read is not None and read["value"]:
        return read
    why = (
        f"no version file, no PKG-INFO, and {read['from']}"
        if read
        else "no git data, no version file and no PKG-INFO"
    )
    return from_file(root, found) or from_pkg_info(root) or {"value": "", "from": why}


def pretend(scm_: Scm, recorded: Any) -> tuple[dict[str, str], dict[str, str]]:
    """The variables setup gives the plugins, and what the environment's record says of
    them: the version recorded with the source, else the project's fallback, else UNKNOWN."""
    recorded = recorded if isinstance(recorded, Mapping) else {}
    value = str(recorded.get("value") or "")
    origin = str(recorded.get("from") or "")
    if not valid(value):
        if scm_.fallback:
            value, origin = scm_.fallback, f"the project's fallback version; {origin or '-'}"
        else:
            value = UNKNOWN
            origin = f"not known: {origin or 'the source was submitted without it'}"
    variables = {name: value for name in scm_.variables}
    said = {"value": value, "from": origin, "via": ", ".join(sorted(variables))}
    return variables, said


def keep_command(scm_: Scm) -> str | None:
    """A setup command that copies the version files the build wrote into the environment
    (GENERATED), from setup's copy of the source; None if the project names none."""
    if not scm_.version_files:
        return None
    quoted = " ".join(shlex.quote(p) for p in scm_.version_files)
    keep = f"/env/{GENERATED}"
    return (
        f'for f in {quoted}; do if [ -f "$f" ] && [ ! -L "$f" ]; then '
        f'mkdir -p "{keep}/$(dirname "$f")" && cp "$f" "{keep}/$f"; fi; done; true'
    )


def keep_built_command() -> str:
    """A setup command that copies the extension modules the editable install built in
    place (setuptools' `build_ext`: `src/pkg/_ext.cpython-311-x86_64-linux-gnu.so`) into the
    environment (GENERATED), from setup's copy of the source, which is thrown away."""
    keep = f"/env/{GENERATED}"
    return (
        "find . \\( -path ./build -o -path ./.git -o -path ./.tox -o -path ./.venv \\) -prune"
        " -o \\( -name '*.so' -o -name '*.pyd' \\) -type f -print"
        f" | head -n {MAX_BUILT_FILES} | while IFS= read -r f; do"
        f' mkdir -p "{keep}/$(dirname "$f")" && cp "$f" "{keep}/$f"; done; true'
    )


def restore(env: Path, workspace: Path) -> list[str]:
    """Put the version files and the extension modules the environment kept into the
    working copy at `workspace` where it has none and they are left out of its files (a
    version file its `.gitignore` names; an extension module, as every compiled object a
    command builds), so they are never part of the session's files or patch; the paths
    written."""
    kept = env / GENERATED
    # setup (the project's own code) wrote /env: no folder on the way may be a link out
    if not _real_folders(env, f"{GENERATED}/-") or not kept.is_dir():
        return []
    ignore = Ignore.of(workspace, built=True)
    written: list[str] = []
    found = list(walk(kept, Ignore()))
    built = [(r, i) for r, i in found if built_object(r)][:MAX_BUILT_FILES]
    versions = [(r, i) for r, i in found if not built_object(r)][:MAX_VERSION_FILES]
    for rel, info in [*versions, *built]:
        target = workspace / rel
        limit = MAX_BUILT_FILE_BYTES if built_object(rel) else MAX_VERSION_FILE_BYTES
        if info.st_size > limit or not ignore.skips_path(rel):
            continue
        if os.path.lexists(target) or not _real_folders(workspace, rel):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(kept / rel, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            try:
                out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                continue
            try:
                left = limit
                while left > 0 and (data := os.read(fd, min(left, 1 << 20))):
                    os.write(out, data)
                    left -= len(data)
            finally:
                os.close(out)
        finally:
            os.close(fd)
        written.append(rel)
    return written


#: the sources a build compiles into extension modules (C, C++, Cython)
COMPILED_SOURCES = (".c", ".h", ".cc", ".cpp", ".cxx", ".hh", ".hpp", ".pyx", ".pxd")


def unrebuilt(env: Path | None, workspace: Path, changed: Iterable[str]) -> list[str]:
    """The extension modules in the working copy at `workspace` that are still, byte for
    byte, the ones setup built from the source as submitted (kept in `env`), when `changed`
    (the session's changed files) holds a source they are compiled from: the tests ran the
    old compiled code, whatever the patch did to it. Empty when no such source changed or
    every kept module was rebuilt (a test command running `build_ext --inplace`)."""
    if env is None or not any(p.endswith(COMPILED_SOURCES) for p in changed):
        return []
    kept = env / GENERATED
    if not _real_folders(env, f"{GENERATED}/-") or not kept.is_dir():
        return []
    stale = []
    for rel, info in walk(kept, Ignore()):
        if not built_object(rel) or info.st_size > MAX_BUILT_FILE_BYTES:
            continue
        here = workspace / rel
        if not _real_folders(workspace, rel) or here.is_symlink() or not here.is_file():
            continue
        if filecmp.cmp(here, kept / rel, shallow=False):
            stale.append(rel)
    return sorted(stale)


def unrebuilt_note(changed: Sequence[str], stale: Sequence[str]) -> str:
    """Why a test run says nothing of the session's change to compiled code: the extension
    modules it imported are those setup built from the source as submitted."""
    sources = [p for p in changed if p.endswith(COMPILED_SOURCES)]
    return (
        f"the session changed {_some(sources)}, but the test command did not rebuild "
        f"{_some(stale)}: setup built it from the source as submitted, so the tests ran the "
        "old compiled code; give a test command that rebuilds it, e.g. "
        "--test-cmd 'python3 setup.py build_ext --inplace && python3 -m pytest' "
        "(docs/ENVIRONMENTS.md (`tickwork docs environments`))"
    )


def _some(paths: Sequence[str], most: int = 3) -> str:
    more = f" and {len(paths) - most} more" if len(paths) > most else ""
    return ", ".join(paths[:most]) + more


def _real_folders(root: Path, rel: str) -> bool:
    """Whether none of the folders on the way to `rel` under `root` is a link or a file."""
    here = root
    for part in rel.split("/")[:-1]:
        here = here / part
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            return True
        if not stat.S_ISDIR(info.st_mode):
            return False
    return True
