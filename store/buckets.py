"""An S3-compatible bucket under a prefix: the one S3 client set-up that the artifact store
(`artifacts.S3Artifacts`) and the archive (`archive.S3Archive`) share.

boto3 comes with the `s3` extra and is imported only when a bucket is made; the endpoint is
`?endpoint=URL` of the location or AWS_ENDPOINT_URL (`artifacts.parse_location`), the
credentials boto3's own chain. S3's errors (the endpoint away, a refusal) leave as
`ArtifactsUnavailable`, so a tick that meets one runs again later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tickwork.fsm.errors import ArtifactsUnavailable, ConfigurationError


class Bucket:
    """Objects `<prefix><name>` in `bucket`, through one boto3 client."""

    def __init__(self, bucket: str, prefix: str, endpoint: str | None, *, what: str) -> None:
        """`what` names the user of the bucket in the error for a missing boto3."""
        try:
            import boto3  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:
            raise ConfigurationError(
                f"an s3:// {what} needs boto3: pip install 'tickwork[s3]'"
            ) from None
        self.bucket, self.prefix = bucket, prefix
        self.url = f"s3://{bucket}/{prefix}"
        #: boto3's S3 client, for the calls only one user makes (head_object, listing)
        self.client: Any = boto3.client("s3", endpoint_url=endpoint)

    def read(self, name: str) -> bytes | None:
        """The object `name`, or None if there is none."""
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)
        except self.client.exceptions.NoSuchKey:
            return None
        with reply["Body"] as body:
            return bytes(body.read())

    def write(self, name: str, data: bytes) -> None:
        """Store `data` as `name`, replacing what was there (one PUT: all or nothing)."""
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=data)

    @contextlib.contextmanager
    def unavailable(self, what: str) -> Iterator[None]:
        """S3's errors inside the block as ArtifactsUnavailable: "cannot `what` in <url>"."""
        from botocore.exceptions import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            BotoCoreError,
            ClientError,
        )

        try:
            yield
        except (BotoCoreError, ClientError) as exc:
            raise ArtifactsUnavailable(f"cannot {what} in {self.url}: {exc}") from exc

    def close(self) -> None:
        self.client.close()
