"""The store contract as a conformance kit: the behaviour every `Store` must have, as
pytest tests a third-party store runs against itself: docs/CONFORMANCE.md
(`tickwork docs conformance`).

Subclass `StoreContract` in a test module of yours, named `Test...`, and give it a `store`
fixture that yields a fresh, empty store of your implementation; pytest then runs every
check on it:

    import pytest
    from tickwork.testing.store_contract import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self):
            store = MyStore.connect(new_empty_database())
            yield store
            store.close()

The checks use nothing but the `Store` port (`tickwork.store.port`): create, load and list;
claim (the compare-and-swap that runs a tick once, and the start of an idempotent call
in it), leases, renew, start a call, save
(compare-and-swap plus append); decide and cancel; the outbox as the relay reads it; dead
letters; session trees and their join. Each group is a class of its own, one module per
sub-port (`SessionContract`, `TickContract`, `DecisionContract`, `OutboxContract`,
`AdmissionContract`, `DeadLetterContract`, `TreeContract`, `EachJoinContract`), for a store
that implements only some. tickwork's own stores run this same kit
(tests/store/test_contract.py), on SQLite and Postgres. The helpers in
`tickwork.testing.store_ticks` (`think`, `execute`, `run_step`, ...) drive ticks as a worker
does, without its I/O; use them in checks of your own.
"""

from __future__ import annotations

from tickwork.testing.store_contract.admission import AdmissionContract
from tickwork.testing.store_contract.dead_letters import DeadLetterContract
from tickwork.testing.store_contract.decisions import DecisionContract
from tickwork.testing.store_contract.deliveries import EachJoinContract
from tickwork.testing.store_contract.relay import OutboxContract
from tickwork.testing.store_contract.sessions import SessionContract
from tickwork.testing.store_contract.starts import StartContract
from tickwork.testing.store_contract.ticks import TickContract
from tickwork.testing.store_contract.trees import TreeContract

__all__ = [
    "AdmissionContract",
    "DeadLetterContract",
    "DecisionContract",
    "EachJoinContract",
    "OutboxContract",
    "SessionContract",
    "StartContract",
    "StoreContract",
    "TickContract",
    "TreeContract",
]


class StoreContract(
    SessionContract,
    TickContract,
    DecisionContract,
    OutboxContract,
    AdmissionContract,
    DeadLetterContract,
    TreeContract,
    EachJoinContract,
):
    """Every check of the kit: subclass it (as `Test...`) with a `store` fixture."""
