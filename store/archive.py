"""The archive: finished sessions written whole, by day, as gzipped JSON Lines and Parquet.

A batch of sessions that finished on one day is two objects, `day=YYYY-MM-DD/<name>.jsonl.gz`
(one line per session, the record `record` builds) and `day=YYYY-MM-DD/<name>.parquet` (one
row per session: the head's columns typed for analysis, and the same record as JSON). The
name is a hash of the batch's session ids, so writing a batch again (after a crash) replaces
the same objects. The `tickwork_archived` table (`retention.py`) says which batch holds a
session; the objects alone are never taken as the truth.

Where: a folder (`file:///path`) or S3-compatible storage (`s3://bucket/prefix`), the
artifact store's own when that is one of those, else `<state dir>/archive`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from tickwork.fsm import snapshots
from tickwork.fsm.errors import ArtifactsUnavailable, ConfigurationError, TickworkError
from tickwork.fsm.values import Session
from tickwork.store.artifacts import parse_location
from tickwork.store.buckets import Bucket

#: the version of the record `record` writes; readers refuse a newer one
ARCHIVE_FORMAT = 1
JSONL, PARQUET = ".jsonl.gz", ".parquet"


class ArchiveMissing(TickworkError, LookupError):
    """An archived session's batch is not where the index says: was the archive moved?"""

    def __init__(self, message: str | None = None, *, session_id: str | None = None) -> None:
        super().__init__(message)
        #: the archived session that could not be read back, when one was asked for
        self.session_id = session_id


class Archive(Protocol):
    """Where archive objects live, by name (`day=2026-12-01/<hash>.jsonl.gz`)."""

    #: where it is, for messages and `tickwork gc`
    url: str

    def write(self, name: str, data: bytes) -> None:
        """Store `data` as `name`, replacing what was there, all or nothing."""
        ...

    def read(self, name: str) -> bytes:
        """The object `name`; raises ArchiveMissing if there is none."""
        ...


