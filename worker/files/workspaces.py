"""A worker's working copies of sessions' files: caches of what the store holds
(docs/DESIGN.md section 10).

A session's files at version v are its base manifest plus the changes its ticks saved up
to v (`store/files.py`). Before a tick that touches files, the worker checks its copy
against the state hash the store holds for the session, and brings it there when it is
missing, stale (another worker ran ticks since) or dirty (a crash left part of a command's
effects): only the files that differ are written. After a tool that may change files, a
stat snapshot finds what changed (a file is hashed only if its size, time or inode moved),
and the change is saved with the tick's observation.

Layout under the cache root: `objects/aa/<hash>` (blobs, shared by all sessions),
`sessions/<key>/files` (the working copy), `sessions/<key>/state.json` (the snapshot and
the state hash it is at), `sessions/<key>/dirty` (present while a tool may be changing the
copy, and until its change is saved) and `sessions/<key>.lock`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import shutil
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tickwork.fsm.values import Head
from tickwork.store.artifacts import Artifacts, intact
from tickwork.store.files import Manifest, applied, blob_hash, canonical, parse_entry
from tickwork.store.port import SessionFiles
from tickwork.worker.files.working_copy import WorkingCopy, _atomic_write, _Seen, session_files

log = logging.getLogger("tickwork.workspaces")


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` says a filesystem is full (or a disk quota reached)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


#: how often a process looks whether its cache has grown past its size
PRUNE_EVERY_S = 60.0
#: tools that only read files; any other tool's tick records what it changed
READ_ONLY_TOOLS = frozenset(["list_files", "read_file", "search"])


def written_paths(tool: str, arguments: Mapping[str, Any]) -> list[str] | None:
    """The only paths a built-in file tool can have changed, or None when any may have (a
    command): the tick then looks at those alone, at a cost that does not grow with the
    number of files."""
    if tool == "write_file" and isinstance(arguments.get("path"), str):
        return [arguments["path"]]
    if tool == "apply_patch" and isinstance(arguments.get("patch"), str):
        from tickwork.worker.tools.patches import parse_patch

        try:
            patched = parse_patch(arguments["patch"])
        except Exception:  # a patch it could not read changed nothing: look at all anyway
            return None
        # a patch's paths as written too: the applier takes them in a workspace holding them
        return [p for f in patched for p in (f.old_path, f.new_path, *(f.written or ())) if p]
    return None


class Workspaces:
    """The working copies of one host, under `root`; the store decides what they hold."""

    def __init__(
        self,
        root: Path,
        store: SessionFiles,
        artifacts: Artifacts,
        *,
        max_bytes: int = 2_000_000_000,
    ) -> None:
        self.root = Path(root)
        self.store = store
        self.artifacts = artifacts
        self.max_bytes = max_bytes
        self._bases: dict[str, Manifest] = {}
        #: folder -> (the stat of its state files, state, snapshot): read once per change
        self._snapshots: dict[Path, tuple[tuple[int, ...], str, dict[str, _Seen]]] = {}
        self._pruned = time.monotonic()

    def blobs(self, hashes: Iterable[str]) -> dict[str, bytes]:
        """Blobs from this host's cache, else from the artifact store (then cached). A
        cached copy that does not match its hash is never used: it is fetched again."""
        found: dict[str, bytes] = {}
        missing = []
        for key in set(hashes):
            try:
                data = self._object(key).read_bytes()
            except FileNotFoundError:
                missing.append(key)
                continue
            if intact(key, data):
                found[key] = data
            else:
                log.warning("cached blob %s does not match its hash: fetched again", key)
                missing.append(key)
        if missing:
            fetched = self.artifacts.get(missing)
            for key, data in fetched.items():
                self._keep(key, data)
            found.update(fetched)
        return found

    def _object(self, key: str) -> Path:
        return self.root / "objects" / key[:2] / key

    def _keep(self, key: str, data: bytes) -> None:
        path = self._object(key)
        with contextlib.suppress(FileNotFoundError):
            if intact(key, path.read_bytes()):
                return
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, data)  # over a bad copy too

    def base(self, files: Mapping[str, Any]) -> Manifest:
        key = str(files["base"])
        if key not in self._bases:
            if len(self._bases) > 64:
                self._bases.clear()
            self._bases[key] = json.loads(self.blobs([key])[key])
        return self._bases[key]

    def manifest(self, head: Head, *, upto: int | None = None) -> tuple[Manifest, str]:
        """The session's files (path -> entry) as the store holds them, and their state."""
        files = session_files(head)
        if files is None:
            return {}, ""
        manifest, state = self.base(files), str(files["base"])
        for saved in self.store.file_changes(head.id, upto=upto):
            manifest, state = applied(manifest, saved.changes), saved.state
        return manifest, state

    def start_from(self, head: Head) -> dict[str, str] | None:
        """The files config of a child that starts from the session's files as stored now
        (its claimed version): `{"base": <a manifest of them>}`, or None if it has no files.
        Only the manifest is written to the artifact store; the child's files are the
        parent's blobs, shared, and its patch is made against this base."""
        if session_files(head) is None:
            return None
        manifest, _ = self.manifest(head)
        listing = canonical(manifest)
        key = blob_hash(listing)
        self.artifacts.put({key: listing})
        return {"base": key}

    def read(self, head: Head, path: str) -> bytes | None:
        """One file of the session as stored now; None if it has no such file."""
        found = self.manifest(head)[0].get(path)
        if found is None:
            return None
        key = parse_entry(found)[1]
        return self.blobs([key])[key]

    def checkout(self, head: Head) -> WorkingCopy:
        """The session's working copy, locked for this tick and at its stored files."""
        sessions = self.root / "sessions"
        sessions.mkdir(parents=True, exist_ok=True)
        key = hashlib.sha256(head.id.encode()).hexdigest()[:32]
        lock = open(sessions / f"{key}.lock", "a+b")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            folder, private = sessions / key, False
        except BlockingIOError:
            # a tick whose lease ran out still holds it: work in a copy of our own
            folder, private = sessions / f"{key}~{uuid.uuid4().hex[:8]}", True
        if time.monotonic() - self._pruned > PRUNE_EVERY_S:
            self._pruned = time.monotonic()
            try:
                self.prune()
            except OSError as exc:  # a cache we cannot clean is no reason to fail a tick
                log.warning("could not prune the working copies in %s: %s", self.root, exc)
        copy = WorkingCopy(self, head, folder, lock, private=private)
        try:
            copy.sync()
        except BaseException:
            copy.release()
            raise
        return copy

    def drop(self, session_id: str) -> None:
        """Remove this host's copy of a session that ended."""
        key = hashlib.sha256(session_id.encode()).hexdigest()[:32]
        folder = self.root / "sessions" / key
        lock_path = self.root / "sessions" / f"{key}.lock"
        if not folder.exists():
            return
        with open(lock_path, "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            shutil.rmtree(folder, ignore_errors=True)
            self._snapshots.pop(folder, None)
        lock_path.unlink(missing_ok=True)

    def prune(self) -> int:
        """Delete cached blobs, then idle working copies, least recently used first, until
        the cache is below `max_bytes`; the bytes freed."""
        items: list[tuple[float, int, Path]] = []
        total = 0
        for path in self.root.glob("objects/*/*"):
            info = path.stat()
            items.append((info.st_atime, info.st_size, path))
            total += info.st_size
        for state in self.root.glob("sessions/*/state.json"):
            folder = state.parent
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            items.append((state.stat().st_mtime, size, folder))
            total += size
        freed = 0
        for _, size, path in sorted(items, key=lambda i: (i[2].is_dir(), i[0])):
            if total - freed <= self.max_bytes:
                break
            if path.is_dir():
                with open(str(path) + ".lock", "a+b") as lock:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            freed += size
        return freed
