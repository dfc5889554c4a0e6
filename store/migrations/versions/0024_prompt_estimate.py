"""a reply's step keeps the estimate its prompt was sent with

`tickwork.fsm.context.scale` divides the server's count of the last reply's prompt by its
estimate; it built that prompt again at every THINK to estimate it. The step now keeps it.

Revision ID: 0024_prompt_estimate
Revises: 0023_archived_lineage
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_prompt_estimate"
down_revision = "0023_archived_lineage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # nullable, no default, nothing to backfill: a step stored before (and one a worker of
    # the release before writes during a rolling upgrade) reads as None, and `scale` builds
    # its prompt again as it did
    with op.batch_alter_table("tickwork_steps") as batch:
        batch.add_column(sa.Column("prompt_estimate", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tickwork_steps") as batch:
        batch.drop_column("prompt_estimate")
