"""How many transcripts a worker process keeps: one for each tick it runs at once on a
pool of many ticks in one process, unless TICKWORK_TRANSCRIPT_CACHE is given."""

from __future__ import annotations

from typing import Any

import pytest
from celery.concurrency.thread import TaskPool as ThreadPool
from tickwork.worker.config.settings import Settings
from tickwork.worker.tick.app import transcripts_to_keep


@pytest.mark.parametrize(
    ("pool", "concurrency", "kept"),
    [
        ("threads", 250, 250),
        (ThreadPool, 250, 250),  # as `celery worker --pool threads` hands it over
        ("gevent", 500, 500),
        ("eventlet", 500, 500),
        ("celery.concurrency.gevent:TaskPool", 500, 500),
        ("threads", 8, 64),  # 64 at least
        ("threads", "auto", 64),  # the CPUs: fewer than 64
        ("prefork", 250, 64),  # each child runs one tick at a time
        ("processes", 250, 64),
        ("solo", 1, 64),
        ("myapp.pools:Pool", 250, 64),  # a custom pool: not known to run many
    ],
)
def test_a_worker_keeps_a_transcript_for_each_tick_its_process_runs_at_once(
    pool: Any, concurrency: Any, kept: int
) -> None:
    assert transcripts_to_keep(Settings(), pool=pool, concurrency=concurrency) == kept


@pytest.mark.parametrize("given", [0, 10, 100])
def test_a_transcript_cache_given_is_kept_whatever_the_pool(
    given: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_TRANSCRIPT_CACHE", str(given))
    assert transcripts_to_keep(Settings(), pool="threads", concurrency=250) == given
    monkeypatch.delenv("TICKWORK_TRANSCRIPT_CACHE")
    settings = Settings(transcript_cache=given)  # as a Python caller gives it
    assert transcripts_to_keep(settings, pool="threads", concurrency=250) == given
