"""Alembic environment: the URL comes from the config `tickwork.store.migrate` builds."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection
from tickwork.store.engine import make_engine
from tickwork.store.schema import metadata


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url, "tickwork.store.migrate sets sqlalchemy.url"
    engine = make_engine(url, keep_prepared=False)  # DDL: the driver's own rollback
    try:
        with engine.begin() as connection:  # a writer's transaction (SQLite: IMMEDIATE)
            run(connection)
    finally:
        engine.dispose()


main()
