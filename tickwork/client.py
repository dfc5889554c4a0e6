"""The Python client API, `tickwork.Tickwork`: one handle on a deployment that reads
(`tickwork.reads.Reads`: sessions, their timelines, events and waiting calls, files,
patches, dead letters) and writes (`tickwork.writes.Writes`: submit, decide, cancel, fork,
fork and close dead letters). Its methods are the remote client's (`tickwork.remote.Client`)
by name, parameters and meaning, but for what only one of them can do
(tests/test_client_parity.py and docs/PYTHON.md list those, with why).

A method of one session takes its whole id or a unique start of it (6 characters or more),
as the CLI and the remote client take one (`Reads.session_id`), with the CLI's refusals: too
short, no id starts with it, or it starts several (naming a few); and a dead letter its
number (`#12`) or its session's id or start, as `tickwork dlq` takes one. `WholeIds` takes
whole ids only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar

from tickwork.fsm.errors import SessionArchived, SessionNotFound

from .reads import Reads
from .writes import Writes

if TYPE_CHECKING:
    from tickwork.store import dead_letters as dl

P = ParamSpec("P")
R = TypeVar("R")


def _named(op: Callable[Concatenate[Any, str, P], R]) -> Callable[Concatenate[Any, str, P], R]:
    """The operation `op` of one session (its first parameter the session's id), taking a
    unique start of the id as well."""

    @functools.wraps(op)
    def resolving(self: Tickwork, session_id: str, *args: P.args, **kwargs: P.kwargs) -> R:
        whole = self._whole(session_id)
        try:
            return op(self, whole, *args, **kwargs)
        except SessionArchived:
            raise
        except SessionNotFound as exc:
            # an id start finds archived sessions too: one is said archived, not missing
            if exc.session_id not in (None, whole):
                raise
            raise self._not_live(whole, exc) from None

    return resolving


def _lettered(
    op: Callable[Concatenate[Any, int | str, P], R],
) -> Callable[Concatenate[Any, int | str, P], R]:
    """The operation `op` of one dead letter (its first parameter the letter's number or its
    session's id), taking the letter as `dead_letter` does: by a start of the session's id
    as well."""

    @functools.wraps(op)
    def resolving(self: Tickwork, key: int | str, *args: P.args, **kwargs: P.kwargs) -> R:
        return op(self, self._letter(key), *args, **kwargs)

    return resolving


class Tickwork(Reads, Writes):
    """One handle on a tickwork deployment, configured from settings: everything `Reads`
    and `Writes` offer, on one store and one Celery app (made on first publish). A method
    of one session takes its whole id or a unique start of it, as the CLI does."""

    #: whether a method of one session takes a start of its id (`WholeIds`: whole ids only)
    id_starts: ClassVar[bool] = True

    def whole_ids(self) -> Tickwork:
        """This client taking whole session ids only (`WholeIds`), holding what it holds:
        what the API is given (`make_api`)."""
        twin = object.__new__(WholeIds)
        twin.__dict__ = self.__dict__  # one store, Celery app and caches, read two ways
        return twin

    def _whole(self, session_id: str) -> str:
        return self.session_id(session_id) if self.id_starts else session_id

    get = _named(Reads.get)
    load = _named(Reads.load)
    wait = _named(Reads.wait)
    tree = _named(Reads.tree)
    timeline = _named(Reads.timeline)
    events = _named(Reads.events)
    waiting = _named(Reads.waiting)
    forks = _named(Reads.forks)
    patch = _named(Reads.patch)
    bundle = _named(Reads.bundle)
    read_file = _named(Reads.read_file)
    # approve, edit, reject and provide_output decide through `decide`
    decide = _named(Writes.decide)
    cancel = _named(Writes.cancel)
    fork = _named(Writes.fork)

    def dead_letter(self, key: int | str) -> dl.DeadLetter:
        """A dead letter by its number (an int, or `#12`), or its session's id or a unique
        start of one, as `tickwork dlq show` takes one (`Reads.find_dead_letter`)."""
        if isinstance(key, str) and self.id_starts:
            return self.find_dead_letter(key)
        return super().dead_letter(key)

    # resolve_dead_letter and dismiss_dead_letter close through close_dead_letter
    close_dead_letter = _lettered(Writes.close_dead_letter)
    fork_dead_letter = _lettered(Writes.fork_dead_letter)

    def _letter(self, key: int | str) -> int | str:
        """The dead letter's number for a key that may name it by a start of its session's
        id (as `tickwork dlq` takes one); a key as given for `WholeIds`."""
        return self.find_dead_letter(key).id if isinstance(key, str) and self.id_starts else key


class WholeIds(Tickwork):
    """A client whose methods of one session take whole ids only: the API's, which looks a
    start up among the sessions a token sees only, and the CLI commands', which have looked
    one up already in their own words."""

    id_starts = False

    def whole_ids(self) -> Tickwork:
        return self
