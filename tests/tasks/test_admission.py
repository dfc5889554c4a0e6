"""Admission through real workers: a tenant past its in-flight limit waits `queued` and
every session runs in the end; concurrency keys; workers killed while they admit."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from tickwork.fsm.values import IN_FLIGHT, EventKind, Status
from tickwork.store.schema import events, sessions

from tests.tasks.conftest import Deployment, kill, stop
from tickwork.testing import until

_FLYING = [s.value for s in IN_FLIGHT]


def _work(sleep_s: float) -> list[dict[str, Any]]:
    """One tool call that takes `sleep_s`, then the answer: a session in flight a while."""
    call = {"name": "idem_effect", "arguments": {"value": "x", "sleep_s": sleep_s}}
    return [{"content": "act", "tool_calls": [call]}, {"content": "done"}]


def _tenants(tmp: Path, monkeypatch: pytest.MonkeyPatch, table: dict[str, Any]) -> None:
    path = tmp / "tenants.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv("TICKWORK_TENANTS_FILE", str(path))


class Sampler:
    """Counts the sessions in flight (of a key, if given) every few milliseconds, from the
    database, while it runs; `most` is the highest count seen."""

    def __init__(self, deployment: Deployment, key: str | None = None) -> None:
        self.engine = deployment.client.store.engine
        self.key = key
        self.most = 0
        self.samples = 0
        self._stop = threading.Event()

    def count(self) -> int:
        query = select(func.count()).where(sessions.c.status.in_(_FLYING))
        if self.key is not None:
            query = query.where(sessions.c.concurrency_key == self.key)
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, self.count())
            self.samples += 1
            time.sleep(0.01)

    @contextmanager
    def running(self) -> Iterator[Sampler]:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(10)


def _statuses(deployment: Deployment, ids: list[str]) -> Counter[str]:
    return Counter(deployment.client.get(i).status.value for i in ids)


def _admitted_twice(deployment: Deployment) -> list[str]:
    query = (
        select(events.c.session_id)
        .where(events.c.kind == EventKind.ADMITTED.value)
        .group_by(events.c.session_id)
        .having(func.count() > 1)
    )
    with deployment.client.store.engine.connect() as conn:
        return list(conn.execute(query).scalars())


def test_past_its_limit_a_tenant_waits_and_every_session_runs(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tenants(tmp_path, monkeypatch, {"default": {"max_in_flight": 2}})
    ids = [deployment.submit(_work(0.2)) for _ in range(6)]
    assert _statuses(deployment, ids) == {"ready": 2, "queued": 4}
    # a queued session is cancelled at once, with no worker
    cancelled = deployment.client.cancel(ids[-1], by="ann")
    assert cancelled.status is Status.CANCELLED
    with Sampler(deployment).running() as sampler, deployment.worker():
        until(
            lambda: _statuses(deployment, ids) == {"completed": 5, "cancelled": 1},
            timeout=90,
            what="every session to finish",
        )
    assert sampler.samples > 10
    assert sampler.most == 2
    assert _admitted_twice(deployment) == []


def test_one_session_of_a_concurrency_key_at_a_time(deployment: Deployment, tmp_path: Path) -> None:
    repo = "github.com/org/repo"
    keyed = [deployment.submit(_work(0.1), concurrency_key=repo) for _ in range(3)]
    other = deployment.submit(_work(0.1), concurrency_key="github.com/org/other")
    urgent = deployment.submit(_work(0.1), concurrency_key=repo, priority=10)
    assert _statuses(deployment, [*keyed, other, urgent]) == {"ready": 2, "queued": 3}
    with Sampler(deployment, key=repo).running() as sampler, deployment.worker():
        until(
            lambda: _statuses(deployment, [*keyed, other, urgent]) == {"completed": 5},
            timeout=90,
            what="every session to finish",
        )
    assert sampler.most == 1
    # the urgent one went before the two older ones that waited for the key
    admitted = {
        i: next(
            e.at for _, e in deployment.client.store.events_after(i) if e.kind is EventKind.ADMITTED
        )
        for i in (urgent, keyed[1], keyed[2])
    }
    assert admitted[urgent] < admitted[keyed[1]] < admitted[keyed[2]]


@pytest.mark.slow
@pytest.mark.parametrize("deployment", ["production"], indirect=True)
def test_workers_killed_while_they_admit_never_pass_the_limit_nor_forget_a_session(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 3
    _tenants(tmp_path, monkeypatch, {"default": {"max_in_flight": limit}})
    ids = [deployment.submit(_work(0.05)) for _ in range(24)]
    assert _statuses(deployment, ids)["queued"] == 24 - limit
    rng = random.Random(25)
    workers = [deployment.spawn(), deployment.spawn()]
    try:
        with Sampler(deployment).running() as sampler:
            for _ in range(5):  # kill one worker at a random moment, start another
                until(
                    lambda: _statuses(deployment, ids)["queued"] < 24 - limit,
                    timeout=60,
                    what="admissions to go on",
                )
                time.sleep(rng.uniform(0.2, 1.2))
                victim = workers.pop(rng.randrange(len(workers)))
                kill(victim)
                workers.append(deployment.spawn())
            until(
                lambda: _statuses(deployment, ids) == {"completed": 24},
                timeout=180,
                what="every queued session to run",
            )
    finally:
        for worker in workers:
            stop(worker)
    assert sampler.samples > 50
    assert sampler.most <= limit, f"{sampler.most} sessions were in flight at once"
    assert _admitted_twice(deployment) == []
