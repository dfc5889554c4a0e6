"""the `each` join: the order of the children's ends, the results delivered, the call waiting

A spawn with join `each` (docs/DESIGN.md section 16) delivers its children's results to
the parent one observation at a time. Its row in `tickwork_joins` records the ended
children's ids in the order their ends counted (`ends`, a JSON list appended under the
row's lock), how many of them the parent has taken (`delivered`, a cursor into `ends`:
the results not yet delivered are `ends[delivered:]`, and `ended > delivered` finds them
in SQL), and the parent's call suspended on the join (`waiting_call`), which the next end
wakes. Nothing to backfill: only `each` joins read these, and none is stored before.

Revision ID: 0022_each
Revises: 0021_trees
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0022_each"
down_revision = "0021_trees"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("tickwork_joins") as batch:
        batch.add_column(sa.Column("ends", JSON, nullable=True))
        batch.add_column(
            sa.Column("delivered", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(sa.Column("waiting_call", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tickwork_joins") as batch:
        batch.drop_column("waiting_call")
        batch.drop_column("delivered")
        batch.drop_column("ends")
