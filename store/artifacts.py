"""The artifact store: blobs by the SHA-256 of their content, each stored once.

Chosen by a URL (`TICKWORK_ARTIFACTS_URL`): empty for the database's own blobs table (SQLite
or Postgres: the embedded default needs nothing more), `file:///shared/dir` for a folder
every worker mounts, `s3://bucket/prefix` for S3-compatible storage (the `s3` extra; the
endpoint from `AWS_ENDPOINT_URL` or `?endpoint=URL`). Writes are idempotent, so a blob may
be put before the save that names it, by any number of workers at once.

Every blob read is checked against its hash: a bad copy (a disk's rot, a hand's edit) is
never given out but raised as `BlobCorrupt`, which a reader with another copy (`Restoring`,
the worker's cache) catches to put the good one back. A write replaces a stored copy that
does not match, so putting the same content again repairs it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, unquote, urlparse

from sqlalchemy import Engine, select, update
from sqlalchemy import delete as sa_delete
from sqlalchemy.dialects import postgresql, sqlite
from tickwork.fsm.errors import ArtifactsUnavailable, BlobCorrupt, BlobMissing, ConfigurationError
from tickwork.store.buckets import Bucket
from tickwork.store.edge import guarded
from tickwork.store.schema import blobs

_HASH = re.compile(r"^[0-9a-f]{64}$")


class Artifacts(Protocol):
    """Where blobs live; every method takes and gives blobs by their SHA-256 hex digest."""

    def put(self, items: Mapping[str, bytes]) -> int:
        """Store the blobs not stored yet; returns the bytes written."""
        ...

    def get(self, hashes: Iterable[str]) -> dict[str, bytes]:
        """The blobs asked for; raises BlobMissing naming one that is not there."""
        ...


def _checked(items: Mapping[str, bytes]) -> None:
    for key, data in items.items():
        if hashlib.sha256(data).hexdigest() != key:
            raise ValueError(f"blob {key} does not hold the content it is named by")


def _missing(wanted: Iterable[str], found: Mapping[str, bytes]) -> None:
    for key in wanted:
        if key not in found:
            raise BlobMissing(f"blob {key} is not in the artifact store; was it pruned?")


def intact(key: str, data: bytes) -> bool:
    """Whether `data` is the content the hash `key` names."""
    return hashlib.sha256(data).hexdigest() == key


def _verified(found: Mapping[str, bytes], where: str) -> dict[str, bytes]:
    """`found`, or BlobCorrupt naming every blob whose copy does not match its hash."""
    bad = tuple(sorted(k for k, v in found.items() if not intact(k, v)))
    if bad:
        raise BlobCorrupt(
            f"{len(bad)} blob(s) in {where} do not match their hash ({', '.join(bad[:3])}); "
            "run `tickwork artifacts verify --repair`",
            keys=bad,
        )
    return dict(found)


@guarded
class DatabaseArtifacts:
    """Blobs in the `tickwork_blobs` table of the session database."""

    #: blobs per statement (a read or a write)
    BATCH = 200

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        name = engine.dialect.name
        self._insert = postgresql.insert if name == "postgresql" else sqlite.insert

    def put(self, items: Mapping[str, bytes]) -> int:
        _checked(items)
        written = 0
        keys = sorted(items)
        with self.engine.begin() as conn:
            for start in range(0, len(keys), self.BATCH):
                batch = keys[start : start + self.BATCH]
                stored = conn.execute(
                    select(blobs.c.hash, blobs.c.data).where(blobs.c.hash.in_(batch))
                ).all()
                known = {k for k, v in stored if intact(k, bytes(v))}
                for key in {k for k, _ in stored} - known:  # a bad copy: put the good one
                    conn.execute(
                        update(blobs)
                        .where(blobs.c.hash == key)
                        .values(size=len(items[key]), data=items[key])
                    )
                    written += len(items[key])
                new = [k for k in batch if k not in {h for h, _ in stored}]
                if not new:
                    continue
                rows = [{"hash": k, "size": len(items[k]), "data": items[k]} for k in new]
                conn.execute(self._insert(blobs).on_conflict_do_nothing(), rows)
                written += sum(len(items[k]) for k in new)
        return written

    def hashes(self) -> Iterator[str]:
        """Every blob's hash, for a scrub (`tickwork artifacts verify`)."""
        after = ""
        while True:  # pages, each its own short read: the caller writes between them
            with self.engine.connect() as conn:
                page = list(
                    conn.execute(
                        select(blobs.c.hash)
                        .where(blobs.c.hash > after)
                        .order_by(blobs.c.hash)
                        .limit(self.BATCH)
                    ).scalars()
                )
            yield from page
            if len(page) < self.BATCH:
                return
            after = page[-1]

    def read_raw(self, key: str) -> bytes | None:
        """The stored copy of `key` as it is, unchecked; None if there is none."""
        with self.engine.connect() as conn:
            data = conn.execute(select(blobs.c.data).where(blobs.c.hash == key)).scalar()
        return None if data is None else bytes(data)

    def delete(self, hashes: Iterable[str]) -> int:
        """Remove blobs (retention moved them to the archive); returns how many were here."""
        keys = sorted(set(hashes))
        removed = 0
        for start in range(0, len(keys), self.BATCH):
            with self.engine.begin() as conn:  # one short transaction per batch
                stmt = sa_delete(blobs).where(blobs.c.hash.in_(keys[start : start + self.BATCH]))
                removed += conn.execute(stmt).rowcount
        return removed

    def get(self, hashes: Iterable[str]) -> dict[str, bytes]:
        wanted = sorted(set(hashes))
        found: dict[str, bytes] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(wanted), self.BATCH):
                batch = wanted[start : start + self.BATCH]
                query = select(blobs.c.hash, blobs.c.data).where(blobs.c.hash.in_(batch))
                found.update({k: bytes(v) for k, v in conn.execute(query)})
        _missing(wanted, found)
        return _verified(found, "the database's blobs table")


