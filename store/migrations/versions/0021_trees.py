"""session trees: a child's root, spawning call and role; the joins

A session may start child sessions and wait for them (docs/DESIGN.md section 16). A child
records its parent in `parent_id` (as a fork does), and what makes it a child: the root of
its tree (`root_id`), the parent's call that spawned it (`spawn_call`) and its role. The
join of each spawn is a row of `tickwork_joins`, counted by the children's last saves.
Nothing to backfill: no session stored before is a child.

Revision ID: 0021_trees
Revises: 0018_admission
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_trees"
down_revision = "0018_admission"
branch_labels = None
depends_on = None

UNWOKEN = "woken_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.add_column(sa.Column("root_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("spawn_call", sa.String(64), nullable=True))
        batch.add_column(
            sa.Column("role", sa.String(64), nullable=False, server_default=sa.text("''"))
        )
        batch.create_index("ix_tickwork_sessions_root_id", ["root_id"], unique=False)
    op.create_table(
        "tickwork_joins",
        sa.Column("parent_id", sa.String(64), nullable=False),
        sa.Column("call_id", sa.String(64), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("expected", sa.Integer(), nullable=False),
        sa.Column("ended", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("first", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("woken_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["tickwork_sessions.id"],
            name="fk_tickwork_joins_parent_id_tickwork_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("parent_id", "call_id", name="pk_tickwork_joins"),
    )
    op.create_index(
        "ix_tickwork_joins_unwoken",
        "tickwork_joins",
        ["parent_id"],
        unique=False,
        postgresql_where=sa.text(UNWOKEN),
        sqlite_where=sa.text(UNWOKEN),
    )


def downgrade() -> None:
    op.drop_index("ix_tickwork_joins_unwoken", table_name="tickwork_joins")
    op.drop_table("tickwork_joins")
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.drop_index("ix_tickwork_sessions_root_id")
        batch.drop_column("role")
        batch.drop_column("spawn_call")
        batch.drop_column("root_id")
