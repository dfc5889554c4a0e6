"""Long sessions against a server with a context window (tests/context_server.py): what a
compaction, a graph node and a trace learn and record of the window the server states."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tickwork.fsm import context
from tickwork.fsm.values import EventKind, Status, StepKind

from tests.context_server import WindowedChat, windowed_chat

from .test_context_window import PRICE, Long


@pytest.fixture
def long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Long]:
    monkeypatch.setenv(
        "TICKWORK_IMPORTS", '["tests.jobs:LONG", "tests.graphs:ASK", "tests.graphs:ASK_AROUND"]'
    )
    deployment = Long(tmp_path)
    yield deployment
    deployment.close()


def test_a_compaction_refused_as_too_long_learns_the_stated_window_and_goes_on(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose window (6,000) is below the session's (16,384) refused a compaction's
    prompt itself as too long: the session failed CONTEXT ("compacting steps 1-N was
    refused as too long too") with the window the refusal stated forgotten, where a THINK
    refused so learns it and goes on. The compaction's refusal now teaches it too: a
    `context_overflow` event, the window on the card, and the next compaction fits it."""
    from tickwork import render, views

    chat = WindowedChat(window=32_768, steps=60, compaction_window=6_000)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        session_id = long.submit(context_window=16_384)
        head = long.run(session_id)
    refused = [r for r in chat.log if r.refused]
    assert refused and refused[0].compaction and refused[0].tokens > 6_000
    assert head.status is Status.COMPLETED, head.error_message
    assert head.final_answer == "done: read 60 chunks"
    assert head.result[context.STATED_WINDOW] == 6_000
    # learned: no prompt after it passes the window (a cap may still be asked again within it)
    assert all(r.tokens < 6_000 for r in refused[1:])
    session = long.store.load(session_id)
    assert any(s.kind is StepKind.COMPACTION for s in session.steps)
    events = views.session(session)["events"]
    (overflow,) = [e for e in events if e["kind"] == EventKind.CONTEXT_OVERFLOW]
    assert (overflow["data"]["window"], overflow["data"]["stated_window"]) == (16_384, 6_000)
    assert "the model states 6,000" in render.event_line(overflow).plain


def test_a_window_a_graph_node_learns_stays_with_it_and_its_branches_when_it_fans_out(
    long: Long, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node refused as too long learns the window the server states, and its later calls
    fit it; but a node that then fanned out saved the session's head as it was before the
    node ran: the window was lost from the card, and each branch, planned under the
    session's larger window, was refused once more to learn it again."""
    with windowed_chat(WindowedChat(window=9_000, steps=5)) as chat:
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = long.client.submit(
            "tests.graphs:ASK_AROUND",
            {"size": 8_000},
            model="openai:long",
            price=PRICE,
            context_window=32_768,
        )
        done = long.run(head.id)
        for branch in long.store.children(head.id):
            long.run(branch.id)
        done = long.run(head.id)
    assert done.status is Status.COMPLETED, done.error_message
    assert [r.refused for r in chat.log] == [True, False, False, False], "one refusal taught all"
    assert done.result[context.STATED_WINDOW] == 9_000
    branches = long.store.children(head.id)
    assert len(branches) == 2
    assert all(b.result[context.STATED_WINDOW] == 9_000 for b in branches)