class DirectoryArtifacts:
    """Blobs as files `<root>/<aa>/<hash>` in a folder (a volume every worker mounts)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        if not _HASH.match(key):
            raise ValueError(f"{key!r} is not a SHA-256 hex digest")
        return self.root / key[:2] / key

    def put(self, items: Mapping[str, bytes]) -> int:
        _checked(items)
        try:
            return self._put(items)
        except OSError as exc:
            raise ArtifactsUnavailable(f"cannot write blobs under {self.root}: {exc}") from exc

    def _put(self, items: Mapping[str, bytes]) -> int:
        written = 0
        for key, data in items.items():
            path = self._path(key)
            stored = self.read_raw(key)
            if stored is not None and intact(key, stored):
                continue  # a bad copy is replaced below
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".put-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, path)  # atomic: a reader sees all of it or nothing
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            written += len(data)
        return written

    def delete(self, hashes: Iterable[str]) -> int:
        removed = 0
        for key in set(hashes):
            path = self._path(key)
            if path.exists():
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def get(self, hashes: Iterable[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for key in set(hashes):
            try:
                found[key] = self._path(key).read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise ArtifactsUnavailable(f"cannot read blobs under {self.root}: {exc}") from exc
        _missing(hashes, found)
        return _verified(found, str(self.root))

    def hashes(self) -> Iterator[str]:
        if not self.root.is_dir():
            return
        for folder in sorted(self.root.iterdir()):
            if folder.is_dir() and len(folder.name) == 2:
                yield from sorted(p.name for p in folder.iterdir() if _HASH.match(p.name))

    def read_raw(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None


class S3Artifacts:
    """Blobs as objects `<prefix><hash>` in an S3-compatible bucket (needs boto3)."""

    def __init__(self, bucket: str, prefix: str, endpoint: str | None) -> None:
        self._bucket = Bucket(bucket, prefix, endpoint, what="artifact store")
        self.bucket, self.prefix = bucket, prefix

    def put(self, items: Mapping[str, bytes]) -> int:
        _checked(items)
        written = 0
        s3 = self._bucket.client
        with self._bucket.unavailable("write blobs"):
            for key, data in items.items():
                try:
                    stored = s3.head_object(Bucket=self.bucket, Key=self.prefix + key)
                    # one PUT's ETag is its MD5: a copy that does not match is replaced
                    if stored.get("ETag", "").strip('"') == hashlib.md5(data).hexdigest():
                        continue
                except s3.exceptions.ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey"):
                        raise
                self._bucket.write(key, data)
                written += len(data)
        return written

    def get(self, hashes: Iterable[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with self._bucket.unavailable("read blobs"):
            for key in set(hashes):
                data = self._bucket.read(key)
                if data is not None:
                    found[key] = data
        _missing(hashes, found)
        return _verified(found, self._bucket.url)

    def hashes(self) -> Iterator[str]:
        with self._bucket.unavailable("list blobs"):
            pages = self._bucket.client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix):
                for item in page.get("Contents", []):
                    name = item["Key"][len(self.prefix) :]
                    if _HASH.match(name):
                        yield name

    def read_raw(self, key: str) -> bytes | None:
        with self._bucket.unavailable("read blobs"):
            return self._bucket.read(key)

    def delete(self, hashes: Iterable[str]) -> int:
        keys = sorted(set(hashes))
        with self._bucket.unavailable("delete blobs"):
            for start in range(0, len(keys), 1000):  # S3's most keys per request
                objects = [{"Key": self.prefix + k} for k in keys[start : start + 1000]]
                self._bucket.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects})
        return len(keys)

    def close(self) -> None:
        self._bucket.close()


def open_artifacts(url: str, engine: Engine) -> Artifacts:
    """The artifact store `url` names; the database's blobs table when it is empty."""
    if not url or url in ("db", "database"):
        return DatabaseArtifacts(engine)
    place = parse_location(url, what="artifact store")
    if place is None:
        raise _unknown(url)
    if isinstance(place, Path):
        return DirectoryArtifacts(place)
    return S3Artifacts(*place)


