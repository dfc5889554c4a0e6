"""What the Postgres statements of the tick (store/postgres.py) add to the contract suite."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from store import Store
from store.engine import make_engine, normalize_url
from tests.conftest import Clock
from tests.store.conftest import LEASE_S, new_session


def test_a_connection_the_server_dropped_raises_sqlalchemys_error_then_reconnects(
    postgres_url: str, clock: Clock
) -> None:
    """The worker treats SQLAlchemy's errors as "the database is away" (the relay runs the
    tick again); after a restart of Postgres every pooled connection is dead, and the next
    tick must get a working one, not the next dead one."""
    engine = make_engine(postgres_url, pool_size=3, max_overflow=0)
    store = Store(engine)
    try:
        store.create(new_session("dropped-1", now=clock()), now=clock())
        with engine.connect() as a, engine.connect() as b, engine.connect() as c:
            backends = [
                conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() for conn in (a, b, c)
            ]
        admin = normalize_url(postgres_url).replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(admin, autocommit=True) as killer:
            for backend in backends:
                killer.execute("SELECT pg_terminate_backend(%s)", (backend,))

        with pytest.raises(DBAPIError) as raised:
            store.claim("dropped-1", 0, owner="w1", now=clock(), lease_s=LEASE_S)
        assert raised.value.connection_invalidated

        claimed = store.claim("dropped-1", 0, owner="w1", now=clock(), lease_s=LEASE_S)
        assert claimed is not None and claimed.head.id == "dropped-1"
    finally:
        engine.dispose()
