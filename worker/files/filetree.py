"""Which files of a directory tree are a project's: the walk shared by packing a source and
by recording what a tick changed.

Skipped: symlinks, the directories in SKIP_DIRS (VCS data, caches, environments),
coverage.py's data files (`data_file`), from a session's files the compiled objects a
command built (`built_object`: a C extension built in place), a directory whose own
`.gitignore` is `*` (what caches and tools' outputs write into the folders they make:
`.hypothesis`, coverage's `htmlcov`) and what the tree's top-level `.gitignore` names (a
simple reading of it: `#` comments, a trailing `/` for directories, patterns with a `/`
anchored at the root unless they start with `**/`, others matching a name at any depth;
the last pattern that matches decides, so `!` re-includes what an earlier one left out,
except inside a folder left out; one over `MAX_GITIGNORE_BYTES` or `MAX_GITIGNORE_RULES` is
not read). Paths a caller already tracks are never skipped.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("tickwork.workspaces")

#: directories neither packed nor tracked: VCS data, caches, environments
SKIP_DIRS = frozenset(
    [
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".venv",
        "node_modules",
        ".tickwork",
    ]
)


#: a `.gitignore` larger, or with more rules (each file is matched against every one),
#: is not read: its rules leave nothing out (git does not read one over 100 MiB)
MAX_GITIGNORE_BYTES = 256 * 1024
MAX_GITIGNORE_RULES = 1_000

#: what a C extension's build leaves (`build_ext --inplace`, its objects under `build/`)
BUILT_SUFFIXES = (".so", ".pyd", ".o")


def built_object(name: str) -> bool:
    """Whether a file named `name` is a compiled object a build wrote (an extension module
    `_speedups.cpython-311-x86_64-linux-gnu.so`, an object file): binary, rebuilt by the
    command that made it, never part of a repair's patch unless the source held it."""
    return name.endswith(BUILT_SUFFIXES)


def data_file(name: str) -> bool:
    """Whether a file named `name` is coverage.py's data (`.coverage`, and `.coverage.*`
    in parallel mode): a binary database every test run with coverage rewrites, at the
    project's root, which a project without a `.gitignore` (an sdist) does not name."""
    return name == ".coverage" or name.startswith(".coverage.")


@dataclass(frozen=True)
class Ignore:
    """The skip rules of one tree."""

    #: (pattern, anchored, directories only, negated: `!`, re-included)
    patterns: tuple[tuple[str, bool, bool, bool], ...] = ()
    #: a directory skipped whatever the patterns say (tickwork's state dir)
    exclude: str | None = None
    #: compiled objects (`built_object`) are skipped too: a session's files, not a source
    built: bool = False

    @classmethod
    def of(
        cls,
        root: Path,
        *,
        gitignore: bool = True,
        exclude: Path | None = None,
        built: bool = False,
    ) -> Ignore:
        """The rules of the tree at `root`; `exclude`, a directory inside it, is skipped too;
        `built`: compiled objects a command wrote are skipped (the working copy's rules)."""
        found = []
        skipped = None
        if exclude is not None and root.resolve() in exclude.resolve().parents:
            skipped = exclude.resolve().relative_to(root.resolve()).as_posix()
        file = root / ".gitignore"
        if not gitignore or file.is_symlink() or not file.is_file():
            return cls((), skipped, built)
        try:
            with file.open("rb") as handle:
                data = handle.read(MAX_GITIGNORE_BYTES + 1)
        except OSError:
            return cls((), skipped, built)
        if len(data) > MAX_GITIGNORE_BYTES:
            log.warning(
                "%s is over %d bytes: not read (its rules leave nothing out)",
                file,
                MAX_GITIGNORE_BYTES,
            )
            return cls((), skipped, built)
        for raw in data.decode("utf-8", errors="replace").splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            line = line.removeprefix("!")
            directory = line.endswith("/")
            anywhere = line.startswith("**/")  # in every folder: the root's and below
            line = line.removeprefix("**/")
            anchored = "/" in line.rstrip("/")
            line = line.strip("/")
            for form in _zero_folders(line) if line else ():
                found.append((form, anchored, directory, negated))
                if anywhere and anchored:  # `**/A/B`: A/B below the root too
                    found.append((f"*/{form}", True, directory, negated))
            if len(found) > MAX_GITIGNORE_RULES:  # every file is matched against each
                log.warning(
                    "%s has over %d rules: not read (its rules leave nothing out)",
                    file,
                    MAX_GITIGNORE_RULES,
                )
                return cls((), skipped, built)
        return cls(tuple(found), skipped, built)

    def skips(self, rel: str, *, is_dir: bool) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if is_dir and (name in SKIP_DIRS or rel == self.exclude):
            return True
        if not is_dir and (data_file(name) or (self.built and built_object(name))):
            return True
        skipped = False
        for pattern, anchored, directory, negated in self.patterns:
            if directory and not is_dir:
                continue
            if fnmatch.fnmatchcase(rel if anchored else name, pattern):
                skipped = not negated
        return skipped

    def skips_path(self, rel: str) -> bool:
        """Whether a file at `rel` (or a folder above it) is skipped."""
        parts = rel.split("/")
        folders = ("/".join(parts[:i]) for i in range(1, len(parts)))
        return any(self.skips(f, is_dir=True) for f in folders) or self.skips(rel, is_dir=False)


