"""The transcripts a worker process has read, so a THINK claim reads only what is new.

Steps, their calls and the observations of a closed step are never changed once written,
so what one THINK claim read stays true: the next THINK of the same session needs only the
steps after it. A session is known by its id and its creation time, so a session created
again under the same id is read afresh: besides its id, its creation time and the last step
read must match.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

from tickwork.fsm.values import Head, Observation, Step

#: a step as a claim sees it: its trace id and fingerprint (None: no such step)
Mark = tuple[str, str] | None


@dataclass(frozen=True)
class Transcript:
    created_at: datetime
    #: the head's step when it was read: it holds every step up to this one, closed
    step: int
    steps: tuple[Step, ...]
    observations: dict[str, Observation]

    def continued_by(self, head: Head, last: Mark) -> bool:
        """Whether `head` is this session at this step or later, `last` being its step
        `self.step` as the claim read it."""
        mine = (self.steps[-1].trace_id, self.steps[-1].fingerprint) if self.steps else None
        return head.created_at == self.created_at and head.step >= self.step and mine == last


class Transcripts:
    """The latest transcripts read in this process, the least recently used dropped first."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._known: OrderedDict[str, Transcript] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """How many sessions' transcripts are kept."""
        return self._size

    def grow_to(self, size: int) -> None:
        """Keep at least `size` transcripts from now on (never fewer than now): a worker
        running many ticks in one process keeps one for each (`worker/tick/app.py`)."""
        with self._lock:
            self._size = max(self._size, size)

    def get(self, session_id: str) -> Transcript | None:
        with self._lock:
            return self._known.get(session_id)

    def put(self, session_id: str, transcript: Transcript) -> None:
        with self._lock:
            self._known[session_id] = transcript
            self._known.move_to_end(session_id)
            while len(self._known) > self._size:
                self._known.popitem(last=False)
