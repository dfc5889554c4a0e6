"""Every artifact store keeps blobs by their SHA-256, once: the database's blobs table, a
directory, and S3-compatible storage (moto's server on loopback)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tickwork.fsm.errors import BlobCorrupt, BlobMissing, ConfigurationError
from tickwork.store import make_engine
from tickwork.store.artifacts import Artifacts, open_artifacts
from tickwork.store.files import blob_hash
from tickwork.store.migrate import upgrade
from tickwork.store.scrub import BAD, DELETED, REPLACED, Finding, scrub

from tests.ports import free_port


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    pytest.importorskip("boto3")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(params=["database", "directory", "s3"])
def artifacts(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Artifacts]:
    url = f"sqlite:///{tmp_path / 'blobs.db'}"
    upgrade(url)
    engine = make_engine(url)
    if request.param == "database":
        found: Any = open_artifacts("", engine)
    elif request.param == "directory":
        found = open_artifacts(f"file://{tmp_path / 'shared'}", engine)
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        for name, value in (
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
        ):
            monkeypatch.setenv(name, value)
        import boto3

        bucket = f"tw-{tmp_path.name.lower()[-20:].strip('_') or 'x'}".replace("_", "-")
        admin = boto3.client("s3", endpoint_url=endpoint)
        admin.create_bucket(Bucket=bucket)
        admin.close()
        found = open_artifacts(f"s3://{bucket}/blobs?endpoint={endpoint}", engine)
    yield found
    if hasattr(found, "close"):
        found.close()
    engine.dispose()


def test_a_blob_is_stored_once_and_read_back(artifacts: Artifacts) -> None:
    blobs = {blob_hash(b"x" * 1000): b"x" * 1000, blob_hash(b""): b""}
    assert artifacts.put(blobs) == 1000
    assert artifacts.put(blobs) == 0  # already there: nothing written
    assert artifacts.get(blobs) == blobs


def test_a_missing_blob_and_a_misnamed_one_are_refused(artifacts: Artifacts) -> None:
    with pytest.raises(BlobMissing, match="not in the artifact store"):
        artifacts.get([blob_hash(b"never put")])
    with pytest.raises(ValueError, match="does not hold the content"):
        artifacts.put({blob_hash(b"a"): b"b"})


def _corrupt(artifacts: Any, key: str, data: bytes) -> None:
    """Overwrite the stored copy of `key` behind the store's back (a disk's rot)."""
    from sqlalchemy import update
    from tickwork.store.schema import blobs

    if hasattr(artifacts, "engine"):
        with artifacts.engine.begin() as conn:
            conn.execute(update(blobs).where(blobs.c.hash == key).values(data=data))
    elif hasattr(artifacts, "root"):
        artifacts._path(key).write_bytes(data)
    else:
        artifacts._bucket.write(key, data)


def test_a_bad_copy_is_never_given_out_and_a_write_replaces_it(artifacts: Artifacts) -> None:
    good, other = b"def total(xs):\n    return sum(xs)\n", b"kept\n"
    key = blob_hash(good)
    artifacts.put({key: good, blob_hash(other): other})
    _corrupt(artifacts, key, b"def total(xs):\n    return 0  # rotted\n")

    with pytest.raises(BlobCorrupt, match=key) as raised:
        artifacts.get([key, blob_hash(other)])
    assert raised.value.keys == (key,)
    assert scrub(artifacts, None, repair=False).findings == (Finding(key, BAD),)  # type: ignore[arg-type]

    assert artifacts.put({key: good}) == len(good)  # the same content again repairs it
    assert artifacts.get([key]) == {key: good}
    assert scrub(artifacts, None, repair=False).findings == ()  # type: ignore[arg-type]


def test_a_scrub_replaces_from_the_archive_or_deletes(artifacts: Artifacts, tmp_path: Path) -> None:
    from tickwork.store.archive import DirectoryArchive
    from tickwork.store.sweep import Restoring, blob_name

    archived, lost = b"in the archive too\n", b"only here\n"
    keys = blob_hash(archived), blob_hash(lost)
    artifacts.put(dict(zip(keys, (archived, lost), strict=True)))
    archive = DirectoryArchive(tmp_path / "archive")
    archive.write(blob_name(keys[0]), archived)
    for key in keys:
        _corrupt(artifacts, key, b"rot")

    # a reader with another tier gets the good copy, and it is put back in the store
    assert Restoring(artifacts, archive).get([keys[0]]) == {keys[0]: archived}
    assert artifacts.get([keys[0]]) == {keys[0]: archived}
    with pytest.raises(BlobCorrupt, match=r"the archive .* has no copy"):
        Restoring(artifacts, archive).get([keys[1]])

    _corrupt(artifacts, keys[0], b"rot again")
    report = scrub(artifacts, archive, repair=True)  # type: ignore[arg-type]
    assert sorted(report.findings) == sorted(
        [Finding(keys[0], REPLACED), Finding(keys[1], DELETED)]
    )
    assert report.lost and report.checked == 2
    assert artifacts.get([keys[0]]) == {keys[0]: archived}
    with pytest.raises(BlobMissing):
        artifacts.get([keys[1]])


def test_the_archive_goes_beside_the_artifact_store_and_reads_back(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention's archive (store/archive.py) takes the same URLs: beside a folder or a
    bucket when unset, its own when given; a malformed one names the setting."""
    from tickwork.store.archive import ArchiveMissing, DirectoryArchive, S3Archive, open_archive

    _bucket(s3_endpoint, "tw-archive", monkeypatch)
    beside = open_archive(
        "", artifacts_url=f"s3://tw-archive/blobs?endpoint={s3_endpoint}", default=tmp_path
    )
    assert isinstance(beside, S3Archive) and beside.url == "s3://tw-archive/blobs/archive/"
    beside.write("day=2026-12-01/x.jsonl.gz", b"record")
    assert beside.read("day=2026-12-01/x.jsonl.gz") == b"record"
    with pytest.raises(ArchiveMissing):
        beside.read("day=2026-12-01/none.jsonl.gz")

    folder = open_archive("", artifacts_url=f"file://{tmp_path / 'shared'}", default=tmp_path)
    assert isinstance(folder, DirectoryArchive) and folder.root == tmp_path / "shared" / "archive"
    own = open_archive(f"file://{tmp_path / 'own'}", artifacts_url="", default=tmp_path)
    assert isinstance(own, DirectoryArchive) and own.root == tmp_path / "own"
    assert open_archive("", artifacts_url="", default=tmp_path / "here").root == tmp_path / "here"  # type: ignore[attr-defined]
    for bad, words in [
        ("ftp://host/x", "TICKWORK_RETENTION_ARCHIVE_URL"),
        ("file://elsewhere/x", "file:///absolute/path"),
        ("s3:///prefix", "s3://bucket/prefix"),
    ]:
        with pytest.raises(ConfigurationError, match=words):
            open_archive(bad, artifacts_url="", default=tmp_path)


