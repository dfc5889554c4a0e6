"""The tick task: one micro-phase of one session."""

from __future__ import annotations

from celery import Task, shared_task
from tickwork.worker.tick.advance import advance
from tickwork.worker.tick.app import TICK, runtime


@shared_task(name=TICK, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def tick(self: Task, session_id: str, version: int) -> str:
    """Advance `session_id` from `version`; stale and duplicate messages are dropped. The
    result is the tick's outcome (`saved`, `dropped`, `lost`). Its lease names the worker
    as `celery inspect` does (`request.hostname`)."""
    rt = runtime(self.app)
    return advance(rt, session_id, version, node=self.request.hostname).outcome.value