def ignores_itself(folder: Path) -> bool:
    """Whether `folder` holds a `.gitignore` of `*` alone (comments aside): the mark a cache
    or a tool's output puts in the folder it makes (Hypothesis' `.hypothesis`, coverage's
    `htmlcov`, pytest's and mypy's caches), so that git leaves it out; so does tickwork."""
    file = folder / ".gitignore"
    try:
        if file.is_symlink() or not file.is_file() or file.stat().st_size > 4096:
            return False
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    lines = [line.strip() for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith("#")] == ["*"]


def _zero_folders(pattern: str) -> list[str]:
    """`pattern` and, for each `/**/` in it, the form where it stands for no folder, as in
    git (`a/**/b` matches `a/b`); fnmatch's `*` already spans any number of folders."""
    parts = pattern.split("/**/")
    if len(parts) > 5:  # at most 16 forms; git's own reading is no slower to give up
        return [pattern]
    forms = [parts[0]]
    for part in parts[1:]:
        forms = [f"{f}{glue}{part}" for f in forms for glue in ("/**/", "/")]
    return forms


def walk(
    root: Path,
    ignore: Ignore,
    *,
    tracked: frozenset[str] | set[str] = frozenset(),
    left_out: list[str] | None = None,
) -> Iterator[tuple[str, os.stat_result]]:
    """(relative posix path, lstat) of the tree's regular files, sorted; `tracked` paths
    (and the directories holding them) are kept whatever the rules say. `left_out` gets
    the files and folders (`name/`) the `.gitignore` rules skipped, not SKIP_DIRS."""
    holding = {p.rsplit("/", 1)[0] for p in tracked if "/" in p}
    parents = {"/".join(p.split("/")[:i]) for p in holding for i in range(1, p.count("/") + 2)}
    for directory, subdirs, names in os.walk(root):
        here = Path(directory)
        prefix = here.relative_to(root).as_posix()
        prefix = "" if prefix == "." else prefix + "/"
        kept = []
        for d in sorted(subdirs):
            if (here / d).is_symlink():
                continue
            if prefix + d in parents or not (
                ignore.skips(prefix + d, is_dir=True) or ignores_itself(here / d)
            ):
                kept.append(d)
            elif left_out is not None and d not in SKIP_DIRS and prefix + d != ignore.exclude:
                left_out.append(f"{prefix}{d}/")
        subdirs[:] = kept
        for name in sorted(names):
            rel = prefix + name
            try:
                info = os.lstat(here / name)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if rel in tracked or not ignore.skips(rel, is_dir=False):
                yield rel, info
            elif left_out is not None:
                left_out.append(rel)
