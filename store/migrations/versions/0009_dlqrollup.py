"""dead letters counted per day and value of each grouping, for `dlq stats`

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
    _count_the_dead_letters_there()


def downgrade() -> None:
    op.drop_table("tickwork_dead_letter_counts")


#: the groupings as this revision knows them (frozen here: the live code may change)
GROUPS = ("code", "kind", "model", "last_tool", "error_signature")


def _count_the_dead_letters_there() -> None:
    """The backfill, as `store.dead_letter_counts.rebuild` does it at this revision: one
    INSERT ... SELECT ... GROUP BY per grouping, the day being the UTC date of `at`."""
    bind = op.get_bind()
    # SQLite keeps naive UTC text (2026-12-01 03:40:00.123456): its date() is the UTC day
    day = "(at AT TIME ZONE 'UTC')::date" if bind.dialect.name == "postgresql" else "date(at)"
    for by in GROUPS:
        bind.execute(
            sa.text(
                "INSERT INTO tickwork_dead_letter_counts (grouping, day, is_null, value, count) "
                f"SELECT :by, {day}, {by} IS NULL, coalesce({by}, ''), count(*) "
                f"FROM tickwork_dead_letters GROUP BY {day}, {by}"
            ),
            {"by": by},
        )