def _unknown(url: str) -> ConfigurationError:
    return ConfigurationError(
        f"unknown artifact store {url!r} (TICKWORK_ARTIFACTS_URL): leave it empty for the "
        "database, or give file:///path or s3://bucket/prefix"
    )


def check_reachable(url: str) -> None:
    """Raise ConfigurationError, naming TICKWORK_ARTIFACTS_URL, when the store `url` names
    is not there from this host: a `file://` folder that does not exist (the shared volume
    not mounted here) or an `s3://` bucket that does not answer. A worker checks it before
    it starts: on such a host every session it ticked failed, its files not found."""
    if not url or url in ("db", "database"):
        return
    place = parse_location(url, what="artifact store (TICKWORK_ARTIFACTS_URL)")
    if isinstance(place, Path):
        if not place.is_dir():
            raise ConfigurationError(
                f"the artifact store's folder {place} (TICKWORK_ARTIFACTS_URL={url}) does not "
                "exist on this host: mount the folder every worker shares there (or create "
                "it, for the first host), or correct TICKWORK_ARTIFACTS_URL"
            )
        return
    if place is None:
        raise _unknown(url)
    bucket = Bucket(place[0], place[1], place[2], what="artifact store")
    try:
        with bucket.unavailable("reach the bucket"):
            bucket.client.head_bucket(Bucket=place[0])
    except ArtifactsUnavailable as exc:
        raise ConfigurationError(
            f"{exc.message} (TICKWORK_ARTIFACTS_URL): check that the bucket exists, that "
            "the endpoint (?endpoint= or AWS_ENDPOINT_URL) and the credentials "
            "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) are right on this "
            "host"
        ) from None
    finally:
        bucket.close()


def parse_location(url: str, *, what: str) -> Path | tuple[str, str, str | None] | None:
    """A `file:///path` URL's folder, or an `s3://bucket/prefix` URL's (bucket, prefix
    ending in "/", endpoint: `?endpoint=` or AWS_ENDPOINT_URL); None for another scheme.
    `what` names the setting in the error for a malformed one."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigurationError(f"{what} {url!r}: write file:///absolute/path")
        return Path(unquote(parsed.path))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigurationError(f"{what} {url!r}: write s3://bucket/prefix")
        prefix = parsed.path.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        endpoint = parse_qs(parsed.query).get("endpoint", [None])[0]
        return parsed.netloc, prefix, endpoint or os.environ.get("AWS_ENDPOINT_URL")
    return None
