"""The join of a spawn (docs/DESIGN.md section 16), as a value: the store keeps one row of
it per spawning call (`tickwork_joins`), counts the children's ends on it and wakes the
parent from it exactly once (`tickwork.store.trees`)."""

from __future__ import annotations

from enum import StrEnum

from tickwork.fsm.values import Value


class JoinMode(StrEnum):
    ALL = "all"  #: the parent is woken when every child has ended
    #: the parent is woken once the first child has ended and the others, cancelled at that
    #: moment, have stopped (within a poll period): it learns the first one's result
    FIRST = "first"


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
    #: parent when it records the join's observation
    cost_usd: float = 0.0
    tokens: int = 0
    #: the id of the child that ended first
    first: str | None = None

    @property
    def complete(self) -> bool:
        """Every child has ended: the join wakes its parent."""
        return self.ended >= self.expected
