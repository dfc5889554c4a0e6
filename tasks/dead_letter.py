"""The dead-letter task: a message per dead-lettered session for whoever listens.

Workers started with `tickwork worker --dead-letters` consume the queue and log each one;
alerting hooks can listen on the same queue instead.
"""

from __future__ import annotations

import logging

from celery import shared_task

from worker.app import DEAD_LETTER

log = logging.getLogger("tickwork.dead_letter")


@shared_task(name=DEAD_LETTER, ignore_result=True)
def dead_letter(session_id: str, code: str, message: str) -> None:
    log.warning("dead letter: session %s failed with %s: %s", session_id, code, message)
