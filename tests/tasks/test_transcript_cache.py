"""A real threads worker keeps a transcript for each tick it runs at once, so a THINK
reads only new steps when more sessions than 64 are in flight in one process
(ops/bench/in_flight.py); TICKWORK_TRANSCRIPT_CACHE, when given, is kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from tickwork.worker.tick.app import runtime

from tests.tasks.conftest import _settings
from tickwork.testing import running_worker


def test_a_threads_worker_keeps_a_transcript_for_each_of_its_threads(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings = _settings("production", tmp_path, request)
    with running_worker(settings, concurrency=80, relay=False) as app:
        assert runtime(app).store.transcripts.size >= 80


def test_a_transcript_cache_given_is_kept_by_a_threads_worker(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_TRANSCRIPT_CACHE", "10")
    settings = _settings("production", tmp_path, request)
    with running_worker(settings, concurrency=80, relay=False) as app:
        assert runtime(app).store.transcripts.size == 10
