"""The pruner: a thread in every worker that runs a small retention pass now and then,
like the relay (issue 16; `retention.py`)."""

from __future__ import annotations

import logging
from datetime import timedelta

from tickwork.fsm.wording import counted
from tickwork.store.retention import Report
from tickwork.worker.config.process import Loop
from tickwork.worker.files.environments import drop_unused
from tickwork.worker.tick.retention import RetentionSettings, drop_archived_copies, run_pass
from tickwork.worker.tick.runtime import Runtime

log = logging.getLogger("tickwork.retention")

#: how far back a worker first looks for archived sessions whose working copy it holds
FIRST_LOOK_BACK = timedelta(days=7)


class RetentionThread(Loop):
    """Runs a small retention pass every `retention_period_s` until stopped."""

    def __init__(self, rt: Runtime, retention: RetentionSettings) -> None:
        self.rt = rt
        self.retention = retention
        self.archive = retention.shared_archive(rt.settings)
        self.looked = rt.clock() - FIRST_LOOK_BACK
        super().__init__(
            "retention",
            self.once,
            every_s=retention.retention_period_s,
            log=log,
            what="retention pass",
        )

    def once(self) -> Report:
        now = self.rt.clock()
        done = run_pass(
            self.rt.store,
            self.archive,
            self.retention,
            now=now,
            max_batches=self.retention.retention_batches_per_pass,
            artifacts=self.rt.workspaces.artifacts,
            clock=self.rt.clock,
        )
        if done.batches:
            log.info(
                "retention: archived %s in %s to %s (and %s only they used)%s",
                counted(done.archived, "session"),
                counted(done.batches, "batch", "batches"),
                self.archive.url,
                counted(done.blobs_moved, "blob"),
                "" if done.parquet else " (JSON Lines only: pip install 'tickwork[parquet]')",
            )
        dropped = drop_archived_copies(
            self.rt.store,
            self.rt.settings.workspaces_path,
            self.rt.workspaces.drop,
            since=self.looked,
        )
        if dropped:
            log.info("retention: dropped %d working copies of archived sessions", dropped)
        environments = drop_unused(self.rt, now=now)
        if environments:
            log.info("retention: dropped %d environments no live session used", environments)
        # a little overlap: another host's clock, a pass that committed as we looked
        self.looked = now - timedelta(seconds=max(60.0, 2 * self.retention.retention_period_s))
        return done
