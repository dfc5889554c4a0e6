"""Admission, as values and pure functions (docs/DESIGN.md section 15): the checks of what
a submitter asks for (priority, concurrency key), whether a new session may start at once,
and the weighted fair order in which the relay shares one pass's admissions across tenants.

A session is *in flight* from its admission (or its start, when it was not queued) until
it finishes: `ready`, `executing` and `waiting_approval` all count (`Status.in_flight`),
since a session waiting for a person goes on without being admitted again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from tickwork.fsm.errors import InvalidInput
from tickwork.fsm.values import Value

#: the bounds of `--priority`: higher is admitted first within a tenant
MIN_PRIORITY, MAX_PRIORITY = -1000, 1000
#: the most sessions of one concurrency key in flight a submitter may ask for
MAX_PER_KEY = 10_000
#: a concurrency key: what a repository or resource is called (letters, digits, `_ - . : / @ + =`)
CONCURRENCY_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+=-]{0,199}$")


class TenantLimit(Value):
    """What admission knows of one tenant: how many of its sessions may be in flight at
    once (None: no limit) and its share of the fleet's admissions against other tenants."""

    max_in_flight: int | None = None
    weight: float = 1.0

    def model_post_init(self, _context: object) -> None:
        if self.max_in_flight is not None and self.max_in_flight < 0:
            raise ValueError(f"max_in_flight must be 0 or more, got {self.max_in_flight}")
        if not math.isfinite(self.weight) or self.weight <= 0:
            raise ValueError(f"weight must be a positive number, got {self.weight}")


class Admission(Value):
    """The admission limits of every tenant: those named, and the rest by `default`."""

    tenants: Mapping[str, TenantLimit] = {}
    default: TenantLimit = TenantLimit()

    def of(self, tenant: str) -> TenantLimit:
        return self.tenants.get(tenant, self.default)


def check_priority(priority: object, *, what: str = "priority") -> int:
    """The priority as given, or InvalidInput naming the bounds. `what`: the priority's
    name where it was given (the API's and Python's field by default; the CLI's flag)."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidInput(f"{what} must be a whole number, got {priority!r}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidInput(
            f"{what} {priority} is out of bounds: give a whole number from {MIN_PRIORITY} "
            f"to {MAX_PRIORITY} (higher is admitted first)"
        )
    return priority


def check_concurrency(
    key: object,
    max_per_key: object,
    *,
    key_is: str = "concurrency_key",
    limit_is: str = "max_per_key",
) -> tuple[str | None, int | None]:
    """The concurrency key and its limit as stored: a key alone allows one session in flight
    at a time; a limit without a key is refused, and so is an empty key (an unset shell
    variable's: the session would run unkeyed, beside the ones it must wait for). A limit
    out of bounds is refused first, with or without a key (0 does not mean "no limit").
    `key_is` and `limit_is` name the two where they were given: the API's and Python's
    fields by default, the CLI's flags (an API client was told to give --concurrency-key)."""
    per_key = None if max_per_key is None else check_max_per_key(max_per_key, what=limit_is)
    if key == "":
        raise InvalidInput(
            f"the concurrency key ({key_is}) is empty: give one, e.g. github.com/org/repo, "
            "or leave it out for no key"
        )
    if key is None:
        if max_per_key is not None:
            raise InvalidInput(f"{limit_is} needs a concurrency key: give {key_is} with it")
        return None, None
    if not isinstance(key, str) or not CONCURRENCY_KEY.fullmatch(key):
        raise InvalidInput(
            f"concurrency key {key!r} is not valid: up to 200 characters, letters, digits "
            "and _ - . : / @ + =, starting with a letter or digit (e.g. github.com/org/repo)"
        )
    return key, per_key or 1


def check_max_per_key(max_per_key: object, *, what: str = "max_per_key") -> int:
    """The per-key limit as given, or InvalidInput naming the bounds (`what`: its name where
    it was given, as `check_priority`'s)."""
    if isinstance(max_per_key, bool) or not isinstance(max_per_key, int):
        raise InvalidInput(f"{what} must be a whole number, got {max_per_key!r}")
    if not 1 <= max_per_key <= MAX_PER_KEY:
        raise InvalidInput(
            f"{what} {max_per_key} is out of bounds: give a whole number from 1 to "
            f"{MAX_PER_KEY}, how many sessions of the concurrency key may be in flight at "
            f"once (for no limit per key, leave out the key and {what})"
        )
    return max_per_key


def may_start(
    limit: TenantLimit,
    *,
    in_flight: int,
    queued_ahead: bool,
    key_in_flight: int = 0,
    max_per_key: int | None = None,
) -> bool:
    """Whether a new session starts at once rather than waiting as `queued`: its tenant is
    under its in-flight limit, its key under the key's, and no queued session of the
    tenant with at least its priority waits before it (a submit never jumps the queue)."""
    if queued_ahead:
        return False
    if limit.max_in_flight is not None and in_flight >= limit.max_in_flight:
        return False
    return max_per_key is None or key_in_flight < max_per_key


class Room(Value):
    """One tenant as a relay pass sees it: in flight now, how many more it may admit (its
    limit's room, or how many wait, whichever is less), its weight."""

    tenant: str
    in_flight: int
    room: int
    weight: float = 1.0


def fair_shares(rooms: Sequence[Room], *, budget: int) -> list[str]:
    """The order in which one pass admits, a tenant's name per admission, at most `budget`:
    each next admission goes to the tenant with the lowest (in flight + admitted this
    pass) / weight among those with room left, ties to the earlier in `rooms`. A tenant
    with ten times another's weight gets ten times its share of a full fleet, and a
    tenant with nothing in flight is admitted before a busy one."""
    left = {r.tenant: r.room for r in rooms}
    counts = {r.tenant: float(r.in_flight) for r in rooms}
    weights = {r.tenant: r.weight for r in rooms}
    order: list[str] = []
    while len(order) < budget:
        open_ = [r.tenant for r in rooms if left[r.tenant] > 0]
        if not open_:
            break
        tenant = min(open_, key=lambda t: counts[t] / weights[t])
        order.append(tenant)
        left[tenant] -= 1
        counts[tenant] += 1
    return order
