"""The fixtures every group of checks uses: your `store`, a clock, a fresh session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tickwork.store.port import Store
from tickwork.testing.store_ticks import Clock, new_session


class Contract:
    """The fixtures every group of checks uses; `store` is yours to give."""

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        pytest.fail(
            "give the contract your store: define a `store` fixture in your subclass of "
            "StoreContract that yields a fresh, empty store; see docs/CONFORMANCE.md "
            "(`tickwork docs conformance`)"
        )
        yield  # pragma: no cover

    @pytest.fixture
    def clock(self) -> Clock:
        return Clock()

    @pytest.fixture
    def session_id(self, store: Store, clock: Clock) -> str:
        """A fresh runnable session at version 0."""
        store.create(new_session("sess-1", now=clock()), now=clock())
        return "sess-1"
