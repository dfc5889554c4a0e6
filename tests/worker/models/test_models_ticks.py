"""Model calls through real ticks (`worker.advance.advance`) on SQLite and on Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm.values import ErrorCode, Head, Status
from store import Store, make_engine
from tickwork.client import Tickwork
from worker.advance import advance
from worker.jobs import Jobs
from worker.runtime import Runtime
from worker.settings import Settings

KIND = "tests.jobs:TEST"


class Ticks:
    def __init__(self, url: str, tmp: Path) -> None:
        self.settings = Settings(database_url=url, state_dir=tmp / "state")
        self.store = Store(make_engine(url))
        self.client = Tickwork(self.settings, store=self.store)
        self.client.publish = lambda *_: None  # type: ignore[method-assign]
        self.rt = Runtime(
            settings=self.settings, store=self.store, jobs=Jobs(), publish_tick=lambda *_: None
        )

    def run(self, session_id: str) -> Head:
        """Tick the session until it rests, as workers would."""
        for _ in range(50):
            head = self.store.get(session_id)
            if not head.status.runnable:
                return head
            advance(self.rt, session_id, head.version)
        raise AssertionError(f"session {session_id} did not rest in 50 ticks")

    def close(self) -> None:
        self.rt.close()
        self.store.engine.dispose()


@pytest.fixture
def ticks(database_url: str, tmp_path: Path) -> Iterator[Ticks]:
    found = Ticks(database_url, tmp_path)
    yield found
    found.close()


def _sent_ids(body: dict[str, Any]) -> tuple[list[str], list[str]]:
    messages = body["messages"]
    offered = [c["id"] for m in messages if m["role"] == "assistant" for c in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    return offered, answered


def test_a_server_that_checks_call_ids_gets_its_own_back(
    ticks: Ticks, mistral_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", mistral_server.base_url)
    ids = ["abcDEF123", "XyZ987654"]
    mistral_server.answer(
        "look", calls=[("echo", '{"text": "a"}'), ("echo", '{"text": "b"}')], ids=ids
    )
    mistral_server.answer("again", calls=[("echo", '{"text": "c"}')], ids=["Q1w2E3r4T"])
    mistral_server.answer("done")
    head = ticks.client.submit(KIND, {}, model="openai:mistral-small", price=(0.1, 0.3))

    done = ticks.run(head.id)

    assert done.status is Status.COMPLETED, done.error_message
    assert _sent_ids(mistral_server.requests[1].body) == (ids, ids)
    assert _sent_ids(mistral_server.requests[2].body) == ([*ids, "Q1w2E3r4T"],) * 2
    session = ticks.store.load(head.id)
    stored = [(c.call_id, c.provider_call_id) for s in session.steps for c in s.calls]
    assert stored == [("s1c0", ids[0]), ("s1c1", ids[1]), ("s2c0", "Q1w2E3r4T")]
    assert [o.content for o in session.observations] == ["a", "b", "c"]


def test_without_the_providers_ids_such_a_server_refuses_the_history(
    ticks: Ticks, mistral_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What happened to every session before ids were kept: our `s1c0` is refused."""
    monkeypatch.setenv("OPENAI_BASE_URL", mistral_server.base_url)
    mistral_server.answer("look", calls=[("echo", '{"text": "a"}')], ids=["call_0"])
    head = ticks.client.submit(KIND, {}, model="openai:mistral-small", price=(0.1, 0.3))

    done = ticks.run(head.id)

    assert done.error_code is ErrorCode.MODEL_ERROR
    assert "Tool call id was call_0 but must be a-z, A-Z, 0-9" in done.error_message
