"""Rollups of the score series, kept by triggers.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27

``score_rollups``: count, sum, sum of squares and earliest sample time of the
``verdict_scores`` rows per metric, score, bucket of sample time (minute and hour),
segment attributes and level (``evalfleet.store.rollup``). The triggers that keep it and
its first fill come with 0021 (its shards), so the table is created here only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from evalfleet.store.rollup import drop_trigger_statements

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    op.create_table(
        "score_rollups",
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("span_s", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.DateTime(timezone=True), nullable=False),
        sa.Column("segment_key", sa.Text(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("attributes", json_type, nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.Column("total_sq", sa.Float(), nullable=False),
        sa.Column("first_ts", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("metric", "name", "span_s", "bucket", "segment_key", "level",
                                name="pk_score_rollups"),
    )


def downgrade() -> None:
    for statement in drop_trigger_statements(op.get_bind().dialect.name):
        op.execute(statement)
    op.drop_table("score_rollups")
