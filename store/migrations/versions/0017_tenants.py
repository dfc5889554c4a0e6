"""tenants: every session, dead letter and archived session belongs to one

A `tenant` column (String(64), server default 'default') on the sessions, the dead letters
and the archive's index, so each is read per tenant without a join (the dead letters also
keep who submitted the session, for tokens that see only their own); the sessions and dead
letters are indexed by (tenant, time) for a tenant's listings and quota counts, and the
sessions never ticked (version 0) by tenant, for the count of those waiting to start. Everything
stored before belongs to the `default` tenant.

The dead-letter counts (0009_dlqrollup) are kept per tenant too: the tenant joins their
primary keys. They are derived rows, so the upgrade drops them and counts the dead letters
again (all `default`'s), and the downgrade does the same without the tenant.

Revision ID: 0017_tenants
Revises: 0016_cards
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_tenants"
down_revision = "0016_cards"
branch_labels = None
depends_on = None

DEFAULT = sa.text("'default'")
#: the groupings as this revision knows them (frozen here: the live code may change)
GROUPS = ("code", "kind", "model", "last_tool", "error_signature")
#: the sessions never ticked: a submit counts its tenant's waiting ones (max_queued)
UNSTARTED = "version = 0"
COUNTS, TOTALS = "tickwork_dead_letter_counts", "tickwork_dead_letter_totals"


def upgrade() -> None:
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.add_column(
            sa.Column("tenant", sa.String(length=64), nullable=False, server_default=DEFAULT)
        )
        batch.create_index("ix_tickwork_sessions_tenant_created_at", ["tenant", "created_at"])
    op.create_index(
        "ix_tickwork_sessions_unstarted",
        "tickwork_sessions",
        ["tenant"],
        postgresql_where=sa.text(UNSTARTED),
        sqlite_where=sa.text(UNSTARTED),
    )
    with op.batch_alter_table("tickwork_dead_letters") as batch:
        batch.add_column(
            sa.Column("tenant", sa.String(length=64), nullable=False, server_default=DEFAULT)
        )
        batch.add_column(
            sa.Column(
                "submitted_by", sa.String(length=200), nullable=False, server_default=sa.text("''")
            )
        )
        batch.create_index("ix_tickwork_dead_letters_tenant_at", ["tenant", "at"])
    with op.batch_alter_table("tickwork_archived") as batch:
        batch.add_column(
            sa.Column("tenant", sa.String(length=64), nullable=False, server_default=DEFAULT)
        )
    _recount(with_tenant=True)


def downgrade() -> None:
    _recount(with_tenant=False)
    with op.batch_alter_table("tickwork_archived") as batch:
        batch.drop_column("tenant")
    with op.batch_alter_table("tickwork_dead_letters") as batch:
        batch.drop_index("ix_tickwork_dead_letters_tenant_at")
        batch.drop_column("submitted_by")
        batch.drop_column("tenant")
    op.drop_index("ix_tickwork_sessions_unstarted", table_name="tickwork_sessions")
    with op.batch_alter_table("tickwork_sessions") as batch:
        batch.drop_index("ix_tickwork_sessions_tenant_created_at")
        batch.drop_column("tenant")


def _recount(*, with_tenant: bool) -> None:
    """Make the two count tables again, with or without the tenant in their keys, and
    count the dead letters into them (as 0009_dlqrollup's backfill, per tenant if asked)."""
    op.drop_table(TOTALS)
    op.drop_table(COUNTS)

    def tenant() -> list[sa.Column[str]]:
        return [sa.Column("tenant", sa.String(length=64), nullable=False)] if with_tenant else []

    first = ("tenant",) if with_tenant else ()
    op.create_table(
        COUNTS,
        *tenant(),
        sa.Column("grouping", sa.String(length=32), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("is_null", sa.Boolean(), nullable=False),
        sa.Column("value", sa.String(length=300), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(*first, "grouping", "day", "is_null", "value", name=f"pk_{COUNTS}"),
    )
    op.create_table(
        TOTALS,
        *tenant(),
        sa.Column("grouping", sa.String(length=32), nullable=False),
        sa.Column("is_null", sa.Boolean(), nullable=False),
        sa.Column("value", sa.String(length=300), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(*first, "grouping", "is_null", "value", name=f"pk_{TOTALS}"),
    )
    bind = op.get_bind()
    letters = sa.table(
        "tickwork_dead_letters", sa.column("at"), sa.column("tenant"), *map(sa.column, GROUPS)
    )
    key_names = (*first, "grouping", "is_null", "value")
    days = sa.table(COUNTS, *map(sa.column, (*key_names, "day", "count")))
    totals = sa.table(TOTALS, *map(sa.column, (*key_names, "count")))
    at = letters.c.at
    # SQLite keeps naive UTC text (2026-12-01 03:40:00.123456): its date() is the UTC day
    day = (
        sa.cast(sa.func.timezone("UTC", at), sa.Date)
        if bind.dialect.name == "postgresql"
        else sa.func.date(at)
    )
    by_tenant = [letters.c.tenant] if with_tenant else []
    for by in GROUPS:
        column = letters.c[by]
        key = (*by_tenant, sa.literal(by), column.is_(None), sa.func.coalesce(column, ""))
        bind.execute(
            sa.insert(days).from_select(
                [*key_names, "day", "count"],
                sa.select(*key, day, sa.func.count()).group_by(*by_tenant, day, column),
            )
        )
        bind.execute(
            sa.insert(totals).from_select(
                [*key_names, "count"],
                sa.select(*key, sa.func.count()).group_by(*by_tenant, column),
            )
        )
