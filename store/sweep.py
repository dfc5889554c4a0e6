"""Blobs of archived sessions moved out of the artifact store (repair sources and files).

Blobs are content-addressed and shared: a repair source's files by every session of that
source, a written file by whoever wrote the same bytes. After retention archives some
sessions, the blobs they used that no live session uses are copied to the archive
(`blobs/<aa>/<hash>`) and then deleted from the artifact store. A reader that still asks
for one (a fork of an archived session, a submit that raced the sweep) gets it from the
archive through `Restoring`, which also puts it back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, select
from tickwork.fsm.errors import BlobCorrupt, BlobMissing
from tickwork.store.archive import Archive, ArchiveMissing
from tickwork.store.artifacts import Artifacts, intact
from tickwork.store.files import parse_entry
from tickwork.store.schema import file_changes, sessions

Get = Callable[[Iterable[str]], dict[str, bytes]]


def blob_name(key: str) -> str:
    return f"blobs/{key[:2]}/{key}"


def _manifest_blobs(bases: Iterable[str], get: Get) -> set[str]:
    """The base manifests and the blobs they list."""
    found: set[str] = set()
    wanted = sorted(set(bases))
    if not wanted:
        return found
    for key, data in get(wanted).items():
        found.add(key)
        found.update(parse_entry(v)[1] for v in json.loads(data).values())
    return found


def used_by(records: Sequence[Mapping[str, Any]], get: Get) -> set[str]:
    """Every blob the archived sessions of `records` used: base, source files, writes."""
    bases: set[str] = set()
    found: set[str] = set()
    for item in records:
        files = item["snapshot"]["session"]["head"].get("config", {}).get("files")
        if isinstance(files, Mapping) and files.get("base"):
            bases.add(str(files["base"]))
        for change in item.get("file_changes") or ():
            found.update(parse_entry(v)[1] for v in change["changes"].values() if v)
    try:
        return found | _manifest_blobs(bases, get)
    except BlobMissing:  # a base swept before: its blobs are in the archive already
        return found | bases


def needed_by_live(engine: Engine, get: Get) -> set[str]:
    """Every blob a live session may read: bases, their files, and the files written."""
    base = sessions.c.config["files"]["base"].as_string()
    with engine.connect() as conn:
        bases = {b for b in conn.execute(select(base).distinct()).scalars() if b}
        found: set[str] = set()
        for changes in conn.execute(select(file_changes.c.changes)).scalars():
            found.update(parse_entry(v)[1] for v in changes.values() if v)
    return found | _manifest_blobs(bases, get)


def sweep(
    engine: Engine, artifacts: Artifacts, archive: Archive, records: Sequence[Mapping[str, Any]]
) -> int:
    """Move the blobs of archived `records` that no live session needs to the archive;
    returns how many left the artifact store."""
    remove = getattr(artifacts, "delete", None)
    if remove is None or not records:
        return 0
    candidates = used_by(records, artifacts.get)
    if not candidates:
        return 0
    # what a live session needs is read after the candidates: a session made meanwhile
    # from the same source is seen here, or reads its blobs back through Restoring
    movable = sorted(candidates - needed_by_live(engine, artifacts.get))
    moved = 0
    for start in range(0, len(movable), 200):
        batch = movable[start : start + 200]
        try:
            found = artifacts.get(batch)
        except BlobMissing:
            found = {}
            for key in batch:
                try:
                    found.update(artifacts.get([key]))
                except BlobMissing:
                    continue  # gone already (another pass moved it)
        for key, data in found.items():
            archive.write(blob_name(key), data)
        moved += int(remove(list(found)))
    return moved


class Restoring:
    """The artifact store, with the blobs retention moved to the archive read back from
    there (and put back, so the next reader finds them where they were). A blob whose copy
    in the store is bad is read from the archive too, and put back in its place."""

    def __init__(self, live: Artifacts, archive: Archive) -> None:
        self.live, self.archive = live, archive

    def put(self, items: Mapping[str, bytes]) -> int:
        return self.live.put(items)

    def get(self, hashes: Iterable[str]) -> dict[str, bytes]:
        wanted = set(hashes)
        try:
            return self.live.get(wanted)
        except (BlobMissing, BlobCorrupt):
            pass
        found: dict[str, bytes] = {}
        back: dict[str, bytes] = {}
        for key in sorted(wanted):
            try:
                found.update(self.live.get([key]))
            except (BlobMissing, BlobCorrupt) as exc:
                back[key] = self._from_archive(key, corrupt=isinstance(exc, BlobCorrupt))
        if back:
            self.live.put(back)  # replaces a bad copy
        return {**found, **back}

    def _from_archive(self, key: str, *, corrupt: bool) -> bytes:
        try:
            data = self.archive.read(blob_name(key))
        except ArchiveMissing:
            if corrupt:
                raise BlobCorrupt(
                    f"blob {key} does not match its hash in the artifact store and the "
                    f"archive ({self.archive.url}) has no copy",
                    keys=(key,),
                ) from None
            raise BlobMissing(
                f"blob {key} is neither in the artifact store nor in the archive "
                f"({self.archive.url})"
            ) from None
        if not intact(key, data):
            raise BlobCorrupt(
                f"blob {key} does not match its hash in the archive ({self.archive.url})"
                + (" nor in the artifact store" if corrupt else ""),
                keys=(key,),
            )
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.live, name)  # delete, close, engine: the live store's
