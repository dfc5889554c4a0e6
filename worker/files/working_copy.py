"""One session's working copy during one tick: brought to the stored files, its changes
found from a stat snapshot (a file is hashed only if its size, time or inode moved).

The snapshot is kept beside the copy: `state.json` (the whole of it) and `state.log` (a
line per saved change, folded into `state.json` now and then); `dirty` is present while a
tool may be changing the copy, and until its change is saved.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from tickwork.fsm.values import Head
from tickwork.store.files import (
    EXECUTABLE,
    PLAIN,
    FileChange,
    Manifest,
    blob_hash,
    entry,
    next_state,
    parse_entry,
)
from tickwork.worker.files.filetree import Ignore, walk

if TYPE_CHECKING:
    from tickwork.store.artifacts import Artifacts
    from tickwork.store.port import SessionFiles

log = logging.getLogger("tickwork.workspaces")

#: a file modified this close to when it was last looked at is hashed again next time
#: (file times are coarse: a change in the same tick of the clock keeps the time)
RACY_NS = 2_000_000_000
#: a larger file is not part of a session's files (a build output, a dump): not stored
MAX_TRACKED_FILE_BYTES = 50_000_000


def session_files(head: Head) -> Mapping[str, Any] | None:
    """The session's stored-files config (`base`: the manifest blob), None if it has none."""
    files = head.config.get("files")
    return files if isinstance(files, Mapping) and files.get("base") else None


@dataclass
class _Seen:
    """What the snapshot knows of one file of a working copy."""

    entry: str
    size: int
    mtime_ns: int
    ino: int
    checked_ns: int

    def same(self, info: os.stat_result) -> bool:
        return (
            self.size == info.st_size
            and self.mtime_ns == info.st_mtime_ns
            and self.ino == info.st_ino
            and (parse_entry(self.entry)[0] == EXECUTABLE) == bool(info.st_mode & 0o100)
            and self.mtime_ns < self.checked_ns - RACY_NS
        )


def _mode(info: os.stat_result) -> str:
    return EXECUTABLE if info.st_mode & 0o100 else PLAIN


class Owner(Protocol):
    """What a working copy needs of the `Workspaces` that made it (worker/files/workspaces.py)."""

    store: SessionFiles
    artifacts: Artifacts
    #: per folder: its files' stamp, its state hash and what was seen of each file
    _snapshots: dict[Path, tuple[tuple[int, ...], str, dict[str, _Seen]]]

    def blobs(self, hashes: Iterable[str]) -> dict[str, bytes]: ...

    def _keep(self, key: str, data: bytes) -> None: ...

    def manifest(self, head: Head, *, upto: int | None = None) -> tuple[Manifest, str]: ...


