"""Retention in the worker: its settings and one pass of archiving and pruning, which each
worker runs in the background (`pruner.py`) and `tickwork gc` on demand; a pass also drops
this host's working copies of the sessions archived.

Settings (environment), all off by default (nothing is deleted unless an operator says so):
TICKWORK_RETENTION_COMPLETED_S, TICKWORK_RETENTION_CANCELLED_S, TICKWORK_RETENTION_FAILED_S
(how long finished sessions stay live; a failed one counts from when its dead letter was
closed and is never taken while it is open), TICKWORK_RETENTION_ARCHIVE_URL (where the
archive goes), TICKWORK_RETENTION_BATCH, TICKWORK_RETENTION_PERIOD_S and
TICKWORK_RETENTION_BATCHES_PER_PASS (how much one background pass may do).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from tickwork.fsm.errors import ConfigurationError
from tickwork.store.archive import Archive, open_archive
from tickwork.store.artifacts import Artifacts
from tickwork.store.retention import Batch, Policy, Report
from tickwork.store.sweep import Restoring

if TYPE_CHECKING:
    from tickwork.store import Store
    from tickwork.worker.config.settings import Settings

log = logging.getLogger("tickwork.retention")

#: a test's hook: `tickwork gc` says "archive written" and waits this long before deleting
PAUSE_AFTER_WRITE = "TICKWORK_TEST_GC_PAUSE_AFTER_WRITE_S"


class RetentionSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TICKWORK_", extra="ignore", allow_inf_nan=False)

    #: seconds a completed session stays in the live tables; unset: for ever
    retention_completed_s: float | None = Field(default=None, ge=0)
    #: seconds a cancelled session stays in the live tables; unset: for ever
    retention_cancelled_s: float | None = Field(default=None, ge=0)
    #: seconds a failed session stays after its dead letter was closed; unset: for ever
    retention_failed_s: float | None = Field(default=None, ge=0)
    #: where archived sessions go: file:///path or s3://bucket/prefix; empty: beside the
    #: artifact store if that is a folder or bucket, else <state dir>/archive
    retention_archive_url: str = ""
    #: sessions per batch: one archive object, one delete transaction
    retention_batch: int = Field(default=50, ge=1, le=1000)
    #: how often each worker runs a background pass
    retention_period_s: float = Field(default=60.0, gt=0)
    #: the most batches one background pass archives (what keeps it cheap)
    retention_batches_per_pass: int = Field(default=4, ge=1)

    def policy(self) -> Policy:
        return Policy(
            completed_s=self.retention_completed_s,
            cancelled_s=self.retention_cancelled_s,
            failed_s=self.retention_failed_s,
            batch=self.retention_batch,
        )

    def archive(self, settings: Settings) -> Archive:
        return open_archive(
            self.retention_archive_url,
            artifacts_url=settings.artifacts_url,
            default=(settings.state_dir / "archive").absolute(),
        )

    def shared_archive(self, settings: Settings) -> Archive:
        """The archive to write to. Refused when it would be this host's own folder while
        the database is shared: other hosts could not read back what this one archived,
        nor the blobs it moved there."""
        if (
            not self.retention_archive_url
            and not settings.artifacts_url
            and not settings.db_url.startswith("sqlite")
        ):
            raise ConfigurationError(
                "retention would archive to this host's own folder "
                f"({(settings.state_dir / 'archive').absolute()}) while the database is "
                "shared; set TICKWORK_RETENTION_ARCHIVE_URL (or TICKWORK_ARTIFACTS_URL) to "
                "storage every host reaches: file:///shared/dir or s3://bucket/prefix"
            )
        return self.archive(settings)


def run_pass(
    store: Store,
    archive: Archive,
    retention: RetentionSettings,
    *,
    now: datetime,
    max_batches: int | None,
    stale_after_s: float | None = None,
    artifacts: Artifacts | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Report:
    """One pass of archiving and pruning (`tickwork.store.retention.archive_pass`); with
    `artifacts`, the blobs only the archived sessions used move to the archive too."""
    kwargs = {} if stale_after_s is None else {"stale_after_s": stale_after_s}
    return store.retention.archive_pass(
        archive,
        retention.policy(),
        now=now,
        max_batches=max_batches,
        after_write=_test_pause(),
        artifacts=artifacts,
        clock=clock,
        **kwargs,
    )


def restoring(artifacts: Artifacts, settings: Settings) -> Artifacts:
    """`artifacts`, reading blobs retention moved to the archive back from there."""
    from tickwork.worker.config.settings import read_settings

    return Restoring(artifacts, read_settings(RetentionSettings).archive(settings))


def _test_pause() -> Callable[[Batch], None] | None:
    """The crash test's hook: stop between the archive write and the delete."""
    wait = os.environ.get(PAUSE_AFTER_WRITE)
    if not wait:
        return None

    def pause(batch: Batch) -> None:
        print(f"archive written: {batch.location}", file=sys.stderr, flush=True)
        time.sleep(float(wait))

    return pause


def session_key(session_id: str) -> str:
    """The folder name of a session's working copy (`Workspaces.checkout`)."""
    return hashlib.sha256(session_id.encode()).hexdigest()[:32]


def drop_archived_copies(
    store: Store, root: Path, drop: Callable[[str], None], *, since: datetime
) -> int:
    """Drop this host's working copies of the sessions archived since `since`."""
    folder = root / "sessions"
    if not folder.is_dir():
        return 0
    held = {p.name for p in folder.iterdir() if p.is_dir()}
    if not held:
        return 0
    dropped = 0
    for sid in store.retention.since(since):
        if session_key(sid) in held:
            drop(sid)
            dropped += 1
    return dropped
