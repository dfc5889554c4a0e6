"""A worker SIGKILLed during a compaction call (issue 23): exactly one compaction is stored."""

from __future__ import annotations

import json

import pytest
from tickwork.fsm.values import Status, StepKind

from tests.context_server import WindowedChat, windowed_chat
from tests.tasks.conftest import Deployment, kill, stop

pytestmark = pytest.mark.slow


def test_killed_during_a_compaction_one_compaction_is_stored(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_IMPORTS", '["tests.jobs:LONG"]')
    chat = WindowedChat(window=32_768, steps=12, record=True, slow_compaction=30.0)
    with windowed_chat(chat):
        monkeypatch.setenv("OPENAI_BASE_URL", chat.url)
        head = deployment.client.submit(
            "tests.jobs:LONG",
            {"task": "read every chunk"},
            model="openai:long",
            budgets={"max_cost_usd": 0},
            context_window=8_800,
        )
        first = deployment.spawn()
        try:
            assert chat.compacting.wait(120), "the worker never asked for a compaction"
            kill(first)
        finally:
            stop(first)
        second = deployment.spawn()
        try:
            done = deployment.client.wait(head.id, timeout=120)
        finally:
            stop(second)
    assert done.status is Status.COMPLETED, done.error_message
    session = deployment.client.load(head.id)
    compactions = [s for s in session.steps if s.kind is StepKind.COMPACTION]
    asked = [json.dumps(r.messages) for r in chat.answered if r.compaction]
    assert asked[0] == asked[1], "the killed compaction was asked again"
    assert len(compactions) == len(set(asked)), "one compaction step per compaction asked"
    throughs = [s.compacted_through for s in compactions]
    assert throughs == sorted(set(throughs))
    compacted = [e for e in session.events if e.kind == "compacted"]
    assert [e.data["step"] for e in compacted] == [s.step for s in compactions]
