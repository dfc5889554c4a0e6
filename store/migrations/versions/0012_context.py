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
    with op.batch_alter_table("tickwork_steps") as batch:
        batch.add_column(
            sa.Column(
                "kind", sa.String(length=16), nullable=False, server_default=sa.text("'reply'")
            )
        )
        batch.add_column(
            sa.Column("masked_through", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(
            sa.Column(
                "compacted_through", sa.Integer(), nullable=False, server_default=sa.text("0")
            )
        )
    # the defaults fill the rows there are; the schema has none (every save names them)
    with op.batch_alter_table("tickwork_steps") as batch:
        for name in ("kind", "masked_through", "compacted_through"):
            batch.alter_column(name, server_default=None)
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
