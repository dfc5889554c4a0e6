"""The join of a spawn (docs/DESIGN.md section 16), as a value: the store keeps one row of
it per spawning call (`tickwork_joins`), counts the children's ends on it and wakes the
parent from it (`tickwork.store.trees`): exactly once for `all` and `first`, once per
delivery for `each`."""

from __future__ import annotations

from enum import StrEnum

from tickwork.fsm.values import Value


class JoinMode(StrEnum):
    ALL = "all"  #: the parent is woken when every child has ended
    #: the parent is woken once the first child has ended and the others, cancelled at that
    #: moment, have stopped (within a poll period): it learns the first one's result
    FIRST = "first"
    #: the parent is woken by the first end (the spawn call's observation) and then by the
    #: next end after each `wait_children` call: every child's result reaches it once, in
    #: the order they ended; the others run on meanwhile (agent sessions only)
    EACH = "each"


class Join(Value):
    """The join of one spawn: the parent `parent_id`'s call `call_id` waits for `expected`
    children."""

    parent_id: str
    call_id: str
    mode: JoinMode = JoinMode.ALL
    expected: int
    #: how many children have ended (counted in the transaction of each one's last save)
    ended: int = 0
    #: the ended children's cost and tokens (their subtrees' included), charged to the
    #: parent when it records the join's observation (`all`, `first`)
    cost_usd: float = 0.0
    tokens: int = 0
    #: the id of the child that ended first
    first: str | None = None
    #: the ended children's ids, in the order their ends were counted
    ends: tuple[str, ...] = ()
    #: (`each`) how many of `ends` the parent has taken: their results delivered in its
    #: observations (or, once it ended, their cost charged to it)
    delivered: int = 0
    #: (`each`) the parent's call suspended on the join, which the next end wakes
    waiting: str | None = None

    @property
    def complete(self) -> bool:
        """Every child has ended: the join wakes its parent."""
        return self.ended >= self.expected

    @property
    def pending(self) -> tuple[str, ...]:
        """(`each`) the children ended whose results the parent has not had yet."""
        return self.ends[self.delivered :]

    @property
    def open(self) -> bool:
        """An `each` join with results still to deliver (children running, or ended)."""
        return self.mode is JoinMode.EACH and self.delivered < self.expected

    @property
    def wakes(self) -> bool:
        """The join must wake its parent if the parent waits on it: every child ended
        (`all`, `first`), or a call waits and a result is there for it (`each`)."""
        if self.mode is JoinMode.EACH:
            return self.waiting is not None and bool(self.pending)
        return self.complete


class JoinMark(Value):
    """What a parent's save writes on its `each` join, under the join row's lock: the
    results its observation took (`delivered` moves from `seen`), or the call that
    suspends on the join (`waiting`). The store refuses the save if `delivered` moved
    from `seen`, and wakes the suspending parent in the same transaction if a child ended
    meanwhile: whichever of the two commits second sees the other."""

    parent_id: str
    call_id: str
    seen: int
    delivered: int
    waiting: str | None = None
