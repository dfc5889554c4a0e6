"""dead letters counted per day and value of each grouping, and in all, for `dlq stats`

A count of every dead letter is linear in their number whatever the index; the counts per
(UTC day, grouping, value) are kept in the transactions that record and prune dead letters,
and stats sum them. The upgrade counts the dead letters already there.

Revision ID: 0009_dlqrollup
Revises: 0008_lifecycle
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_dlqrollup"
down_revision = "0008_lifecycle"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tickwork_dead_letter_counts",
        sa.Column("grouping", sa.String(length=32), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("is_null", sa.Boolean(), nullable=False),
        sa.Column("value", sa.String(length=300), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "grouping", "day", "is_null", "value", name="pk_tickwork_dead_letter_counts"
        ),
    )
    op.create_table(
        "tickwork_dead_letter_totals",
        sa.Column("grouping", sa.String(length=32), nullable=False),
        sa.Column("is_null", sa.Boolean(), nullable=False),
        sa.Column("value", sa.String(length=300), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "grouping", "is_null", "value", name="pk_tickwork_dead_letter_totals"
        ),
    )
    _count_the_dead_letters_there()


def downgrade() -> None:
    op.drop_table("tickwork_dead_letter_totals")
    op.drop_table("tickwork_dead_letter_counts")


#: the groupings as this revision knows them (frozen here: the live code may change)
GROUPS = ("code", "kind", "model", "last_tool", "error_signature")
TOTAL_KEY = ("grouping", "is_null", "value")


def _count_the_dead_letters_there() -> None:
    """The backfill, as `tickwork.store.dead_letter_counts.rebuild` does it at this revision: per
    grouping, one INSERT ... SELECT ... GROUP BY for the days (the UTC date of `at`) and one
    for all time; the tables as this revision knows them."""
    bind = op.get_bind()
    letters = sa.table("tickwork_dead_letters", sa.column("at"), *map(sa.column, GROUPS))
    days = sa.table("tickwork_dead_letter_counts", *map(sa.column, (*TOTAL_KEY, "day", "count")))
    totals = sa.table("tickwork_dead_letter_totals", *map(sa.column, (*TOTAL_KEY, "count")))
    at = letters.c.at
    # SQLite keeps naive UTC text (2026-12-01 03:40:00.123456): its date() is the UTC day
    day = (
        sa.cast(sa.func.timezone("UTC", at), sa.Date)
        if bind.dialect.name == "postgresql"
        else sa.func.date(at)
    )
    for by in GROUPS:
        column = letters.c[by]
        key = (sa.literal(by), column.is_(None), sa.func.coalesce(column, ""))
        bind.execute(
            sa.insert(days).from_select(
                [*TOTAL_KEY, "day", "count"],
                sa.select(*key, day, sa.func.count()).group_by(day, column),
            )
        )
        bind.execute(
            sa.insert(totals).from_select(
                [*TOTAL_KEY, "count"], sa.select(*key, sa.func.count()).group_by(column)
            )
        )