class DirectoryArchive:
    """Archive objects as files under a folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.as_uri() if root.is_absolute() else str(root)

    def _path(self, name: str) -> Path:
        path = (self.root / name).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"archive object {name!r} is outside {self.root}")
        return path

    def write(self, name: str, data: bytes) -> None:
        path = self._path(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".write-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)  # a reader sees the old object or the new one, whole
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise ArtifactsUnavailable(
                f"cannot write the archive under {self.root}: {exc}"
            ) from exc

    def read(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            raise ArchiveMissing(f"archive object {name} is not under {self.root}") from None
        except OSError as exc:
            raise ArtifactsUnavailable(f"cannot read the archive under {self.root}: {exc}") from exc


class S3Archive:
    """Archive objects as `<prefix><name>` in an S3-compatible bucket (needs boto3)."""

    def __init__(self, bucket: str, prefix: str, endpoint: str | None) -> None:
        self._bucket = Bucket(bucket, prefix, endpoint, what="archive")
        self.url = self._bucket.url

    def write(self, name: str, data: bytes) -> None:
        with self._bucket.unavailable("write the archive"):
            self._bucket.write(name, data)

    def read(self, name: str) -> bytes:
        with self._bucket.unavailable("read the archive"):
            found = self._bucket.read(name)
        if found is None:
            raise ArchiveMissing(f"archive object {name} is not in {self.url}")
        return found


def open_archive(url: str, *, artifacts_url: str, default: Path) -> Archive:
    """The archive `url` names; empty: beside the artifact store when that is a folder or a
    bucket (`<root>/archive`, `<prefix>archive/`), else the folder `default`."""
    if not url:
        parsed = urlparse(artifacts_url)
        if parsed.scheme == "file":
            url = artifacts_url.rstrip("/") + "/archive"
        elif parsed.scheme == "s3":
            path = parsed.path.rstrip("/") + "/archive/"
            url = parsed._replace(path=path).geturl()
        else:
            return DirectoryArchive(default)
    place = parse_location(url, what="archive")
    if place is None:
        raise ConfigurationError(
            f"unknown archive {url!r} (TICKWORK_RETENTION_ARCHIVE_URL): leave it empty, or give "
            "file:///path or s3://bucket/prefix"
        )
    if isinstance(place, Path):
        return DirectoryArchive(place)
    return S3Archive(*place)


def batch_name(day: str, session_ids: Iterable[str]) -> str:
    """The batch's object name (without extension): the same ids on the same day, the same
    name, so a batch written again after a crash replaces itself."""
    digest = hashlib.sha256("\n".join(sorted(session_ids)).encode()).hexdigest()[:32]
    return f"day={day}/{digest}"


def record(
    session: Session,
    *,
    dead_letter: Mapping[str, Any] | None,
    file_changes: Sequence[Mapping[str, Any]],
    forks: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """One session, whole: its snapshot (head, steps, calls, observations, decisions,
    events), dead letter, saved file changes and lineage. JSON-ready."""
    head = session.head
    return {
        "archive_format": ARCHIVE_FORMAT,
        "session_id": head.id,
        "snapshot": snapshots.dump(session),
        "dead_letter": None if dead_letter is None else _json(dead_letter),
        "file_changes": [_json(c) for c in file_changes],
        "lineage": {
            "parent_id": head.parent_id,
            "fork_step": head.fork_step,
            "forks": [_json(f) for f in forks],
        },
    }


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value


def session_of(found: Mapping[str, Any]) -> Session:
    """The session a record holds (its snapshot upcast to this tickwork's version)."""
    made = found.get("archive_format")
    if not isinstance(made, int) or made > ARCHIVE_FORMAT:
        raise ArchiveMissing(
            f"the archive record of {found.get('session_id')!r} is of format {made!r}; "
            f"this tickwork reads up to {ARCHIVE_FORMAT}: upgrade tickwork to read it"
        )
    return snapshots.load(found["snapshot"])


def jsonl(records: Sequence[Mapping[str, Any]]) -> bytes:
    """The batch as gzipped JSON Lines, one record a line, byte for byte the same each time."""
    lines = b"".join(
        json.dumps(r, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        for r in sorted(records, key=lambda r: str(r["session_id"]))
    )
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as handle:
        handle.write(lines)
    return out.getvalue()


def parquet(records: Sequence[Mapping[str, Any]]) -> bytes | None:
    """The batch as Parquet, one row a session; None without pyarrow (`tickwork[parquet]`)."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    rows = sorted(records, key=lambda r: str(r["session_id"]))
    heads = [r["snapshot"]["session"]["head"] for r in rows]
    dead = [r.get("dead_letter") or {} for r in rows]

    def column(key: str) -> list[Any]:
        return [h.get(key) for h in heads]

    def times(values: list[Any]) -> list[datetime | None]:
        return [None if v is None else datetime.fromisoformat(v) for v in values]

    table = pa.table(
        {
            "session_id": pa.array([r["session_id"] for r in rows], pa.string()),
            "kind": pa.array(column("kind"), pa.string()),
            "status": pa.array(column("status"), pa.string()),
            "model": pa.array(column("model"), pa.string()),
            "error_code": pa.array(column("error_code"), pa.string()),
            "created_at": pa.array(times(column("created_at")), pa.timestamp("us", tz="UTC")),
            "finished_at": pa.array(times(column("updated_at")), pa.timestamp("us", tz="UTC")),
            "steps": pa.array(column("step"), pa.int64()),
            "tokens": pa.array(column("tokens"), pa.int64()),
            "cost_usd": pa.array(column("cost_usd"), pa.float64()),
            "submitted_by": pa.array(column("submitted_by"), pa.string()),
            "tenant": pa.array([h.get("tenant", "default") for h in heads], pa.string()),
            "parent_id": pa.array(column("parent_id"), pa.string()),
            "fork_step": pa.array(column("fork_step"), pa.int64()),
            "dead_letter_code": pa.array([d.get("code") for d in dead], pa.string()),
            "error_signature": pa.array([d.get("error_signature") for d in dead], pa.string()),
            "record": pa.array(
                [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows], pa.string()
            ),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


def read_batch(archive: Archive, location: str) -> dict[str, dict[str, Any]]:
    """The records of the batch at `location`, by session id."""
    data = gzip.decompress(archive.read(location + JSONL))
    found: dict[str, dict[str, Any]] = {}
    for line in data.splitlines():
        if line.strip():
            item = json.loads(line)
            found[str(item["session_id"])] = item
    return found