class WorkingCopy:
    """One session's files on this host during one tick."""

    def __init__(
        self, owner: Owner, head: Head, folder: Path, lock: BinaryIO, *, private: bool
    ) -> None:
        self.owner, self.head, self.folder = owner, head, folder
        self.path = folder / "files"
        self._lock, self._private = lock, private
        self._seen: dict[str, _Seen] = {}
        self._state = ""
        #: what the last `record` found, kept until `saved`
        #: what `record` found and the state it leads to, and the paths that may differ
        #: from what the copy had seen (None: any), until the tick's save is known
        self._pending: tuple[dict[str, _Seen], str, set[str] | None] | None = None
        #: bytes put in the artifact store by `record`
        self.bytes_written = 0

    @property
    def _dirty(self) -> Path:
        return self.folder / "dirty"

    @property
    def _state_file(self) -> Path:
        return self.folder / "state.json"

    @property
    def _journal(self) -> Path:
        return self.folder / "state.log"

    def _stamp(self) -> tuple[int, ...]:
        """What tells that the state files changed (from another process, too)."""
        found = self._state_file.stat()
        try:
            journal = self._journal.stat().st_size
        except FileNotFoundError:
            journal = -1
        return (found.st_ino, found.st_mtime_ns, found.st_size, journal)

    def _load(self) -> tuple[str, dict[str, _Seen]] | None:
        """The state hash and snapshot the copy was last left at; None if unknown."""
        try:
            stamp = self._stamp()
            cached = self.owner._snapshots.get(self.folder)
            if cached is not None and cached[0] == stamp:
                return cached[1], cached[2]
            found = json.loads(self._state_file.read_text(encoding="utf-8"))
            state, seen = found["state"], {p: _Seen(*v) for p, v in found["files"].items()}
            if stamp[3] >= 0:
                for line in self._journal.read_text(encoding="utf-8").splitlines():
                    entry = json.loads(line)
                    state = entry["state"]
                    for path, value in entry["files"].items():
                        if value is None:
                            seen.pop(path, None)
                        else:
                            seen[path] = _Seen(*value)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        self.owner._snapshots[self.folder] = (stamp, state, seen)
        return state, seen

    def _store_state(
        self, state: str, seen: dict[str, _Seen], *, changed: Mapping[str, _Seen | None] | None
    ) -> None:
        """Keep the snapshot: a line appended to the journal for a small change, the whole
        snapshot rewritten now and then (cost proportional to the change, on average)."""
        journal = self._journal.stat().st_size if self._journal.exists() else 0
        if changed is not None and journal < 200 * len(seen) + 10_000:
            line = {
                "state": state,
                "files": {p: None if v is None else _row(v) for p, v in changed.items()},
            }
            with self._journal.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line, separators=(",", ":")) + "\n")
        else:
            files = {p: _row(v) for p, v in seen.items()}
            data = json.dumps({"state": state, "files": files}, separators=(",", ":"))
            _atomic_write(self._state_file, data.encode())
            self._journal.unlink(missing_ok=True)
        self._state, self._seen = state, seen
        self.owner._snapshots[self.folder] = (self._stamp(), state, seen)

    def sync(self) -> None:
        """Bring the copy to the session's stored files (only the files that differ)."""
        files = session_files(self.head)
        assert files is not None
        stored = self.owner.store.files_state(self.head.id) or str(files["base"])
        known = self._load() if self.path.is_dir() else None
        dirty = self._dirty.exists() or known is None
        if known is not None and not dirty and known[0] == stored:
            self._state, self._seen = known
            return
        target, state = self.owner.manifest(self.head)
        if state != stored:  # a save landed between the two reads: take the later one
            stored = state
        self.path.mkdir(parents=True, exist_ok=True)
        self._dirty.touch()  # a crash while the files are written leaves them to be checked
        seen = dict(known[1]) if known is not None else {}
        if dirty:
            seen, _ = self._scan(seen, keep_blobs=False)
        wanted = {p: e for p, e in target.items() if p not in seen or seen[p].entry != e}
        blobs = self.owner.blobs(parse_entry(e)[1] for e in wanted.values())
        past = time.time_ns() - 2 * RACY_NS
        gone = [p for p in seen if p not in target]
        _safe_folders(self.path, [*gone, *wanted])
        for rel in gone:
            with contextlib.suppress(FileNotFoundError):
                (self.path / rel).unlink()
            del seen[rel]
        now = time.time_ns()
        for rel, value in sorted(wanted.items()):
            mode, key = parse_entry(value)
            seen[rel] = _write(
                self.path,
                rel,
                blobs[key],
                executable=mode == EXECUTABLE,
                entry=value,
                mtime_ns=past,
                now_ns=now,
            )
        self._store_state(stored, seen, changed=None)
        self._dirty.unlink(missing_ok=True)

    def begin(self) -> None:
        """Mark the copy dirty: a tool may change it until its change is saved."""
        self._dirty.touch()

    def _scan(
        self, seen: Mapping[str, _Seen], *, keep_blobs: bool, only: Iterable[str] | None = None
    ) -> tuple[dict[str, _Seen], dict[str, bytes]]:
        """The files as they are now (hashing only those whose stat moved), and the blobs
        of the contents not seen before. `only`: the paths that may have changed (what a
        tool said it wrote); the others are taken as they were."""
        now = time.time_ns()
        found: dict[str, _Seen] = {}
        blobs: dict[str, bytes] = {}
        ignore = Ignore.of(self.path, built=True)
        if only is None:
            listing: Iterable[tuple[str, os.stat_result | None]] = walk(
                self.path, ignore, tracked=set(seen)
            )
        else:
            found = dict(seen)
            listing = [(rel, _lstat(self.path, rel)) for rel in sorted(set(only))]
        for rel, info in listing:
            before = seen.get(rel)
            if info is None or (before is None and ignore.skips_path(rel)):
                found.pop(rel, None)
                continue
            if before is not None and before.same(info):
                found[rel] = before
                continue
            if info.st_size > MAX_TRACKED_FILE_BYTES:
                log.warning("%s is over %d bytes: not kept", rel, MAX_TRACKED_FILE_BYTES)
                found.pop(rel, None)
                continue
            try:
                content = (self.path / rel).read_bytes()
            except OSError:
                found.pop(rel, None)
                continue
            key = blob_hash(content)
            value = entry(_mode(info), key)
            found[rel] = _Seen(value, info.st_size, info.st_mtime_ns, info.st_ino, now)
            if keep_blobs and (before is None or before.entry != value):
                blobs[key] = content
        return found, blobs

    def record(
        self, *, step: int, call_id: str, paths: Iterable[str] | None = None
    ) -> FileChange | None:
        """What changed since the copy was synced: blobs put in the artifact store, the
        change set returned for the tick's save (None if nothing changed). `paths`: the
        only paths the tool may have changed, if it says so (else every file is looked at)."""
        only = None if paths is None else self._candidates(paths)
        found, blobs = self._scan(self._seen, keep_blobs=True, only=only)
        # with `only`, the others are as seen: the cost is the paths named, not the copy's
        changes: dict[str, str | None] = {}
        for p in found.keys() | self._seen.keys() if only is None else only:
            now, before = found.get(p), self._seen.get(p)
            if now is None and before is not None:
                changes[p] = None
            elif now is not None and (before is None or before.entry != now.entry):
                changes[p] = now.entry
        self._pending = (found, self._state, only)
        if not changes:
            return None
        self.bytes_written += self.owner.artifacts.put(blobs)
        for key, data in blobs.items():
            self.owner._keep(key, data)
        changes = dict(sorted(changes.items()))
        state = next_state(self._state, changes)
        self._pending = (found, state, only)
        return FileChange(step=step, call_id=call_id, changes=changes, state=state, blobs=blobs)

    def _candidates(self, paths: Iterable[str]) -> set[str]:
        """The relative paths `paths` name, and where symlinks inside the copy lead them."""
        out: set[str] = set()
        root = os.path.realpath(self.path)
        for path in paths:
            name = os.path.normpath(path)
            if name.startswith("..") or os.path.isabs(name):
                continue
            out.add(name)
            real = os.path.relpath(os.path.realpath(os.path.join(root, name)), root)
            if not real.startswith(".."):
                out.add(real)
        return out

    def saved(self) -> None:
        """The tick's save committed: the copy is clean at the saved state."""
        if self._pending is not None:
            found, state, only = self._pending
            paths = found.keys() | self._seen.keys() if only is None else only
            changed: dict[str, _Seen | None] = {
                p: found.get(p) for p in paths if found.get(p) != self._seen.get(p)
            }
            if state != self._state or changed:
                self._store_state(state, found, changed=changed)
            self._pending = None
        self._dirty.unlink(missing_ok=True)

    def release(self) -> None:
        try:
            if self._private:
                self.owner._snapshots.pop(self.folder, None)
                shutil.rmtree(self.folder, ignore_errors=True)
        finally:
            self._lock.close()


