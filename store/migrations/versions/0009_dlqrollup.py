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

from store.dead_letter_counts import rebuild

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
    rebuild(op.get_bind())


def downgrade() -> None:
    op.drop_table("tickwork_dead_letter_counts")
