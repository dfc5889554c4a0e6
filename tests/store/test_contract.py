"""The conformance kit (`tickwork.testing.store_contract`) on tickwork's own stores: the
Core store on SQLite and on Postgres, and the Postgres store on Postgres (the `store`
fixture of conftest.py, one per backend), as a third-party store runs it."""

from __future__ import annotations

import pytest
from tickwork.store import Store

from tickwork.testing.store_contract import StoreContract


class TestStoreContract(StoreContract):
    @pytest.fixture
    def store(self, store: Store) -> Store:
        return store
