"""A process's transcripts: the least recently used dropped past their size, which a
worker grows to the ticks it runs at once and never shrinks."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwork.store.transcripts import Transcript, Transcripts

READ = Transcript(datetime(2026, 12, 6, tzinfo=UTC), 0, (), {})


def _put(transcripts: Transcripts, count: int) -> None:
    for i in range(count):
        transcripts.put(f"s{i}", READ)


def test_the_least_recently_used_transcript_is_dropped_past_the_size() -> None:
    transcripts = Transcripts(3)
    _put(transcripts, 3)
    transcripts.put("s0", READ)  # read again by a claim: the most recently used
    transcripts.put("s3", READ)
    assert transcripts.get("s1") is None
    assert all(transcripts.get(f"s{i}") is READ for i in (0, 2, 3))


def test_a_grown_cache_keeps_as_many_transcripts_as_it_was_grown_to() -> None:
    transcripts = Transcripts(64)
    transcripts.grow_to(80)
    _put(transcripts, 81)
    assert transcripts.size == 80
    assert transcripts.get("s0") is None
    assert all(transcripts.get(f"s{i}") is READ for i in range(1, 81))


def test_growing_never_shrinks_the_cache() -> None:
    transcripts = Transcripts(64)
    transcripts.grow_to(10)
    _put(transcripts, 64)
    assert transcripts.size == 64
    assert all(transcripts.get(f"s{i}") is READ for i in range(64))


def test_a_cache_of_none_grows_only_when_asked() -> None:
    transcripts = Transcripts(0)
    transcripts.put("s0", READ)
    assert transcripts.get("s0") is None
    transcripts.grow_to(1)
    transcripts.put("s0", READ)
    assert transcripts.get("s0") is READ
