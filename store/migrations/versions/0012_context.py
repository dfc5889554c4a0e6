"""the context a model saw: a step's kind (reply or compaction), its mask and its cut

Revision ID: 0012_context
Revises: 0011_outcome
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_context"
down_revision = "0011_outcome"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # nullable, no defaults: workers of the release before write steps without them during a
    # rolling upgrade (NULL reads as a reply with no mask and no cut)
    with op.batch_alter_table("tickwork_steps") as batch:
        batch.add_column(sa.Column("kind", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("masked_through", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("compacted_through", sa.Integer(), nullable=True))
    op.create_index(
        "ix_tickwork_steps_compactions",
        "tickwork_steps",
        ["session_id", "step"],
        postgresql_where=sa.text("kind = 'compaction'"),
        sqlite_where=sa.text("kind = 'compaction'"),
    )


def downgrade() -> None:
    op.drop_index("ix_tickwork_steps_compactions", table_name="tickwork_steps")
    with op.batch_alter_table("tickwork_steps") as batch:
        batch.drop_column("compacted_through")
        batch.drop_column("masked_through")
        batch.drop_column("kind")
