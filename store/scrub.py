"""A scrub of the artifact store: every blob read back and checked against its hash.

`tickwork artifacts verify` lists the blobs whose stored copy does not match; with
`--repair` each is replaced by a good copy from another tier (the archive, where retention
moves blobs) or, when none has one, deleted, so that a session needing it stops on a
missing blob (and a submit of the same source puts it back) instead of reading bad bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from tickwork.store.archive import Archive, ArchiveMissing
from tickwork.store.artifacts import intact
from tickwork.store.sweep import blob_name

#: what a scrub did about a bad blob
BAD, REPLACED, DELETED = "bad", "replaced from the archive", "deleted: no good copy anywhere"


class Scrubbable(Protocol):
    """An artifact store a scrub can walk (each shipped one)."""

    def hashes(self) -> Iterator[str]: ...

    def read_raw(self, key: str) -> bytes | None: ...

    def put(self, items: dict[str, bytes]) -> int: ...

    def delete(self, hashes: list[str]) -> int: ...


@dataclass(frozen=True, order=True)
class Finding:
    key: str
    #: BAD (found only), REPLACED or DELETED
    action: str


@dataclass(frozen=True)
class Scrub:
    checked: int
    findings: tuple[Finding, ...]

    @property
    def lost(self) -> bool:
        """Whether a bad blob is left, or was deleted for want of a good copy."""
        return any(f.action != REPLACED for f in self.findings)


def scrub(live: Scrubbable, archive: Archive | None, *, repair: bool) -> Scrub:
    """Check every blob of `live`; with `repair`, replace or delete each bad one."""
    checked, findings = 0, []
    for key in live.hashes():
        data = live.read_raw(key)
        if data is None:
            continue  # deleted meanwhile (retention's sweep)
        checked += 1
        if intact(key, data):
            continue
        if not repair:
            findings.append(Finding(key, BAD))
            continue
        good = _good_copy(archive, key)
        if good is not None:
            live.put({key: good})  # a write replaces a copy that does not match
            findings.append(Finding(key, REPLACED))
        else:
            live.delete([key])
            findings.append(Finding(key, DELETED))
    return Scrub(checked, tuple(findings))


def _good_copy(archive: Archive | None, key: str) -> bytes | None:
    if archive is None:
        return None
    try:
        data = archive.read(blob_name(key))
    except ArchiveMissing:
        return None
    return data if intact(key, data) else None
