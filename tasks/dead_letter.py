"""The dead-letter task: a message per dead-lettered session for whoever listens.

`tickwork worker` consumes the queue by default (`--no-dead-letters` leaves it to another
consumer): each message is logged and counted in `tickwork_dead_letters_received_total`.
The dead letter itself is in the database either way; the message is only a notice.
"""

from __future__ import annotations

import logging

from celery import shared_task
from tickwork.worker.observers import metrics
from tickwork.worker.tick.app import DEAD_LETTER

log = logging.getLogger("tickwork.dead_letter")


@shared_task(name=DEAD_LETTER, ignore_result=True)
def dead_letter(session_id: str, code: str, message: str) -> None:
    log.warning("dead letter: session %s failed with %s: %s", session_id, code, message)
    metrics.count_dead_letter(code)
