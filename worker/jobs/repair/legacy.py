"""Repair sessions stored before stored files (tickwork before 0.1.0): still finished right.

Such a session names its project folder (`config.workspace`), which its tools change in
place, and a baseline folder tickwork copied at submit (`config.baseline`: `manifest.json`
and `files/`, the text files as they were). It has no `config.files`, so the patch cannot
come from the store: it is the folder now against its baseline, as that release made it,
when both are on this host; otherwise the result says so (`LEGACY_NOTE`), and the session
keeps its answer and its final test run.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tickwork.fsm.errors import ConfigurationError
from tickwork.fsm.values import Head
from tickwork.store.files import EXECUTABLE, PLAIN, Manifest, blob_hash, entry
from tickwork.worker.files.filetree import SKIP_DIRS
from tickwork.worker.files.working_copy import session_files

__all__ = ["LEGACY_NOTE", "is_legacy", "manifests", "read_file"]

#: larger files that release did not copy (nor diff), like binary ones
MAX_FILE_BYTES = 1_000_000

LEGACY_NOTE = (
    "legacy session (stored before tickwork 0.1.0, with a project folder and a baseline "
    "instead of stored files)"
)


def is_legacy(head: Head) -> bool:
    """Whether the session is one of a release before stored files."""
    return session_files(head) is None and bool(head.config.get("baseline"))


def _folder(head: Head, key: str) -> Path:
    where = head.config.get(key)
    path = Path(str(where))
    if not where or not path.is_dir():
        raise ConfigurationError(
            f"{LEGACY_NOTE}: its {key} {where} is not on this host, so its patch cannot be "
            "made here; diff that folder by hand where it is"
        )
    return path


def _walk(root: Path, exclude: Path | None) -> Iterator[tuple[str, Path]]:
    """(relative posix path, path) of the regular files; no symlinks, no SKIP_DIRS (the
    directories that release neither copied into the baseline nor diffed: the same set; if
    filetree's ever changes, keep that release's here)."""
    for directory, subdirs, names in os.walk(root):
        here = Path(directory)
        subdirs[:] = sorted(
            d
            for d in subdirs
            if d not in SKIP_DIRS and not (here / d).is_symlink() and (here / d) != exclude
        )
        for name in sorted(names):
            path = here / name
            if not path.is_symlink() and path.is_file():
                yield path.relative_to(root).as_posix(), path


def _text(path: Path, size: int) -> bytes | None:
    if size > MAX_FILE_BYTES:
        return None
    content = path.read_bytes()
    if b"\x00" in content[:8192]:
        return None
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return content


def _opaque(size: int, mtime_ns: int) -> bytes:
    """Stands for a file that release did not copy: equal while its size and time are,
    and shown as binary (the NUL) when they changed, as that release showed it."""
    return b"\x00" + f"{size} {mtime_ns}".encode()


def _mode(st_mode: int | None) -> str:
    return EXECUTABLE if st_mode is not None and st_mode & stat.S_IXUSR else PLAIN


def manifests(head: Head) -> tuple[Manifest, Manifest, dict[str, bytes]]:
    """The session's files at submit (its baseline) and now (its folder) as manifests, and
    the contents by hash, for `diff_manifests`. Raises ConfigurationError, naming the
    folder, if the baseline or the project folder is not on this host."""
    baseline, workspace = _folder(head, "baseline"), _folder(head, "workspace")
    recorded: Mapping[str, Any] = json.loads((baseline / "manifest.json").read_text("utf-8"))
    blobs: dict[str, bytes] = {}

    def put(mode: str, content: bytes) -> str:
        key = blob_hash(content)
        blobs[key] = content
        return entry(mode, key)

    modes: Mapping[str, int] = recorded.get("modes") or {}
    before: Manifest = {}
    for rel in recorded.get("text") or ():
        before[rel] = put(_mode(modes.get(rel)), (baseline / "files" / rel).read_bytes())
    for rel, (size, mtime_ns) in (recorded.get("other") or {}).items():
        before[rel] = put(_mode(modes.get(rel)), _opaque(size, mtime_ns))
    exclude = Path(recorded["exclude"]) if recorded.get("exclude") else None
    after: Manifest = {}
    for rel, path in _walk(workspace.resolve(), exclude):
        try:
            info = path.stat()
            content = _text(path, info.st_size)
        except OSError:
            continue  # vanished or unreadable: nothing to compare
        if content is None:
            content = _opaque(info.st_size, info.st_mtime_ns)
        after[rel] = put(_mode(info.st_mode), content)
    return before, after, blobs


def read_file(head: Head, path: str) -> bytes | None:
    """One file of the session's project folder as it is now (None: no such file), read
    inside the folder as its tools read it (no symlink out of it)."""
    from tickwork.worker.tools.confinement import resolve, workspace_root

    root = workspace_root(str(_folder(head, "workspace")))
    found = resolve(root, path)
    return found.read_bytes() if found.is_file() else None
