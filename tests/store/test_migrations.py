"""The migrations build exactly the schema in `tickwork.store.schema`, and take it down again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, inspect
from tickwork.store import open_store
from tickwork.store.engine import make_engine
from tickwork.store.migrate import downgrade, upgrade
from tickwork.store.schema import metadata

from tests.services import postgres_database
from tickwork.testing.store_ticks import Clock, execute, new_session, reply, think


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database nothing has touched."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    with postgres_database() as url:
        yield url


def _differences(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_of_an_empty_database_builds_exactly_the_schema(empty_url: str) -> None:
    upgrade(empty_url)

    assert _differences(empty_url) == []
    assert {t.name for t in metadata.sorted_tables} <= _tables(empty_url)


def test_downgrade_to_base_leaves_no_tickwork_tables(empty_url: str) -> None:
    upgrade(empty_url)

    downgrade(empty_url, "base")

    assert {t for t in _tables(empty_url) if t.startswith("tickwork_")} == set()
    upgrade(empty_url)
    assert _differences(empty_url) == []


def test_upgrade_twice_is_a_no_op(empty_url: str) -> None:
    upgrade(empty_url)
    upgrade(empty_url)

    assert _differences(empty_url) == []


def test_the_comparison_sees_a_schema_the_migrations_do_not_build(empty_url: str) -> None:
    upgrade(empty_url)
    changed = MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["tickwork_outbox"].append_column(Column("attempts", Integer))

    engine = make_engine(empty_url)
    try:
        with engine.connect() as conn:
            found = compare_metadata(MigrationContext.configure(conn), changed)
    finally:
        engine.dispose()

    assert [(d[0], d[2], d[3].name) for d in found] == [
        ("add_column", "tickwork_outbox", "attempts")
    ]


def test_0024_keeps_the_steps_there_and_reads_them_without_an_estimate(empty_url: str) -> None:
    """A database with steps, upgraded to 0024_prompt_estimate: the steps stay, each with
    no estimate (their prompts are built again for the context policy's scale, as before),
    and the steps stored after it keep theirs."""

    upgrade(empty_url, "0024_prompt_estimate")
    engine = make_engine(empty_url)
    try:
        store = open_store(engine)
        clock = Clock()
        store.create(new_session("s", now=clock()), now=clock())
        think(store, "s", reply(("read_file", {"path": "a"})), now=clock(), prompt_estimate=900)
        execute(store, "s", now=clock())
        before = store.load("s")
        engine.dispose()
        downgrade(empty_url, "0023_archived_lineage")
        assert "prompt_estimate" not in {
            c["name"] for c in inspect(engine).get_columns("tickwork_steps")
        }
        engine.dispose()

        upgrade(empty_url)

        store = open_store(engine)
        after = store.load("s")
        assert [s.prompt_estimate for s in after.steps] == [None]
        assert after.steps == tuple(
            s.model_copy(update={"prompt_estimate": None}) for s in before.steps
        )
        think(store, "s", reply(("read_file", {"path": "b"})), now=clock(), prompt_estimate=1_000)
        assert [s.prompt_estimate for s in store.load("s").steps] == [None, 1_000]
    finally:
        engine.dispose()


def test_0026_gives_the_start_of_an_id_an_index_postgres_uses() -> None:
    """On a table of thousands of sessions, the lookups of a start of an id (the CLI's
    `ids_starting`, the API's `id_prefix`) read the index 0026_id_prefix creates, not every
    row (unless the database's collation is plain C, its primary key cannot serve a LIKE).
    The statements are the ones the store sends, explained with their own values."""
    from sqlalchemy import event

    with postgres_database() as url:
        upgrade(url)
        engine = make_engine(url)
        try:
            store = open_store(engine)
            clock = Clock()
            store.create(new_session("3f9a0c00", now=clock()), now=clock())
            names = [c.name for c in metadata.tables["tickwork_sessions"].columns]
            rest = ", ".join(f'"{n}"' for n in names[1:])
            with engine.begin() as conn:
                conn.exec_driver_sql(
                    f'INSERT INTO tickwork_sessions ("id", {rest}) '
                    f"SELECT md5(g::text), {rest} FROM tickwork_sessions, "
                    "generate_series(1, 5000) AS g"
                )
                conn.exec_driver_sql("ANALYZE tickwork_sessions")
            sent: list[tuple[str, object]] = []

            def keep(_: object, __: object, statement: str, params: object, *___: object) -> None:
                if "tickwork_sessions" in statement and "LIKE" in statement:
                    sent.append((statement, params))

            event.listen(engine, "before_cursor_execute", keep)
            assert store.ids_starting("3f9a0c", limit=6) == ["3f9a0c00"]
            assert [h.id for h in store.list_sessions(id_prefix="3f9a0c0", tenant="default")] == [
                "3f9a0c00"
            ]
            event.remove(engine, "before_cursor_execute", keep)

            assert len(sent) == 2
            with engine.connect() as conn:
                collation = conn.exec_driver_sql(
                    "SELECT datcollate FROM pg_database WHERE datname = current_database()"
                ).scalar()
                for statement, params in sent:
                    plan = "\n".join(
                        r[0] for r in conn.exec_driver_sql("EXPLAIN " + statement, params)
                    )
                    assert "Seq Scan" not in plan, plan
                    if collation not in ("C", "POSIX"):
                        assert "ix_tickwork_sessions_id_prefix" in plan, plan
        finally:
            engine.dispose()


def test_0027_finds_the_cards_given_up_through_an_index(empty_url: str) -> None:
    """Among thousands of cards delivered, or dropped because their session moved on,
    `webhooks ls` (and `resend --all`) finds the few given up through the partial index
    0027_given_up creates, not by reading every delivery; the index holds only those (not
    the cards dropped). The statement is the one the store sends, explained with its own
    values."""
    from sqlalchemy import event, insert
    from tickwork.store.deliveries import MOVED_ON
    from tickwork.store.schema import deliveries, events

    upgrade(empty_url)
    engine = make_engine(empty_url)
    try:
        store = open_store(engine)
        clock = Clock()
        store.create(new_session("s", now=clock()), now=clock())
        at = clock()
        with engine.begin() as conn:
            conn.execute(
                insert(events),
                [
                    {"id": 1000 + i, "session_id": "s", "version": i, "kind": "completed", "at": at}
                    | {"data": {}}
                    for i in range(1, 6001)
                ],
            )
            conn.execute(
                insert(deliveries),
                [
                    {"event_id": 1000 + i, "attempts": 1}
                    | {"last_error": MOVED_ON if i % 3 == 0 else "HTTP 503"}
                    | {"delivered_at": at if i % 500 and i % 3 else None}
                    for i in range(1, 6001)
                ],
            )
            conn.exec_driver_sql("ANALYZE")
        sent: list[tuple[str, object]] = []

        def keep(_: object, __: object, statement: str, params: object, *___: object) -> None:
            if "tickwork_deliveries" in statement:
                sent.append((statement, params))

        event.listen(engine, "before_cursor_execute", keep)
        assert len(store.cards.given_up(limit=1001)) == 8
        event.remove(engine, "before_cursor_execute", keep)

        [(statement, params)] = sent
        explain = "EXPLAIN " if engine.dialect.name == "postgresql" else "EXPLAIN QUERY PLAN "
        with engine.connect() as conn:
            plan = "\n".join(str(r[-1]) for r in conn.exec_driver_sql(explain + statement, params))
        assert "ix_tickwork_deliveries_given_up" in plan, plan
        with engine.connect() as conn:
            made = conn.exec_driver_sql(
                "SELECT pg_get_indexdef('ix_tickwork_deliveries_given_up'::regclass)"
                if engine.dialect.name == "postgresql"
                else "SELECT sql FROM sqlite_master WHERE name = 'ix_tickwork_deliveries_given_up'"
            ).scalar_one()
        assert MOVED_ON in made, made  # the 2,000 cards dropped are not in it
    finally:
        engine.dispose()