def _row(seen: _Seen) -> list[Any]:
    return [seen.entry, seen.size, seen.mtime_ns, seen.ino, seen.checked_ns]


def _lstat(root: Path, rel: str) -> os.stat_result | None:
    """The file's lstat if it is a regular file of the copy: not one reached through a
    symlink among its folders (a command's `linkdir -> /etc`), which lies elsewhere."""
    path = root / rel
    try:
        if os.path.realpath(path.parent) != os.path.join(
            os.path.realpath(root), *Path(rel).parts[:-1]
        ):
            return None
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def _write(
    root: Path,
    rel: str,
    data: bytes,
    *,
    executable: bool,
    entry: str,
    mtime_ns: int,
    now_ns: int,
) -> _Seen:
    """Write one file of a working copy, dated in the past so that a later change by a tool
    always moves its time; what the snapshot knows of it. (The copy is marked dirty while
    it is written, so a plain write is enough.)"""
    path = root / rel
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError:
        _clear_way(root, path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, 0o755 if executable else 0o644)
        os.utime(fd, ns=(mtime_ns, mtime_ns))
        info = os.fstat(fd)
    finally:
        os.close(fd)
    return _Seen(entry, info.st_size, info.st_mtime_ns, info.st_ino, now_ns)


def _safe_folders(root: Path, paths: Iterable[str]) -> None:
    """Remove whatever is not a real folder (a symlink a command left, a file) where the
    folders of `paths` go: the copy is never written or deleted in through a symlink."""
    folders: set[str] = set()
    for rel in paths:
        parts = rel.split("/")[:-1]
        folders.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    for folder in sorted(folders, key=lambda f: f.count("/")):
        try:
            info = os.lstat(root / folder)
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            continue  # a folder above was not one: removed just before
        if not stat.S_ISDIR(info.st_mode):
            (root / folder).unlink()


def _clear_way(root: Path, path: Path) -> None:
    """Make room for a file at `path`: its folders made, a file, symlink or folder in the
    way removed."""
    for parent in reversed(path.relative_to(root).parents):
        here = root / parent
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            here.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tw-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