def test_a_store_this_host_cannot_reach_is_named_before_a_worker_starts(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before, a worker on a host without the shared folder mounted (or with another
    # bucket) started, and failed INTERNAL every session it ticked: its blobs "missing"
    from tickwork.store.artifacts import check_reachable

    _bucket(s3_endpoint, "tw-reachable", monkeypatch)
    (tmp_path / "mounted").mkdir()
    check_reachable("")
    check_reachable(f"file://{tmp_path / 'mounted'}")
    check_reachable(f"s3://tw-reachable/blobs?endpoint={s3_endpoint}")
    for url, words in [
        (f"file://{tmp_path / 'not-mounted'}", "does not exist on this host"),
        (f"s3://tw-no-such-bucket/blobs?endpoint={s3_endpoint}", "check that the bucket exists"),
        ("s3:/bucket", "TICKWORK_ARTIFACTS_URL"),
        ("ftp://host/x", "TICKWORK_ARTIFACTS_URL"),
    ]:
        with pytest.raises(ConfigurationError, match=words):
            check_reachable(url)


def _bucket(s3_endpoint: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new bucket `name` on the test's S3 server, and its credentials in the environment."""
    for variable, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(variable, value)
    import boto3

    admin = boto3.client("s3", endpoint_url=s3_endpoint)
    admin.create_bucket(Bucket=name)
    admin.close()
