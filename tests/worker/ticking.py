"""A worker without Celery for the observer tests: ticks run one after another in-process."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tickwork.fsm.values import Head
from tickwork.store import open_store
from tickwork.worker.config.settings import Settings
from tickwork.worker.jobs import Jobs
from tickwork.worker.observers.report import TickReport
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.runtime import Runtime

from tests.conftest import Clock
from tickwork.client import Tickwork

KIND = "tests.jobs:TEST"
#: a step with a call that needs approval, then a final answer
DANGER: list[dict[str, Any]] = [
    {
        "content": "delete it",
        "tool_calls": [
            {"name": "danger", "arguments": {"value": "prod-db"}},
            {"name": "echo", "arguments": {"text": "after"}},
        ],
    },
    {"content": "done"},
]


class Ticks:
    def __init__(self, url: str, tmp: Path, clock: Clock | None = None) -> None:
        self.tmp = tmp
        self.settings = Settings(database_url=url, state_dir=tmp / "state")
        self.store = open_store(url)
        self.client = Tickwork(self.settings, store=self.store)
        self.client.publish = lambda *_: None  # type: ignore[method-assign]
        #: every runtime made here, closed with it (their lease and watch threads)
        self.runtimes: list[Runtime] = []
        self.rt = self.runtime(clock)
        self.reports: list[TickReport] = []

    def runtime(self, clock: Clock | None = None) -> Runtime:
        extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
        made = Runtime(
            settings=self.settings,
            store=self.store,
            jobs=Jobs(),
            publish_tick=lambda *_: None,
            **extra,
        )
        self.runtimes.append(made)
        return made

    def submit(self, replies: list[dict[str, Any]], prefix: str = "s") -> str:
        path = self.tmp / f"script-{uuid.uuid4().hex[:6]}.json"
        path.write_text(json.dumps(replies))
        head = self.client.submit(
            KIND, {}, model=f"scripted:{path}", session_id=f"{prefix}-{uuid.uuid4().hex[:8]}"
        )
        return head.id

    def run(self, session_id: str, rt: Runtime | None = None) -> Head:
        """Tick the session until it rests, as workers would."""
        for _ in range(50):
            head = self.store.get(session_id)
            if not head.status.runnable:
                return head
            self.reports.append(advance(rt or self.rt, session_id, head.version))
        raise AssertionError(f"session {session_id} did not rest in 50 ticks")

    def close(self) -> None:
        for made in self.runtimes:
            made.close()
        self.store.engine.dispose()
