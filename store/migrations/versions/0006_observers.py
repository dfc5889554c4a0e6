"""webhook cards through the outbox: tickwork_deliveries

Revision ID: 0006_observers
Revises: 0005_api
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from tickwork.store.schema import UTCDateTime

revision = "0006_observers"
down_revision = "0005_api"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tickwork_deliveries",
        sa.Column(
            "event_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.ForeignKey(
                "tickwork_events.id",
                ondelete="CASCADE",
                name="fk_tickwork_deliveries_event_id_tickwork_events",
            ),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=True),
        sa.Column("delivered_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.PrimaryKeyConstraint("event_id", name="pk_tickwork_deliveries"),
    )
    op.create_index(
        "ix_tickwork_deliveries_due",
        "tickwork_deliveries",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("delivered_at IS NULL AND next_attempt_at IS NOT NULL"),
        sqlite_where=sa.text("delivered_at IS NULL AND next_attempt_at IS NOT NULL"),
    )
    # the cards of sessions waiting now went out from memory before this revision (or no
    # webhook was set): record them delivered, so the upgrade sends none of them again
    op.execute(
        "INSERT INTO tickwork_deliveries (event_id, attempts, delivered_at, last_error) "
        "SELECT id, 0, at, 'before 0006_observers' FROM tickwork_events "
        "WHERE kind = 'approval_requested'"
    )


def downgrade() -> None:
    op.drop_index("ix_tickwork_deliveries_due", table_name="tickwork_deliveries")
    op.drop_table("tickwork_deliveries")
