"""Alert engine: per-segment states, baseline exclusions, notification outbox, rule runs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
SURROGATE_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "alert_states",
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("segment_key", sa.String(64), nullable=False),
        sa.Column("segment", JSON_DOCUMENT, nullable=False),
        sa.Column("state", sa.String(24), nullable=False),
        sa.Column("since", TIMESTAMP, nullable=False),
        sa.Column("breaches", sa.Integer(), nullable=False),
        sa.Column("clears", sa.Integer(), nullable=False),
        sa.Column("breach_started_at", TIMESTAMP),
        sa.Column("fired_at", TIMESTAMP),
        sa.Column("notified_at", TIMESTAMP),
        sa.Column("evaluated_at", TIMESTAMP, nullable=False),
        sa.Column("transitions", sa.Integer(), nullable=False),
        sa.Column("announced", sa.Boolean(), nullable=False),
        sa.Column("finding", JSON_DOCUMENT, nullable=False),
        sa.PrimaryKeyConstraint("rule", "segment_key", name="pk_alert_states"),
    )

    op.create_table(
        "alert_exclusions",
        sa.Column("id", SURROGATE_KEY, autoincrement=True, nullable=False),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("segment_key", sa.String(64), nullable=False),
        sa.Column("segment", JSON_DOCUMENT, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("ended_at", TIMESTAMP),
        sa.PrimaryKeyConstraint("id", name="pk_alert_exclusions"),
    )
    op.create_index(
        "ix_alert_exclusions_rule_segment_key", "alert_exclusions", ["rule", "segment_key"],
    )

    op.create_table(
        "alert_notifications",
        sa.Column("id", SURROGATE_KEY, autoincrement=True, nullable=False),
        sa.Column("idempotency_key", sa.String(64), nullable=False),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("segment_key", sa.String(64), nullable=False),
        sa.Column("receiver", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("alert", JSON_DOCUMENT, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", TIMESTAMP, nullable=False),
        sa.Column("delivered_at", TIMESTAMP),
        sa.Column("failed_at", TIMESTAMP),
        sa.Column("last_error", sa.Text()),
        sa.PrimaryKeyConstraint("id", name="pk_alert_notifications"),
        sa.UniqueConstraint("idempotency_key", name="uq_alert_notifications_idempotency_key"),
    )
    op.create_index(
        "ix_alert_notifications_delivered_at_next_attempt_at", "alert_notifications",
        ["delivered_at", "next_attempt_at"],
    )

    op.create_table(
        "alert_rule_runs",
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("evaluated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("rule", name="pk_alert_rule_runs"),
    )


def downgrade() -> None:
    op.drop_table("alert_rule_runs")
    op.drop_index(
        "ix_alert_notifications_delivered_at_next_attempt_at", table_name="alert_notifications",
    )
    op.drop_table("alert_notifications")
    op.drop_index("ix_alert_exclusions_rule_segment_key", table_name="alert_exclusions")
    op.drop_table("alert_exclusions")
    op.drop_table("alert_states")
